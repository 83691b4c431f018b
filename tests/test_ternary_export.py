"""Packed ternary export: exact round trip, <= 2.1 bits per ternary weight, corrupted files rejected."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from nexus.checkpoint import CheckpointError, save_checkpoint
from nexus.config import ModelConfig, RunConfig
from nexus.data.tokenizer import ByteTokenizer
from nexus.export.ternary import export_ternary, load_ternary, pack_codes, unpack_codes
from nexus.models import build_model
from nexus.models.bitlinear import PackedTernaryLinear
from nexus.models.recurrent import RecurrentOptions


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from([-1, 0, 1]), min_size=1, max_size=97), st.sampled_from(["2bit", "base3"]))
def test_pack_unpack_roundtrip(codes, packing):
    codes = np.array(codes, dtype=np.int8)
    packed = pack_codes(codes, packing)
    assert len(packed) == -(-len(codes) // (4 if packing == "2bit" else 5))
    assert np.array_equal(unpack_codes(packed, len(codes), packing, "x"), codes)


def _checkpoint(tmp_path, act_quant=False, tie=True, ffn_hidden=80):
    torch.manual_seed(0)
    cfg = RunConfig(
        model=ModelConfig(
            arch=RecurrentOptions(n_sup=2, t_inner=2, act_quant=act_quant),
            d_model=32,
            n_layers=2,
            n_heads=1,
            ffn_hidden=ffn_hidden,
            tie_embeddings=tie,
        )
    )
    model = build_model(cfg.model)
    return save_checkpoint(tmp_path / "ckpt", model, cfg, ByteTokenizer()), model


@pytest.mark.parametrize("packing,act_quant,tie", [("2bit", False, True), ("base3", True, False)])
def test_packed_model_gives_identical_logits(tmp_path, packing, act_quant, tie):
    ckpt, model = _checkpoint(tmp_path, act_quant, tie)
    report = export_ternary(ckpt, tmp_path / "model.tern", packing=packing)
    packed, cfg, tok = load_ternary(report["path"], kernel="dense")
    assert any(isinstance(m, PackedTernaryLinear) for m in packed.modules())
    assert isinstance(tok, ByteTokenizer)
    x = torch.randint(0, 259, (2, 11), generator=torch.Generator().manual_seed(0))
    model.eval()
    with torch.no_grad():
        assert torch.equal(packed(x).logits, model(x).logits)
        assert torch.equal(packed.generate(x[:1, :3], 6, temperature=0), model.generate(x[:1, :3], 6, temperature=0))


def test_report_is_the_true_file_size_and_bits_per_weight(tmp_path):
    ckpt, model = _checkpoint(tmp_path)
    for packing, limit in (("2bit", 2.1), ("base3", 1.7)):
        report = export_ternary(ckpt, tmp_path / f"m.{packing}", packing=packing)
        assert report["file_bytes"] == (tmp_path / f"m.{packing}").stat().st_size
        n_ternary = sum(m.weight.numel() for m in model.modules() if getattr(m, "is_ternary", False))
        assert report["ternary_params"] == n_ternary
        assert report["bits_per_ternary_weight"] <= limit
        # everything else (embedding, norms, conv) is stored at fp32 and counted in the file
        n_other = sum(p.numel() for p in model.parameters()) - n_ternary
        assert report["other_params"] == n_other
        assert report["file_bytes"] >= report["packed_ternary_bytes"] + 4 * n_other


def test_export_rejects_a_model_without_ternary_layers(tmp_path):
    from nexus.config import ConfigError

    cfg = RunConfig(
        model=ModelConfig(arch=RecurrentOptions(ternary=False), d_model=16, n_layers=1, n_heads=1, ffn_hidden=32)
    )
    ckpt = save_checkpoint(tmp_path / "c", build_model(cfg.model), cfg, ByteTokenizer())
    with pytest.raises(ConfigError, match="BitLinear"):
        export_ternary(ckpt, tmp_path / "x.tern")
    assert not (tmp_path / "x.tern").exists()


@pytest.mark.parametrize("damage", ["flip_payload", "truncate", "garbage", "missing"])
def test_corrupted_packed_file_is_one_clear_error(tmp_path, damage):
    ckpt, _ = _checkpoint(tmp_path)
    path = tmp_path / "m.tern"
    export_ternary(ckpt, path)
    data = bytearray(path.read_bytes())
    if damage == "flip_payload":
        data[-10] ^= 0xFF
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(bytes(data[: len(data) // 2]))
    elif damage == "garbage":
        path.write_bytes(b"not a ternary file at all" * 3)
    else:
        path.unlink()
    with pytest.raises(CheckpointError, match="m.tern"):
        load_ternary(path)


def test_cli_export_format_ternary(tmp_path, capsys):
    """`nexus export --format ternary` (the HF engineer's CLI) dispatches to export_ternary."""
    import json

    import nexus.cli

    ckpt, _ = _checkpoint(tmp_path)
    out = tmp_path / "cli.tern"
    rc = nexus.cli.main(["export", "--checkpoint", str(ckpt), "--format", "ternary", "--out", str(out), "--json"])
    assert rc == 0 and out.is_file()
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["file_bytes"] == out.stat().st_size
    load_ternary(out)


@pytest.mark.parametrize("kernel", ["int8", "int4"])
@pytest.mark.parametrize(
    "act_quant,input_norm,bias", [(False, False, False), (True, False, True), (False, True, False)]
)
def test_low_bit_kernels_match_reference_bitlinear_to_bf16_precision(act_quant, input_norm, bias, kernel):
    """The fast decode kernels against the paper's quantizer (reference ternary weights, fp32 matmul):
    bf16 activations and products bound each output's error by a few bf16 ulps of sum_k |x_k w_k|."""
    from nexus.models.bitlinear import BitLinear
    from nexus.models.reference.recurrent_reference import ref_act_quant, ref_rmsnorm, ref_ternary

    torch.manual_seed(0)
    lin = BitLinear(96, 48, bias=bias, act_quant=act_quant, input_norm=input_norm)  # shapes int4 takes
    if bias:
        torch.nn.init.normal_(lin.bias)
    codes = torch.round(lin.weight.detach() / lin.weight.detach().abs().mean()).clamp(-1, 1)
    gamma = lin.weight.detach().abs().mean()
    fast = PackedTernaryLinear(
        codes, gamma, lin.bias.detach() if bias else None, act_quant, input_norm, lin.norm_eps, kernel=kernel
    )
    assert fast.kernel == kernel
    x = torch.randn(3, 5, 96) * 4
    xr = ref_rmsnorm(x, None, lin.norm_eps) if input_norm else x
    xr = ref_act_quant(xr) if act_quant else xr
    w = ref_ternary(lin.weight.detach())
    want = xr @ w.t() + (lin.bias.detach() if bias else 0)
    got = fast(x)
    bound = 4 * 2.0**-8 * (xr.abs() @ w.abs().t()) + 1e-6
    assert got.shape == want.shape and got.dtype == torch.float32
    assert ((got - want).abs() <= bound).all()
    assert (got - want).abs().max() > 0  # it is the bf16 kernel, not the fp32 one


@pytest.mark.parametrize("kernel", ["int8", "int4"])
def test_low_bit_packed_model_tracks_the_exact_model(tmp_path, kernel):
    ckpt, model = _checkpoint(tmp_path, ffn_hidden=96)  # every matrix in shapes the int4 kernel packs
    report = export_ternary(ckpt, tmp_path / "model.tern")
    fast, _, _ = load_ternary(report["path"], kernel=kernel)
    exact, _, _ = load_ternary(report["path"], kernel="dense")
    assert {m.kernel for m in fast.modules() if isinstance(m, PackedTernaryLinear)} == {kernel}
    x = torch.randint(0, 259, (2, 11), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        a, b = fast(x).logits, exact(x).logits
    assert (a - b).abs().max() <= 0.02 * b.abs().max()
    assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.9


def test_unknown_kernel_is_a_config_error(tmp_path):
    from nexus.config import ConfigError

    ckpt, _ = _checkpoint(tmp_path)
    report = export_ternary(ckpt, tmp_path / "model.tern")
    with pytest.raises(ConfigError, match="kernel='fp8'"):
        load_ternary(report["path"], kernel="fp8")


@pytest.mark.parametrize("packing,bits", [("2bit", 2.0), ("base3", 1.6)])
def test_cli_packing_option_round_trips(tmp_path, capsys, packing, bits):
    """`--packing base3` writes 5 weights per byte and the file reloads to the checkpoint's exact logits."""
    import json

    import nexus.cli
    from nexus.cli.export import PACKINGS as CLI_PACKINGS
    from nexus.export.ternary import PACKINGS

    assert CLI_PACKINGS == PACKINGS
    ckpt, model = _checkpoint(tmp_path)
    out = tmp_path / f"cli.{packing}"
    rc = nexus.cli.main(
        ["export", "--checkpoint", str(ckpt), "--format", "ternary", "--packing", packing, "--out", str(out), "--json"]
    )
    assert rc == 0
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert report["packing"] == packing
    n_ternary = sum(m.weight.numel() for m in model.modules() if getattr(m, "is_ternary", False))
    per_byte = 4 if packing == "2bit" else 5
    # each tensor is padded to whole bytes on its own
    n_bytes = sum(-(-m.weight.numel() // per_byte) for m in model.modules() if getattr(m, "is_ternary", False))
    assert report["packed_ternary_bytes"] == n_bytes
    assert report["bits_per_ternary_weight"] == pytest.approx(bits, abs=0.01) and n_ternary > 1000
    packed, _, _ = load_ternary(out, kernel="dense")
    x = torch.randint(0, 259, (2, 9), generator=torch.Generator().manual_seed(1))
    model.eval()
    with torch.no_grad():
        assert torch.equal(packed(x).logits, model(x).logits)


def test_cli_rejects_a_bad_packing(tmp_path, capsys):
    import nexus.cli

    ckpt, _ = _checkpoint(tmp_path)
    out = tmp_path / "bad.tern"
    rc = nexus.cli.main(
        ["export", "--checkpoint", str(ckpt), "--format", "ternary", "--packing", "3bit", "--out", str(out)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--packing" in err[0] and "base3" in err[0] and not out.exists()
    rc = nexus.cli.main(
        ["export", "--checkpoint", str(ckpt), "--format", "hf", "--packing", "base3", "--out", str(out)]
    )
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and "--packing=base3" in err[0] and not out.exists()


def test_int4_takes_int8_where_it_cannot_pack_and_says_so():
    def packed(n_out, n_in, kernel):
        return PackedTernaryLinear(torch.ones(n_out, n_in), torch.tensor(0.5), None, False, False, 1e-5, kernel).kernel

    assert packed(16, 32, "int4") == "int4"
    assert packed(24, 512, "int4") == packed(8, 512, "int4") == packed(16, 48, "int4") == "int8"  # N % 16, K % 32


@pytest.mark.parametrize("n_in", [40, 37])
def test_int8_is_not_used_where_torchs_kernel_reads_past_the_row(n_in):
    """torch 2.13's int8 kernel returned NaN / 1e38 at K = 40 and crashed at K = 37 (issue 41): such a
    layer takes another kernel, and its outputs are the paper's matmul."""
    from nexus.models.reference.recurrent_reference import ref_ternary

    w = torch.randn(16, n_in, generator=torch.Generator().manual_seed(n_in))
    gamma = w.abs().mean()
    codes = torch.clamp(torch.round(w / gamma), -1, 1)
    for kernel in ("int4", "int8"):
        layer = PackedTernaryLinear(codes, gamma, None, False, False, 1e-5, kernel)
        assert layer.kernel not in ("int4", "int8")
        x = torch.randn(2, n_in)
        with torch.no_grad():
            torch.testing.assert_close(layer(x), x @ ref_ternary(w).t(), rtol=1e-5, atol=1e-5)


def test_auto_kernel_is_measured_and_printed_and_cached(tmp_path, monkeypatch):
    """load_ternary(kernel="auto") times every candidate on the model's matrices, takes the fastest, says
    so in one line naming the CPU, and a second load in the process reuses the measurement."""
    from nexus.models import ternary_kernel_choice
    from nexus.models.ternary_kernel_choice import candidates

    monkeypatch.setattr(ternary_kernel_choice, "_cache", {})  # no measurement from an earlier test
    ckpt, _ = _checkpoint(tmp_path, ffn_hidden=96)
    report = export_ternary(ckpt, tmp_path / "model.tern")
    lines = []
    model, _, _ = load_ternary(report["path"], kernel="auto", say=lines.append)
    choice = model.kernel_choice
    assert set(choice.ms) == set(candidates()) and choice.kernel == min(choice.ms, key=choice.ms.get)
    assert choice.ms[choice.kernel] <= choice.ms["dense"] and not choice.cached
    assert {m.kernel for m in model.modules() if isinstance(m, PackedTernaryLinear)} == {choice.kernel}
    assert len(lines) == 1 and f"ternary kernel auto -> {choice.kernel}" in lines[0]
    assert "dense" in lines[0] and f"capability {torch.backends.cpu.get_cpu_capability()}" in lines[0]
    again = []
    model2, _, _ = load_ternary(report["path"], kernel="auto", say=again.append)
    assert model2.kernel_choice.cached and model2.kernel_choice.kernel == choice.kernel
    assert "earlier load" in again[0]
