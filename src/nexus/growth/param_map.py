"""`ParamMap`: where a grown parameter's old values sit inside the new tensor.

Its own module (re-exported by `nexus.growth`) so the generic helpers `inherit` and `verification`
can use it without importing the package `__init__` that imports them.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class ParamMap:
    """Where a grown parameter's old values live.

    old_name: the parameter's name before growth (None: a brand-new parameter, all entries new).
    old_slices: region of the new tensor that holds the old tensor (None with old_name: unchanged
        shape, the whole tensor is old). Entries outside the region are "new".
    copy_source: for copy-initialized entries, per dimension an index tensor into the OLD tensor
        (len = new size along that dim) telling which old entry each new entry copies; used by the
        `copy` optimizer-state policy and the symmetry-lock metric (SPARKLING).
    fan_in_scale: for tensors whose entries growth rescaled (SPARKLING's fan-in factor alpha), per
        dimension the factor each index along it was multiplied by (len = new size along that dim);
        used by the `scaled` optimizer-state policy.
    copy_of: for a brand-new parameter (old_name None) that duplicates a whole old tensor (depth growth's
        copied or stacked layers), that tensor's old name: the `copy` optimizer-state policy starts it from
        that tensor's state (its entries are still new: re-warmed, and fresh under the other policies).
    """

    old_name: str | None
    old_slices: tuple | None = None
    copy_source: dict[int, torch.Tensor] | None = None
    fan_in_scale: dict[int, torch.Tensor] | None = None
    copy_of: str | None = None

    def scale_of_old(self, old_shape) -> torch.Tensor | None:
        """Old-tensor-shaped factor growth applied to each old entry (None: not rescaled)."""
        if not self.fan_in_scale:
            return None
        out = torch.ones(tuple(old_shape))
        for dim, f in self.fan_in_scale.items():
            view = [1] * out.ndim
            view[dim] = -1
            out = out * f[: old_shape[dim]].float().view(view)
        return out

    def new_mask(self, new_shape) -> torch.Tensor:
        """Float 0/1 tensor: 1 where the entry is new."""
        if self.old_name is None:
            return torch.ones(new_shape)
        mask = torch.ones(new_shape)
        if self.old_slices is None:
            return torch.zeros(new_shape)
        mask[self.old_slices] = 0.0
        return mask
