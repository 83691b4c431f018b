"""The LM head and its cross-entropy in chunks of tokens, never holding the whole (tokens x vocab) logits.

The plain path materializes the logits (a 16 x 1024 batch at vocab 50,304 is 825M numbers: 3.3 GB in fp32,
again for their softmax gradient), and on a GPU the loss's elementwise kernels over them are a visible
share of the step. Here each chunk's logits are made, reduced to its cross-entropy (and z-loss) sum, and
turned into that chunk's gradients of the hidden states and the head weight at once, so only one
chunk's logits are ever alive. The gradients are computed in the forward (the loss is a scalar: its
backward only scales them), which saves recomputing the head GEMM in the backward.

Hand-written because torch has no fused linear + cross-entropy op (Liger-Kernel has one, as a Triton
kernel for CUDA only; nexus must also run it on the CPU, where it is held to the plain path).

Arithmetic, per token t with logits z = s * (h_t W^T) (s: the model's logit_scale), valid targets only:
    ce_t = logsumexp(z) - z[y_t],  zl_t = logsumexp(z)^2
    loss = (sum ce_t + z_loss * sum zl_t) / n_valid
    d loss / d z = (softmax(z) * (1 + 2 z_loss logsumexp(z)) - onehot(y_t)) / n_valid
Under autocast the GEMMs run in the autocast dtype, as the plain path's head matmul does there; the
softmax and sums stay in fp32 (the plain path's `.float()` logits).
"""

from __future__ import annotations

import torch

from .layers import at_least_fp32
from .lm_loss import IGNORE_INDEX, LMOutput, finish_output


def _compute_dtype(h: torch.Tensor) -> torch.dtype:
    """The dtype the head GEMM runs in: autocast's where it is on for this device (as for `h @ W^T` in the
    plain path), else the hidden states' own."""
    dev = h.device.type
    return torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else h.dtype


class _ChunkedHeadCE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, h, weight, labels, denom, chunk: int, scale: float, z_loss: float):
        need_grad = ctx.needs_input_grad[0] or ctx.needs_input_grad[1]
        cdt = _compute_dtype(h)
        acc = at_least_fp32(cdt)  # softmax and sums: fp32, or fp64 for fp64 inputs
        w = weight.to(cdt)
        ce_sum = torch.zeros((), dtype=acc, device=h.device)
        z_sum = torch.zeros((), dtype=acc, device=h.device)
        grad_h = torch.empty_like(h) if need_grad else None
        grad_w = torch.zeros(weight.shape, dtype=acc, device=weight.device) if need_grad else None
        with torch.autocast(h.device.type, enabled=False):  # dtypes are explicit here
            for start in range(0, h.shape[0], chunk):
                hc = h[start : start + chunk].to(cdt)
                lab = labels[start : start + chunk]
                logits = (hc @ w.t()).to(acc)
                if scale != 1.0:
                    logits = logits * scale
                valid = lab != IGNORE_INDEX
                safe = torch.where(valid, lab, 0)[:, None]  # ignored rows read class 0, then count for nothing
                lse = torch.logsumexp(logits, dim=-1)
                vf = valid.to(acc)
                ce_sum += ((lse - logits.gather(1, safe)[:, 0]) * vf).sum()
                if z_loss > 0:
                    z_sum += (lse.square() * vf).sum()
                if not need_grad:
                    continue
                assert grad_h is not None and grad_w is not None  # made when need_grad
                # the softmax, in place over this chunk's logits, scaled to d loss / d logits
                probs = logits.sub_(lse[:, None]).exp_()
                coef = vf * (1.0 + 2.0 * z_loss * lse) if z_loss > 0 else vf
                probs.mul_((coef / denom)[:, None])
                probs.scatter_add_(1, safe, -(vf / denom)[:, None])
                g = (probs * scale if scale != 1.0 else probs).to(cdt)  # d loss / d (h W^T)
                grad_h[start : start + chunk] = (g @ w).to(h.dtype)
                grad_w += (g.t() @ hc).to(acc)
        ce = ce_sum / denom
        total = (ce_sum + z_loss * z_sum) / denom  # its own tensor: `ce` below carries no gradient
        if need_grad:
            ctx.save_for_backward(grad_h, grad_w.to(weight.dtype))
        ctx.mark_non_differentiable(ce)
        return total, ce

    @staticmethod
    def backward(ctx, grad_total, _grad_ce):
        grad_h, grad_w = ctx.saved_tensors
        return grad_h * grad_total, grad_w * grad_total, None, None, None, None, None


def chunked_head_cross_entropy(
    h: torch.Tensor, weight: torch.Tensor, labels: torch.Tensor, chunk: int, scale: float = 1.0, z_loss: float = 0.0
):
    """(loss, ce, n_valid) of the LM head `logits = scale * h @ weight^T` on (..., D) hidden states `h` and
    (...) `labels` (IGNORE_INDEX skipped), `chunk` tokens at a time: loss = mean CE + z_loss * mean
    logsumexp^2 (differentiable in h and weight), ce the mean CE alone (no gradient: it is what runs
    report). No host sync: counts stay tensors."""
    if chunk < 1:
        raise ValueError(f"chunk={chunk!r}: tokens per chunk must be >= 1")
    flat_h = h.reshape(-1, h.shape[-1])
    flat_y = labels.reshape(-1)
    n = (flat_y != IGNORE_INDEX).sum()
    denom = n.clamp(min=1).to(at_least_fp32(h.dtype))
    total, ce = _ChunkedHeadCE.apply(flat_h, weight, flat_y, denom, int(chunk), float(scale), float(z_loss))
    return total, ce, n


def lm_loss_chunked(
    out: LMOutput,
    h: torch.Tensor,
    weight: torch.Tensor,
    labels: torch.Tensor,
    z_loss: float,
    chunk: int,
    scale: float = 1.0,
) -> LMOutput:
    """lm_loss with the head folded in (models/chunked_ce.py): the CE and z-loss of `scale * h @ weight^T`,
    `chunk` tokens at a time, without the full logits (out.logits stays None). ce_loss carries no gradient."""
    loss, ce, n = chunked_head_cross_entropy(h, weight, labels, chunk, scale, z_loss)
    return finish_output(out, loss, ce, n)
