"""Communication ledger: megabytes of model weights sent to and returned from the aggregator."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from torch import Tensor, nn

MB = 1024 * 1024

_MEGABYTES: WeakKeyDictionary[nn.Module, float] = WeakKeyDictionary()


def model_megabytes(model: nn.Module) -> float:
    """Size of a model's parameters and buffers as sent over the wire (their in-memory bytes).

    Computed once per module: training and averaging change a model's values, never its tensors' shapes or
    dtypes (a method that sends part of a model sends a new module), and the walk over every tensor would
    otherwise run twice per participant per round."""
    megabytes = _MEGABYTES.get(model)
    if megabytes is None:
        tensors = [*model.parameters(), *model.buffers()]
        megabytes = _MEGABYTES[model] = sum(t.numel() * t.element_size() for t in tensors) / MB
    return megabytes


class Payload(nn.Module):
    """Tensors on the wire that are not a whole model (part of one: FedPer's ``g``, a Combo segment), as a module
    the ledger sizes like any model."""

    def __init__(self, tensors: Sequence[Tensor]) -> None:
        super().__init__()
        for i, tensor in enumerate(tensors):
            self.register_buffer(f"t{i}", tensor, persistent=False)


@dataclass
class CommunicationLedger:
    """Per-round and cumulative traffic. ``sent`` = senders -> aggregator, ``returned`` = aggregator -> senders."""

    total_mb: float = 0.0
    round_sent_mb: float = 0.0
    round_returned_mb: float = 0.0
    transfers: list[tuple[int, int, float]] = field(default_factory=list)

    def start_round(self) -> None:
        self.round_sent_mb = self.round_returned_mb = 0.0
        self.transfers = []

    def send(self, source: int, target: int, model: nn.Module, hops: int = 1) -> None:
        """``model`` travels from ``source`` to ``target`` over ``hops`` links; every link carries it once."""
        mb = model_megabytes(model) * hops
        self.round_sent_mb += mb
        self.total_mb += mb
        self.transfers.append((source, target, mb))

    def give_back(self, source: int, target: int, model: nn.Module, hops: int = 1) -> None:
        mb = model_megabytes(model) * hops
        self.round_returned_mb += mb
        self.total_mb += mb
        self.transfers.append((source, target, mb))

    @property
    def round_mb(self) -> float:
        return self.round_sent_mb + self.round_returned_mb

    def state_dict(self) -> dict[str, float]:
        return {"total_mb": self.total_mb}

    def load_state_dict(self, state: dict[str, float]) -> None:
        self.total_mb = float(state["total_mb"])
