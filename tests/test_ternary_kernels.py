"""The fp32 ternary decode kernels (models/ternary_kernels.py) against the BitNet b1.58 definition
(seed 004: gamma = mean|W|, W_q = clamp(round(W / gamma), -1, 1) * gamma), computed here in float64.

Tolerance: the kernels sum K fp32 products; recursive summation of K terms errs by at most K * 2^-24 *
sum |terms| (Higham, Accuracy and Stability, eq. 4.4). The 2-bit kernel sums x_k * u_k with u = c + 1
in {0, 1, 2} and subtracts sum x_k, three such sums of terms bounded by gamma * |x_k| in all, hence
(3K + 4) * 2^-24 * gamma * sum_k |x_k| (the 4 covers the final subtraction, the scale and the bias)."""

import pytest
import torch

from nexus.models import ternary_kernels
from nexus.models.bitlinear import PackedTernaryLinear
from nexus.models.reference.recurrent_reference import ref_act_quant, ref_rmsnorm

pytestmark = pytest.mark.skipif(not ternary_kernels.available(), reason="numba is not installed")
FP32_KERNELS = ["fp32-2bit", "fp32-int8"]


def _paper_ternary(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(codes, gamma) of BitNet b1.58 in float64: gamma = mean|W|, codes = clamp(round(W / gamma), -1, 1)."""
    w = w.double()
    gamma = w.abs().mean()
    return torch.clamp(torch.round(w / gamma), -1, 1), gamma


@pytest.mark.parametrize("kernel", FP32_KERNELS)
@pytest.mark.parametrize(
    "n_out,n_in,lead", [(48, 96, (1,)), (7, 37, (1,)), (33, 130, (3, 5)), (16, 8, (2, 1)), (5, 64, (8,))]
)
@pytest.mark.parametrize(
    "act_quant,input_norm,bias", [(False, False, False), (True, False, True), (False, True, False)]
)
def test_fp32_kernels_match_the_paper_matmul_to_fp32_rounding(kernel, n_out, n_in, lead, act_quant, input_norm, bias):
    """Odd K (padding of the 2-bit planes), one row (the fused decode loop) and several (the 2 x 4 tiles,
    with M and N that leave partial tiles)."""
    g = torch.Generator().manual_seed(n_out * n_in)
    w = torch.randn(n_out, n_in, generator=g) * 0.05
    codes, gamma = _paper_ternary(w)
    b = torch.randn(n_out, generator=g) if bias else None
    layer = PackedTernaryLinear(codes, gamma.float(), b, act_quant, input_norm, 1e-6, kernel=kernel)
    assert layer.kernel == kernel
    x = torch.randn(*lead, n_in, generator=g) * 3
    xr = ref_rmsnorm(x, None, 1e-6) if input_norm else x
    xr = (ref_act_quant(xr) if act_quant else xr).double()
    g32 = gamma.float().double()  # the layer keeps gamma in fp32, as the export file does
    want = xr @ (codes * g32).t() + (b.double() if bias else 0)
    with torch.no_grad():
        got = layer(x)
    assert got.shape == want.shape and got.dtype == torch.float32
    bound = (3 * n_in + 4) * 2.0**-24 * g32 * xr.abs().sum(-1, keepdim=True) + 4 * 2.0**-24 * want.abs()
    assert ((got.double() - want).abs() <= bound).all()


@pytest.mark.parametrize("kernel", FP32_KERNELS)
def test_fp32_kernels_are_inference_only(kernel):
    layer = PackedTernaryLinear(torch.ones(4, 8), torch.tensor(0.5), None, False, False, 1e-5, kernel=kernel)
    with pytest.raises(RuntimeError, match="inference-only"):
        layer(torch.randn(2, 8, requires_grad=True))


def test_planes2_layout_puts_four_column_planes_in_each_byte():
    """Byte j of a row holds u = c + 1 of columns j, j + K4, j + 2 K4, j + 3 K4 at bits 0, 2, 4, 6."""
    codes = torch.tensor([[-1, 0, 1, 1, 0, -1, 1]])  # K = 7 -> K4 = 2, one padding column (u = 1)
    packed = ternary_kernels.pack_planes2(codes)
    u = [0, 1, 2, 2, 1, 0, 2, 1]
    assert packed.tolist() == [[u[0] | u[2] << 2 | u[4] << 4 | u[6] << 6, u[1] | u[3] << 2 | u[5] << 4 | u[7] << 6]]


@pytest.mark.parametrize("kernel", FP32_KERNELS)
@pytest.mark.parametrize("packing", ["2bit", "base3"])
def test_packed_model_on_the_fp32_kernels_decodes_like_the_exact_model(tmp_path, kernel, packing):
    """Both file packings: the prompt (several rows, the tiled loop) and one-token decode steps (the fused
    loop) agree with the exact model to fp32 rounding, and greedy decoding picks the same tokens."""
    from nexus.checkpoint import save_checkpoint
    from nexus.config import ModelConfig, RunConfig
    from nexus.data.tokenizer import ByteTokenizer
    from nexus.export.ternary import export_ternary, load_ternary
    from nexus.models import build_model
    from nexus.models.recurrent import RecurrentOptions

    torch.manual_seed(0)
    cfg = RunConfig(
        model=ModelConfig(arch=RecurrentOptions(n_sup=2, t_inner=2), d_model=32, n_layers=2, n_heads=1, ffn_hidden=80)
    )
    ckpt = save_checkpoint(tmp_path / "ckpt", build_model(cfg.model), cfg, ByteTokenizer())
    path = export_ternary(ckpt, tmp_path / "m.tern", packing=packing)["path"]
    fast, _, _ = load_ternary(path, kernel=kernel, say=None)
    exact, _, _ = load_ternary(path, kernel="dense", say=None)
    assert {m.kernel for m in fast.modules() if isinstance(m, PackedTernaryLinear)} == {kernel}
    prompt = torch.randint(0, 259, (1, 9), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        a, b = fast(prompt).logits, exact(prompt).logits
        assert (a - b).abs().max() <= 1e-4 * b.abs().max()
        caches = fast.new_cache(), exact.new_cache()
        fast(prompt, cache=caches[0]), exact(prompt, cache=caches[1])
        step = prompt[:, :1]
        a, b = fast(step, cache=caches[0]).logits, exact(step, cache=caches[1]).logits
    assert (a - b).abs().max() <= 1e-4 * b.abs().max()
    assert torch.equal(fast.generate(prompt, 8, temperature=0), exact.generate(prompt, 8, temperature=0))


def test_nexus_generate_prints_the_kernel_choice_and_takes_a_kernel(tmp_path, capsys):
    """`nexus generate` on a packed file says which kernel auto took, why and on which CPU; --kernel
    picks one; --kernel with a checkpoint directory is refused in one line."""
    import nexus.cli
    from nexus.checkpoint import save_checkpoint
    from nexus.cli.generate import PACKED_KERNELS as CLI_KERNELS
    from nexus.config import ModelConfig, RunConfig
    from nexus.data.tokenizer import ByteTokenizer
    from nexus.export.ternary import export_ternary
    from nexus.models import build_model
    from nexus.models.bitlinear import PACKED_KERNELS
    from nexus.models.recurrent import RecurrentOptions

    assert CLI_KERNELS == PACKED_KERNELS
    cfg = RunConfig(
        model=ModelConfig(arch=RecurrentOptions(n_sup=1, t_inner=1), d_model=16, n_layers=1, n_heads=1, ffn_hidden=32)
    )
    ckpt = save_checkpoint(tmp_path / "ckpt", build_model(cfg.model), cfg, ByteTokenizer())
    path = export_ternary(ckpt, tmp_path / "m.tern")["path"]
    base = ["generate", "--max-new-tokens", "3", "--temperature", "0", "--checkpoint"]
    assert nexus.cli.main([*base, path]) == 0
    err = capsys.readouterr().err
    assert "ternary kernel auto -> " in err and "dense" in err and "capability" in err
    assert nexus.cli.main([*base, path, "--kernel", "fp32-2bit"]) == 0
    assert "ternary kernel auto" not in capsys.readouterr().err
    assert nexus.cli.main([*base, str(ckpt), "--kernel", "int4"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--kernel=int4" in err[0]
