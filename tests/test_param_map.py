"""`ParamMap` (growth/param_map.py) by its definition: `new_mask` is 1 exactly on the entries outside the old
tensor's region of the grown tensor, `scale_of_old` is the factor growth applied to each old entry, the
product over dimensions of that dimension's fan-in factor at the entry's index (SPARKLING's alpha per
channel). The expected tensors are built entry by entry from those definitions."""

import itertools

import torch

from nexus.growth.param_map import ParamMap


def test_new_mask_is_one_exactly_outside_the_old_region():
    pm = ParamMap("w", old_slices=(slice(0, 2), slice(0, 3)))
    mask = pm.new_mask((4, 5))
    want = torch.tensor([[0.0 if (i < 2 and j < 3) else 1.0 for j in range(5)] for i in range(4)])
    assert mask.dtype == torch.float32 and torch.equal(mask, want)


def test_new_mask_of_an_unchanged_tensor_is_all_old_and_of_a_new_tensor_all_new():
    assert torch.equal(ParamMap("w").new_mask((3, 2)), torch.zeros(3, 2))
    assert torch.equal(ParamMap(None).new_mask((3, 2)), torch.ones(3, 2))
    # a brand-new parameter is all new even if a region is given: there is no old tensor to sit in it
    assert torch.equal(ParamMap(None, old_slices=(slice(0, 1),)).new_mask((3, 2)), torch.ones(3, 2))


def test_scale_of_old_is_the_product_of_each_dimensions_factor_at_the_old_indices():
    f0 = torch.tensor([2.0, 3.0, 5.0, 7.0], dtype=torch.float64)  # new size 4 along dim 0, old size 3
    f1 = torch.tensor([0.5, 0.25, 0.125, 11.0, 13.0])  # new size 5 along dim 1, old size 2
    pm = ParamMap("w", old_slices=(slice(0, 3), slice(0, 2)), fan_in_scale={0: f0, 1: f1})
    got = pm.scale_of_old((3, 2))
    want = torch.empty(3, 2)
    for i, j in itertools.product(range(3), range(2)):
        want[i, j] = float(f0[i]) * float(f1[j])
    assert got.shape == (3, 2) and got.dtype == torch.float32 and torch.equal(got, want)


def test_scale_of_old_along_one_dimension_only_leaves_the_others_unscaled():
    f1 = torch.tensor([0.5, 0.25, 4.0])
    got = ParamMap("w", fan_in_scale={1: f1}).scale_of_old((2, 2))
    assert torch.equal(got, torch.tensor([[0.5, 0.25], [0.5, 0.25]]))
    f0 = torch.tensor([3.0, 0.5, 9.0])
    got = ParamMap("w", fan_in_scale={0: f0}).scale_of_old((2, 4))
    assert torch.equal(got, torch.tensor([[3.0] * 4, [0.5] * 4]))


def test_scale_of_old_is_none_without_fan_in_factors():
    assert ParamMap("w").scale_of_old((2, 2)) is None
    assert ParamMap("w", fan_in_scale={}).scale_of_old((2, 2)) is None
