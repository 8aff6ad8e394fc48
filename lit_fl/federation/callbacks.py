"""What the round loop tells a run's outputs, as objects: ``on_round`` after every round (its metric row, or None
when the round was not evaluated) and ``on_checkpoint`` when a checkpoint is due. ``Experiment.fit`` gives rank 0
the callbacks that write the run directory, W&B and the progress bar, and the other processes none."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.round import RoundAlgorithm
    from lit_fl.federation.state import Federation
    from lit_fl.tracking import MetricsCSV, RoundProgress, WandbTracker

Row = dict[str, float]


class RoundCallback:
    """Both hooks do nothing by default; a callback overrides what it needs."""

    def on_round(self, round_: int, row: Row | None) -> None:
        """Round ``round_`` ended; ``row`` is its metric row (None: not evaluated)."""

    def on_checkpoint(self) -> None:
        """The loop asks for a checkpoint now (every ``checkpoint_every`` rounds, at the end, on a stop signal)."""


class MetricsFile(RoundCallback):
    """Appends every metric row to ``metrics.csv``."""

    def __init__(self, csv: MetricsCSV) -> None:
        self.csv = csv

    def on_round(self, round_: int, row: Row | None) -> None:
        if row:
            self.csv.append(row)


class WandbLog(RoundCallback):
    """Logs every metric row to W&B at step ``round``."""

    def __init__(self, tracker: WandbTracker) -> None:
        self.tracker = tracker

    def on_round(self, round_: int, row: Row | None) -> None:
        if row:
            self.tracker.log(row, round_)


class ProgressDisplay(RoundCallback):
    """Advances the progress bar after every round, with the row's numbers when there is one."""

    def __init__(self, progress: RoundProgress) -> None:
        self.progress = progress

    def on_round(self, round_: int, row: Row | None) -> None:
        self.progress.update(round_, row or None)


class Checkpointer(RoundCallback):
    """Writes ``checkpoints/last.ckpt`` (atomically): the federation, the method, the ledger and ``extra()``."""

    def __init__(
        self,
        path: Path,
        federation: Federation,
        algorithm: RoundAlgorithm,
        ledger: CommunicationLedger,
        extra: Callable[[], dict[str, Any]],
    ) -> None:
        self.path, self.federation, self.algorithm, self.ledger, self.extra = path, federation, algorithm, ledger, extra

    def on_checkpoint(self) -> None:
        from lit_fl.federation.checkpoint import save_checkpoint

        save_checkpoint(self.path, self.federation, self.algorithm, self.ledger, self.extra())
