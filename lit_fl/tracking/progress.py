"""Progress per round: a rich progress bar in a terminal, one plain line per evaluated round elsewhere."""

from __future__ import annotations

import sys

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class RoundProgress:
    """Shows ``round r/T`` with the latest reported accuracy (and the global one where it differs)."""

    def __init__(self, total_rounds: int, first_round: int, description: str, enabled: bool = True) -> None:
        self.console = Console(stderr=True)
        self.enabled = enabled
        self.interactive = enabled and self.console.is_terminal
        self.total = total_rounds
        self.description = description
        self._progress: Progress | None = None
        if self.interactive:
            self._progress = Progress(
                TextColumn("[bold]{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[status]}"),
                TimeElapsedColumn(),
                TimeRemainingColumn(),
                console=self.console,
            )
            self._task = self._progress.add_task(description, total=total_rounds, completed=first_round - 1, status="")
            self._progress.start()

    def update(self, round_: int, metrics: dict[str, float] | None) -> None:
        status = _status(metrics) if metrics else None
        if self._progress is not None:
            fields = {"status": status} if status else {}
            self._progress.update(self._task, completed=round_, **fields)
        elif self.enabled and status:
            print(f"{self.description} round {round_}/{self.total} {status}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()


def _status(m: dict[str, float]) -> str:
    parts = [f"reported_acc {m['reported_acc']:.4f}"] if "reported_acc" in m else []
    if m.get("global_acc") is not None and m.get("global_acc") != m.get("reported_acc"):
        parts.append(f"global_acc {m['global_acc']:.4f}")
    if m.get("global_acc_regular") is not None and m["global_acc_regular"] != m["global_acc"]:
        parts.append(f"regular {m['global_acc_regular']:.4f}")
    if m.get("alpha") == m.get("alpha"):  # not NaN
        parts.append(f"alpha {m['alpha']:.2f}")
    parts.append(f"{m.get('round_s', 0.0):.1f}s")
    return "  ".join(parts)
