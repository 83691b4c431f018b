"""Progressive-experiment methods: named recipes of a growth family (`nexus experiment progressive
--method NAME`). A family registers its own methods in its own file, beside its grower,

    register_method(Method("sparkling", "width", "baseline-tiny", {...spec...}, "what it is", {...overrides...}))

so a new family's methods appear in the experiment without editing it (the first lookup imports every
module of this package, and the installed plugins). Which models a method applies to is its family's
spec (`applies_to`), not written down here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..plugins import Registry


@dataclass(frozen=True)
class Method:
    name: str
    family: str  # growth family registered in nexus.growth
    preset: str  # the small model's preset
    spec: dict  # growth spec (without "family")
    description: str
    overrides: dict = field(default_factory=dict)  # dotted overrides that make the preset "small"
    # peak lrs tuned for the method's own shapes at the quick budget: {"small": lr (also the grown run's, as
    # SPARKLING keeps the pre-expansion lr), "scratch": lr}; empty = untuned (the preset's lr everywhere)
    lrs: dict = field(default_factory=dict)


PROGRESSIVE_METHODS: Registry[Method] = Registry("--method", __package__)


def register_method(*methods: Method) -> None:
    """Register progressive-experiment methods (each under its own name)."""
    for m in methods:
        PROGRESSIVE_METHODS.register(m.name)(m)
