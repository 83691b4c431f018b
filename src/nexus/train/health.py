"""Non-finite step bookkeeping kept on the device, so the training step never waits for the host.

Each step adds its `finite` flag; the host reads the counters only at log steps (`read`), which also
reports the longest streak of skipped steps since the previous read, so a run that stays non-finite
for train.max_nonfinite steps in a row is still stopped, at the next read.
"""

from __future__ import annotations

import torch


class StepHealth:
    def __init__(self, device: torch.device, total: int = 0):
        self.total = torch.full((), total, dtype=torch.int64, device=device)  # skipped steps, whole run
        self.in_row = torch.zeros((), dtype=torch.int64, device=device)  # current streak of skipped steps
        self.worst = torch.zeros((), dtype=torch.int64, device=device)  # longest streak since the last read

    def update(self, finite: torch.Tensor) -> None:
        bad = (~finite).to(torch.int64)
        self.total += bad
        self.in_row.mul_(bad).add_(bad)  # +1 on a skipped step, back to 0 on a good one
        torch.maximum(self.worst, self.in_row, out=self.worst)

    def read(self) -> tuple[int, int]:
        """(skipped steps so far, longest streak since the last read); one host transfer. Resets the streak window."""
        total, worst = torch.stack([self.total, self.worst]).tolist()
        self.worst.copy_(self.in_row)
        return int(total), int(worst)
