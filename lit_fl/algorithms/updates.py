"""What clients send a server, as values: :class:`ClientUpdate`, the update transforms that run over a round's
collected updates, and their aggregate.

A server method's round (:class:`~lit_fl.algorithms.server.ServerAlgorithm`) collects one :class:`ClientUpdate` per
client whose upload arrived. Before the server sees them they pass through the method's chain of update transforms
(:meth:`ServerAlgorithm.update_transforms`, empty by default): each is a function from the round's updates to new
updates, the one place where clipping, noise, compression or re-weighting act on every server method alike.
:func:`average_updates` is the aggregate most servers take: per group, the weighted average of the updates' values.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from torch import Tensor

#: the group of an update that joins the server's one model
GLOBAL = "global"


@dataclass(frozen=True)
class ClientUpdate:
    """What client ``client`` sent the server this round.

    Attributes:
        client: the sender's id.
        values: the named tensors that travelled (by default its model's state dict after local training; logits or
            class scores for methods that upload those), detached.
        weight: its weight in the aggregate (FedAvg: the client's sample count ``n_k``).
        group: the aggregate it joins (one server model: :data:`GLOBAL`; FedDF: the client's architecture).
        extra: method-specific values that travelled with it (SCAFFOLD: the control variate's change), untouched by
            the aggregation.
    """

    client: int
    values: Mapping[str, Tensor]
    weight: float = 1.0
    group: str = GLOBAL
    extra: Mapping[str, Any] = field(default_factory=dict)


#: a transform of a round's collected updates (clipping, noise, compression, re-weighting)
UpdateTransform = Callable[[Sequence[ClientUpdate]], list[ClientUpdate]]


def apply_transforms(transforms: Sequence[UpdateTransform], updates: Sequence[ClientUpdate]) -> list[ClientUpdate]:
    """``updates`` through every transform, in order."""
    out = list(updates)
    for transform in transforms:
        out = transform(out)
    return out


def average_updates(updates: Sequence[ClientUpdate]) -> dict[str, dict[str, Tensor]]:
    """Per group (in the order groups first appear), ``sum_k w_k v_k / sum_k w_k`` of the updates' values
    (:func:`~lit_fl.steps.weighted_average`: float64 accumulation; integer buffers from the first update)."""
    from lit_fl.steps.aggregation import weighted_average

    groups: dict[str, list[ClientUpdate]] = {}
    for update in updates:
        groups.setdefault(update.group, []).append(update)
    return {group: weighted_average([dict(u.values) for u in members], [u.weight for u in members])
            for group, members in groups.items()}
