"""L2 norms of groups of tensors, in float64, read from the device once for all groups.

A norm a method needs on the host (a metric, a rule's input) is a sum of squares over many tensors; reading each
tensor's sum back is a wait for the device per tensor. :func:`l2_norms` adds the squared sums on the device, in the
tensors' order (the same float64 arithmetic as adding them one by one on the host), and reads every group's total
in one transfer.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when a norm is taken: the command line stays fast
    from torch import Tensor


def squared_norm(tensors: Iterable[Tensor]) -> Tensor:
    """``sum ||t||^2`` over ``tensors`` in float64, on their device (added in order; 0 for none)."""
    import torch

    total: Tensor | None = None
    for t in tensors:
        squared = t.detach().to(torch.float64).pow(2).sum()
        total = squared if total is None else total + squared
    return total if total is not None else torch.zeros((), dtype=torch.float64)


def l2_norms(groups: Sequence[Iterable[Tensor]]) -> list[float]:
    """The L2 norm of every group of tensors (all entries of a group together), one read from the device."""
    import torch

    totals = [squared_norm(group) for group in groups]
    if not totals:
        return []
    device = totals[0].device
    return [math.sqrt(v) for v in torch.stack([t.to(device) for t in totals]).tolist()]
