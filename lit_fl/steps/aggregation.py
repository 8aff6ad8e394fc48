"""Functional aggregation: weighted parameter averaging (FedAvg Eq. 5 of DFML A.3.1), and loading weights."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


def weighted_average(states: Sequence[dict[str, Tensor]], weights: Sequence[float]) -> dict[str, Tensor]:
    """``W_g = sum_n d_n W_n / sum_n d_n`` entry by entry.

    Floating tensors are averaged; integer buffers (e.g. BatchNorm's ``num_batches_tracked``) are taken from
    the first state, since an average of counters has no meaning.
    """
    if len(states) != len(weights) or not states:
        raise ValueError("weighted_average needs one weight per state and at least one state")
    total = float(sum(weights))
    if total <= 0:
        raise ValueError("weighted_average: the weights must sum to a positive number")
    out: dict[str, Tensor] = {}
    floats: dict[torch.dtype, list[str]] = {}
    for key, first in states[0].items():
        if torch.is_floating_point(first):
            floats.setdefault(first.dtype, []).append(key)
        else:
            out[key] = first.clone()
    for dtype, keys in floats.items():
        out.update(_average_flat(states, weights, total, keys, dtype))
    return {key: out[key] for key in states[0]}


def _average_flat(
    states: Sequence[dict[str, Tensor]], weights: Sequence[float], total: float, keys: list[str], dtype: torch.dtype
) -> dict[str, Tensor]:
    """The average of the entries ``keys`` (all of ``dtype``) as views of one flat tensor: per state one
    concatenation, one cast to float64 and one fused multiply-add, whatever the number of entries (the same
    arithmetic element by element as entry by entry: ``acc += d_n / total * W_n`` in float64, in state order)."""
    acc: Tensor | None = None
    for state, w in zip(states, weights):
        flat = torch.cat([state[k].reshape(-1) for k in keys]).to(torch.float64)
        if acc is None:
            acc = torch.zeros_like(flat)
        acc.add_(flat, alpha=w / total)
    assert acc is not None
    result = acc.to(dtype)
    out, offset = {}, 0
    for key in keys:
        shape = states[0][key].shape
        numel = states[0][key].numel()
        out[key] = result[offset : offset + numel].view(shape)
        offset += numel
    return out


@torch.no_grad()
def load_weights(model: nn.Module, state: dict[str, Tensor]) -> None:
    """``model.load_state_dict(state)`` as one multi-tensor copy (one kernel for every parameter and buffer instead of
    one each); a state whose keys or shapes differ from the model's goes through ``load_state_dict`` and its
    errors."""
    own = model.state_dict(keep_vars=True)
    if own.keys() != state.keys() or any(own[k].shape != state[k].shape or own[k].dtype != state[k].dtype
                                         for k in own):
        model.load_state_dict(state)
        return
    torch._foreach_copy_([t.detach() for t in own.values()], [state[k] for k in own])  # detach keeps the version
