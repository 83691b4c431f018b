"""Configs written before each kind owned its options still load, into the same model.

tests/data/preset_configs_v1.json is every preset's `RunConfig.to_dict()` as the code before this form
wrote it (generated once from that code, an input, not an expected result): model.attention held every
attention kind's fields without a kind, model.projection every projection kind's fields, model.moe the
experts' options (n_experts 0: the dense MLP), model.arch a bare name and model.recurrent the recurrent
architecture's options. Each must
migrate to the config the preset builds today, and the model built from the migrated old config must be
the preset's model: parameter names and order, seeded init, logits, every gradient, greedy generation.
"""

import hashlib
import json
from pathlib import Path

import pytest
import torch

from nexus.config import AttentionOptions, ConfigError, MLPOptions, RunConfig
from nexus.config_migration import saved_run_config
from nexus.config_overrides import apply_override
from nexus.models import build_model
from nexus.presets import get_preset, names

OLD = json.loads((Path(__file__).parent / "data" / "preset_configs_v1.json").read_text())


def _preset_as_saved_then(name: str) -> RunConfig:
    """Today's preset with the one deliberate change since the old form undone: train.dtype's default became auto
    (issue 51), and an old config's explicit float32 keeps meaning float32 (tests/test_dtype_auto.py)."""
    cfg = get_preset(name)
    if cfg.train.dtype == "auto":
        cfg.train.dtype = "float32"
    return cfg


def test_every_presets_old_config_migrates_to_the_presets_config_today():
    assert set(OLD) <= set(names())  # a renamed preset would silently drop out of this test
    bad = [n for n, d in OLD.items() if saved_run_config(d) != _preset_as_saved_then(n)]
    assert bad == []
    assert all(saved_run_config(d).train.dtype == d["train"]["dtype"] for d in OLD.values())


def test_the_old_form_had_no_kinds_and_the_new_form_names_them():
    """What the migration moved: the old dicts are the old form, and today's dicts are their own form."""
    assert all("kind" not in d["model"]["attention"] for d in OLD.values())
    assert any(d["model"]["attention"]["order"] > 1 for d in OLD.values())
    for n in OLD:
        new = get_preset(n).to_dict()["model"]
        assert new["attention"]["kind"] in ("standard", "higher_order") and "kind" in new["projection"]
        assert "moe" not in new and new["mlp"]["kind"] == ("moe" if OLD[n]["model"]["moe"]["n_experts"] else "dense")
        assert "recurrent" not in new and new["arch"]["kind"] == OLD[n]["model"]["arch"]
        assert saved_run_config(get_preset(n).to_dict()) == get_preset(n)


def _run(cfg: RunConfig):
    torch.manual_seed(0)
    model = build_model(cfg.model)
    ids = torch.randint(0, cfg.model.vocab_size, (2, 16), generator=torch.Generator().manual_seed(1))
    out = model(ids, labels=ids)
    out.loss.backward()
    gen = model.eval().generate(ids[:1, :4], max_new_tokens=6, temperature=0.0)
    return model, out.logits.detach(), gen


# one small preset per kind the migration touches (standard / higher-order attention, the three projection
# kinds, the MoE MLP) and the recurrent architecture
@pytest.mark.parametrize(
    "name",
    ["baseline-micro", "mqar-order2", "nexusformer-micro", "tokenformer-micro", "sparkling-moe-tiny", "nexus-micro"],
)
def test_model_from_the_migrated_old_config_is_the_presets_model(name):
    old_model, old_logits, old_gen = _run(saved_run_config(OLD[name]))
    model, logits, gen = _run(get_preset(name))
    old_params, params = list(old_model.named_parameters()), list(model.named_parameters())
    assert [n for n, _ in old_params] == [n for n, _ in params]
    for (n, a), (_, b) in zip(old_params, params):
        assert torch.equal(a, b), n
        assert (a.grad is None and b.grad is None) or torch.equal(a.grad, b.grad), n
    assert torch.equal(old_logits, logits) and torch.equal(old_gen, gen)


def test_a_checkpoint_with_an_old_config_loads(tmp_path):
    from nexus.checkpoint import load_checkpoint, save_checkpoint
    from nexus.data.tokenizer import ByteTokenizer

    cfg = get_preset("mqar-order2")
    torch.manual_seed(0)
    model = build_model(cfg.model)
    ckpt = save_checkpoint(tmp_path / "ck", model, cfg, ByteTokenizer())
    (ckpt / "config.json").write_text(json.dumps(OLD["mqar-order2"]))
    meta = json.loads((ckpt / "meta.json").read_text())  # the old writer's digest of its own config.json
    meta["sha256"]["config.json"] = hashlib.sha256((ckpt / "config.json").read_bytes()).hexdigest()
    (ckpt / "meta.json").write_text(json.dumps(meta))
    loaded, loaded_cfg, _ = load_checkpoint(ckpt)
    assert loaded_cfg == _preset_as_saved_then("mqar-order2")
    assert all(torch.equal(a, b) for a, b in zip(loaded.state_dict().values(), model.state_dict().values()))


def test_an_inert_old_value_is_named_when_dropped(capsys):
    """Order 1 with ho_shared=false: the old code ignored ho_shared; the migration says it drops it."""
    old = json.loads(json.dumps(OLD["baseline-micro"]))
    old["model"]["attention"]["ho_shared"] = False
    cfg = saved_run_config(old)
    assert cfg.model.attention == AttentionOptions()
    assert "dropped model.attention.ho_shared=False" in capsys.readouterr().err


def test_an_old_moe_section_without_experts_is_the_dense_mlp_and_names_what_it_drops(capsys):
    old = json.loads(json.dumps(OLD["baseline-micro"]))
    old["model"]["moe"]["top_k"] = 4  # no effect without experts
    assert saved_run_config(old).model.mlp == MLPOptions()
    assert "dropped model.moe.top_k=4" in capsys.readouterr().err
    old["model"]["moe"]["n_experts"] = 8
    mlp = saved_run_config(old).model.mlp
    assert (mlp.kind, mlp.n_experts, mlp.top_k) == ("moe", 8, 4)
    old["model"]["mlp"] = {"kind": "dense"}
    with pytest.raises(ConfigError, match=r"model.moe and model.mlp given together"):
        saved_run_config(old)


def test_an_override_of_the_old_moe_section_names_where_it_moved():
    with pytest.raises(ConfigError, match=r"model.moe.n_experts moved into model.mlp \(valid: --model.mlp.kind moe"):
        apply_override(RunConfig(), "model.moe.n_experts", "8")


def test_an_old_architecture_section_moves_into_model_arch_or_is_named_when_dropped(capsys):
    old = json.loads(json.dumps(OLD["nexus-micro"]))
    assert old["model"]["arch"] == "recurrent" and old["model"]["recurrent"]["t_inner"] == 3
    assert saved_run_config(old).model.arch.t_inner == 3
    old = json.loads(json.dumps(OLD["baseline-micro"]))
    old["model"]["recurrent"]["t_inner"] = 9  # a transformer ignored it
    assert saved_run_config(old).model == get_preset("baseline-micro").model
    assert "dropped model.recurrent.t_inner=9" in capsys.readouterr().err


def test_the_old_spelling_of_an_architecture_option_still_sets_it():
    """`--set recurrent.t_inner=20` at load, `--model.recurrent.n_sup` on a command line: written before
    model.arch held the options, they address model.arch while it is that architecture."""
    cfg = get_preset("nexus-micro")
    apply_override(cfg, "model.recurrent.t_inner", "7")
    assert cfg.model.arch.t_inner == 7
    cfg = RunConfig()
    with pytest.raises(
        ConfigError,
        match=r"model.recurrent.t_inner is an option of arch kind recurrent, not of "
        r"'transformer' \(valid: --model.arch recurrent before it\)",
    ):
        apply_override(cfg, "model.recurrent.t_inner", "7")
    apply_override(cfg, "model.arch", "recurrent")  # a bare name is the kind
    assert cfg.model.arch.kind == "recurrent" and cfg.model.arch.t_inner == 6


def test_a_partial_config_file_in_the_old_architecture_form_applies_to_the_presets_architecture(tmp_path):
    from nexus.config_overrides import merge_config_file

    path = tmp_path / "depth.yaml"
    path.write_text("model:\n  recurrent: {t_inner: 5}\n")
    cfg = merge_config_file(get_preset("nexus-micro"), path)
    assert cfg.model.arch.t_inner == 5 and cfg.model.arch.n_sup == get_preset("nexus-micro").model.arch.n_sup
    with pytest.raises(ConfigError, match=r"model.recurrent.t_inner is an option of arch kind recurrent"):
        merge_config_file(get_preset("baseline-micro"), path)


def test_an_option_of_another_kind_names_the_kind_that_has_it():
    cfg = RunConfig()
    with pytest.raises(
        ConfigError,
        match=r"model.attention.order is an option of attention kind higher_order.*"
        r"--model.attention.kind higher_order before it",
    ):
        apply_override(cfg, "model.attention.order", "2")
    apply_override(cfg, "model.attention.gate", "headwise")
    apply_override(cfg, "model.attention.kind", "higher_order")
    apply_override(cfg, "model.attention.order", "3")
    assert cfg.model.attention.gate == "headwise" and cfg.model.attention.order == 3  # gate: every kind's option
    with pytest.raises(ConfigError, match=r"model.attention.kind='nope' \(valid: standard\|higher_order"):
        apply_override(cfg, "model.attention.kind", "nope")
    with pytest.raises(ConfigError, match=r"model.attention.ho_targets='k' \(valid: q\|qk\|qkv\)"):
        apply_override(cfg, "model.attention.ho_targets", "k")


def test_a_config_file_in_either_form_applies_on_top_of_a_preset(tmp_path):
    import yaml

    from nexus.config_overrides import merge_config_file

    for form, d in (("new", get_preset("nexus-qk-tiny").to_dict()), ("old", OLD["nexus-qk-tiny"])):
        d = json.loads(json.dumps(d))
        d["model"].pop("growth_state")  # set by growth only: a config file may not name it
        del d["preset"], d["growth_history"]  # top-level records, not settings
        path = tmp_path / f"{form}.yaml"
        path.write_text(yaml.safe_dump(d, sort_keys=False))
        cfg = merge_config_file(get_preset("baseline-tiny"), path)
        want = get_preset("nexus-qk-tiny") if form == "new" else _preset_as_saved_then("nexus-qk-tiny")
        assert cfg.model == want.model and cfg.train == want.train  # the old file names train.dtype float32
    partial = tmp_path / "partial.yaml"  # names its kind and one option: the preset's other options stay
    partial.write_text("model:\n  attention: {kind: higher_order, order: 3}\n")
    cfg = merge_config_file(get_preset("nexus-qk-tiny"), partial)
    assert cfg.model.attention.order == 3 and cfg.model.attention.ho_shared is False


@pytest.mark.parametrize("kind", [["mqa"], {"name": "mqa"}])
def test_a_kind_that_is_not_a_name_is_one_field_naming_line(kind):
    """A list or mapping as a section's kind once escaped as `TypeError: unhashable type`."""
    with pytest.raises(ConfigError, match=r"^model\.attention\.kind=.* \(valid: one of .*standard"):
        saved_run_config({"model": {"attention": {"kind": kind}}})
