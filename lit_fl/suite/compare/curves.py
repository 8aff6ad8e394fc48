"""Convergence curves: which metrics to draw, and per configuration the mean +- std over seeds against round and
against cumulative communication (MB)."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from lit_fl.suite.compare.results import Comparison, Group

TITLES = {
    "global_acc": "Global accuracy (DFML: peak models)",
    "global_acc_regular": "Global accuracy of the regular models",
    "local_acc": "Local accuracy",
    "global_acc_meme": "Global accuracy of the memes (FML)",
}
X_AXES = {"round": "communication round", "comm_mb": "cumulative communication (MB)"}


@dataclass
class Curve:
    """Mean and std of a metric over a configuration's seeds at each evaluated round."""

    rounds: list[float]
    mb: list[float]
    mean: list[float]
    std: list[float]

    def x(self, axis: str) -> list[float]:
        return self.rounds if axis == "round" else self.mb


def panels(comparison: Comparison) -> list[str]:
    """The metric columns worth a figure: global (and regular where it differs), local, memes, server models,
    then one figure per architecture."""
    columns = {k for run in comparison.runs for row in run.rows[:1] for k in row}
    out = [m for m in ("global_acc", "global_acc_regular", "local_acc", "global_acc_meme") if m in columns]
    if "global_acc_regular" in out and all(
        run.column("global_acc_regular") == run.column("global_acc") for run in comparison.runs
    ):
        out.remove("global_acc_regular")  # no peak models: the same curve twice
    out += sorted(k for k in columns if k.startswith("server_acc/"))
    out += sorted(k for k in columns if k.startswith("acc/"))
    if comparison.metric in columns and comparison.metric not in out:
        out.insert(0, comparison.metric)
    return out


def every_numeric_column(comparison: Comparison) -> list[str]:
    """:func:`panels` first, then every other numeric column of metrics.csv (losses, counts, timings, a method's
    own metrics), for the dashboard; the x axes (round, comm_mb) are not panels."""
    main = panels(comparison)
    columns: dict[str, None] = {}
    for run in comparison.runs:
        for row in run.rows:
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and key not in X_AXES:
                    columns.setdefault(key, None)
    return main + sorted(k for k in columns if k not in main)


def title(metric: str) -> str:
    if metric.startswith("acc/"):
        return f"Global accuracy of {metric[4:]} clients"
    if metric.startswith("server_acc/"):
        return f"Server model {metric[11:]}: accuracy"
    return TITLES.get(metric, metric)


def curve(group: Group, metric: str) -> Curve:
    """Rows are aligned by round; a round only some seeds evaluated averages over those."""
    by_round: dict[int, list[tuple[float, float]]] = {}
    for run in group.runs:
        for row in run.rows:
            value = row.get(metric, math.nan)
            if not math.isnan(value):
                by_round.setdefault(int(row["round"]), []).append((value, row.get("comm_mb", math.nan)))
    rounds = sorted(by_round)
    values = [[v for v, _ in by_round[r]] for r in rounds]
    return Curve(
        rounds=[float(r) for r in rounds],
        mb=[statistics.fmean(mb for _, mb in by_round[r]) for r in rounds],
        mean=[statistics.fmean(v) for v in values],
        std=[statistics.stdev(v) if len(v) > 1 else 0.0 for v in values],
    )
