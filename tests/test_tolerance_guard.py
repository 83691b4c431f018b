"""The suite-wide assert_close guard (tests/tolerance_guard.py) catches the flaw it exists for."""

import pytest
import torch
from tolerance_guard import checked_assert_close


def test_guard_refuses_an_absolute_tolerance_larger_than_the_quantity():
    v = torch.full((4,), 1e-9)  # second moments of a small model
    with pytest.raises(AssertionError, match="atol"):
        checked_assert_close(2 * v, v)  # float32 default atol 1e-5 would let the factor of two pass
    with pytest.raises(AssertionError, match="atol"):
        checked_assert_close(v, v, atol=1e-6, rtol=0)


def test_guard_accepts_relative_tolerances_and_exact_zero_expectations():
    v = torch.full((4,), 1e-9)
    checked_assert_close(v * (1 + 1e-7), v, atol=0, rtol=1e-5)
    with pytest.raises(AssertionError):
        checked_assert_close(2 * v, v, atol=0, rtol=1e-5)  # and the relative form does see the factor
    checked_assert_close(torch.zeros(3), torch.zeros(3))
    checked_assert_close(torch.ones(3), torch.ones(3))  # default atol 1e-5 is far below 1% of 1


def test_the_suite_runs_under_the_guard():
    assert torch.testing.assert_close is checked_assert_close
