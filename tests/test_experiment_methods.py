"""The method table of `nexus experiment progressive` agrees with the installed growth families."""

from __future__ import annotations

import pytest

from nexus.config import ConfigError
from nexus.experiments import progressive as P


@pytest.mark.parametrize("name", sorted(P.methods()))
def test_every_method_plans_a_bigger_target(name):
    """The method table agrees with its growth family: the dry-run growth succeeds (nothing trains) and
    the target model costs more per token than the small one."""
    from nexus.config import RunConfig
    from nexus.experiments.curves import train_flops_per_token
    from nexus.growth import families

    if P.methods()[name].family not in families():
        with pytest.raises(ConfigError, match="not installed"):
            P.plan_progressive(name)
        return
    plan = P.plan_progressive(name, tokens=8192, out="unused")
    small = RunConfig.from_dict(plan["configs"]["0"]["grown"])
    large = RunConfig.from_dict(plan["configs"]["0"]["scratch"])
    grow = small.train.hook("growth")
    assert grow["at"] == plan["grow_step"] and grow["spec"]["family"] == P.methods()[name].family
    assert large.train.hook("growth") is None and large.growth_history == []
    assert train_flops_per_token(large.model, 128) > train_flops_per_token(small.model, 128)
