"""What a metric column is, from its name: an accuracy (shown in %, higher is better), a loss (a number, lower is
better: its "best" is its minimum and a target is reached from above), or another number (a count, megabytes,
seconds: shown as is, higher taken as better)."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class MetricKind:
    name: str

    @property
    def is_accuracy(self) -> bool:
        last = self.name.rsplit("/", 1)[-1]
        return self.name.startswith(("acc/", "server_acc/")) or "acc" in last.split("_")

    @property
    def lower_is_better(self) -> bool:
        return "loss" in self.name

    @property
    def unit(self) -> str:
        """The table header's unit suffix."""
        return " (%)" if self.is_accuracy else ""

    def best(self, values: list[float]) -> float:
        """The best of a run's values (NaN dropped; NaN when none)."""
        kept = [v for v in values if not math.isnan(v)]
        if not kept:
            return math.nan
        return min(kept) if self.lower_is_better else max(kept)

    def reaches(self, value: float, target: float) -> bool:
        """Whether ``value`` is at the target: ``>=`` for what grows, ``<=`` for a loss."""
        if math.isnan(value):
            return False
        return value <= target if self.lower_is_better else value >= target

    def format(self, mean: float, std: float | None) -> str:
        """``mean ± std`` in the metric's unit: accuracy in percent with 2 decimals, anything else with 4 digits;
        ``std=None`` (a single seed, which has no spread to show): the mean alone."""
        if self.is_accuracy:
            return f"{100 * mean:.2f}" if std is None else f"{100 * mean:.2f} ± {100 * std:.2f}"
        return f"{mean:.4g}" if std is None else f"{mean:.4g} ± {std:.4g}"


@dataclass(frozen=True)
class Elapsed(MetricKind):
    """What it took to reach a target (the virtual seconds, megabytes or rounds of a ``to_target`` claim): a
    number, lower is better, whatever the column is named."""

    @property
    def is_accuracy(self) -> bool:
        return False

    @property
    def lower_is_better(self) -> bool:
        return True
