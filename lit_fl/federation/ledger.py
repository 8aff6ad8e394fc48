"""Communication ledger: megabytes of model weights sent to and returned from the aggregator."""

from __future__ import annotations

from dataclasses import dataclass, field

from torch import nn

MB = 1024 * 1024


def model_megabytes(model: nn.Module) -> float:
    """Size of a model's parameters and buffers as sent over the wire (their in-memory bytes)."""
    tensors = [*model.parameters(), *model.buffers()]
    return sum(t.numel() * t.element_size() for t in tensors) / MB


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
