"""A guard on `torch.testing.assert_close`: an absolute tolerance larger than the quantity it compares
lets a factor-of-two error pass (second moments of ~1e-9 compared with the float32 default atol 1e-5
was one such test). Installed by conftest.py for the whole suite, so a new test with that flaw fails
at once instead of waiting for a mutation run to find it.

Rule: when the expected tensor is floating and not all zero, the absolute tolerance in force (given, or
torch's default for the dtype) must be at most 1% of its largest magnitude. Compare near-zero
quantities with `atol=0` and a relative tolerance, or scale atol by the quantity. Exactly-zero
expectations are exempt: there an absolute tolerance is the only meaningful one.
"""

from __future__ import annotations

import torch

FRACTION = 0.01
# torch.testing.assert_close's own defaults (rtol, atol) by dtype
_DEFAULT_ATOL = {torch.float16: 1e-5, torch.bfloat16: 1e-5, torch.float32: 1e-5, torch.float64: 1e-7}
_original = torch.testing.assert_close


def _largest(x) -> float | None:
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or x.numel() == 0:
        return None
    m = float(x.detach().abs().max())
    return m if m == m else None  # NaN: leave the comparison to assert_close itself


def checked_assert_close(actual, expected, *args, **kwargs):
    big = _largest(expected)
    if big:
        atol = kwargs.get("atol")
        atol = _DEFAULT_ATOL.get(expected.dtype, 1e-5) if atol is None else atol
        if atol > FRACTION * big:
            raise AssertionError(
                f"assert_close: atol {atol:g} is more than {FRACTION:.0%} of the largest expected magnitude "
                f"{big:g}, so errors of that size pass unseen; use atol=0 with rtol, or an atol scaled to the "
                f"quantity (tests/tolerance_guard.py)"
            )
    return _original(actual, expected, *args, **kwargs)


def install() -> None:
    torch.testing.assert_close = checked_assert_close


def atol_for(expected: torch.Tensor, fraction: float = 1e-4) -> float:
    """An absolute tolerance scaled to the quantity: `fraction` of its largest magnitude (0 for zeros)."""
    return fraction * float(expected.detach().abs().max()) if expected.numel() else 0.0
