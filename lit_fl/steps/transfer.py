"""Tensors brought to the host together: one copy per device and dtype, not one per tensor.

On a GPU every copy to the host waits for the device; code that needs many small tensors on the host (a model's
bytes for its fingerprint, weights and gradients for a host-side mask update) takes them in one transfer each.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # torch is imported when tensors move: the command line stays fast
    from torch import Tensor


def to_host(tensors: Sequence[Tensor]) -> list[Tensor]:
    """``tensors`` on the host, each in its own shape (standard layout), in one copy per device and dtype (on a
    CPU too: the same calls, so a CPU count of host copies is the GPU's)."""
    import torch

    groups: dict[tuple, list[int]] = {}
    for i, t in enumerate(tensors):
        groups.setdefault((t.device, t.dtype), []).append(i)
    out: list[Tensor | None] = [None] * len(tensors)
    for members in groups.values():
        flat = torch.cat([tensors[i].reshape(-1) for i in members]).cpu()
        for i, part in zip(members, flat.split([tensors[i].numel() for i in members])):
            out[i] = part.view(tensors[i].shape)
    return out  # type: ignore[return-value]
