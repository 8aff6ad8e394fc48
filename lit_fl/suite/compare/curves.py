"""Convergence curves: which metrics to draw, and per configuration the mean +- std over seeds against round and
against cumulative communication (MB)."""

from __future__ import annotations

import dataclasses
import math
import statistics
from dataclasses import dataclass

from lit_fl.suite.compare.results import Comparison, Group
from lit_fl.suite.compare.spread import sample_std

TITLES = {
    "reported_acc": "Reported accuracy (the model each method's paper reports)",
    "global_acc": "Global accuracy",
    "global_acc_regular": "Global accuracy of the regular models",
    "local_acc": "Local accuracy",
    "global_acc_meme": "Global accuracy of the memes",
}
#: what a metric is for one method, said in the title only when every run is that method
METHOD_NOTES = {("global_acc", "DFML"): "peak models", ("global_acc_meme", "DecentralizedFML"): "FML"}
X_AXES = {"round": "communication round", "comm_mb": "cumulative communication (MB)"}
#: the x axis of differentially private runs' accuracy panels: the privacy spent so far (``epsilon`` in metrics.csv)
EPSILON_AXIS = "epsilon"
#: the x axis of runs on the virtual clock (``system.clock``): the virtual seconds so far (``virtual_s``)
VIRTUAL_AXIS = "virtual_s"
AXIS_TITLES = {**X_AXES, EPSILON_AXIS: "privacy spent, epsilon(delta)", VIRTUAL_AXIS: "virtual time (s)"}
#: one colour per configuration, the same in the dashboard (plotly) and the PNG figures (matplotlib)
COLORS = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"]


def color(index: int) -> str:
    """The colour of the configuration at ``index`` in :attr:`Comparison.groups`."""
    return COLORS[index % len(COLORS)]


@dataclass
class Curve:
    """Mean and std of a metric over a configuration's seeds at each evaluated round."""

    rounds: list[float]
    mb: list[float]
    mean: list[float]
    std: list[float]
    #: epsilon spent by each round (NaN for a run without privacy)
    epsilon: list[float] = dataclasses.field(default_factory=list)
    #: virtual seconds by each round (NaN for a run without the clock)
    virtual: list[float] = dataclasses.field(default_factory=list)

    def x(self, axis: str) -> list[float]:
        return {"round": self.rounds, "comm_mb": self.mb, EPSILON_AXIS: self.epsilon, VIRTUAL_AXIS: self.virtual}[axis]


def panels(comparison: Comparison) -> list[str]:
    """The metric columns worth a figure: the reported accuracy, global (and regular where it differs), local,
    memes, server models, then one figure per architecture."""
    columns = {k for run in comparison.runs for row in run.rows[:1] for k in row}
    out = [m for m in ("reported_acc", "global_acc", "global_acc_regular", "local_acc", "global_acc_meme")
           if m in columns]
    if "global_acc_regular" in out and all(
        run.column("global_acc_regular") == run.column("global_acc") for run in comparison.runs
    ):
        out.remove("global_acc_regular")  # no peak models: the same curve twice
    out += sorted(k for k in columns if k.startswith("server_acc/"))
    out += [k for k in sorted(columns) if k.startswith("acc/") and not _repeats(comparison, k, out)]
    if comparison.metric in columns and comparison.metric not in out:
        out.insert(0, comparison.metric)
    return out


def every_numeric_column(comparison: Comparison) -> list[str]:
    """:func:`panels` first, then every other numeric column of metrics.csv (losses, counts, timings, a method's
    own metrics), for the dashboard; the x axes (round, comm_mb) are not panels, nor a column without a value in
    any row of the runs shown (``alpha`` of methods without one, ``aggregator`` of server methods: all NaN)."""
    columns: dict[str, None] = {}
    for run in comparison.runs:
        for row in run.rows:
            for key, value in row.items():
                if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isnan(value):
                    columns.setdefault(key, None)
    main = [k for k in panels(comparison) if k in columns]
    return main + sorted(k for k in columns if k not in main and k not in X_AXES and k != VIRTUAL_AXIS)  # epsilon:
    # a panel of its own; virtual_s only an axis


def _repeats(comparison: Comparison, metric: str, shown: list[str]) -> bool:
    """Whether ``metric`` draws the same curves as a panel already shown (an architecture's accuracy in a pool of
    one architecture is the global accuracy again)."""
    return any(all(run.column(metric) == run.column(other) for run in comparison.runs) for other in shown)


def title(metric: str, methods: set[str] = frozenset()) -> str:
    """The panel title; the method is named only when every run is that method (``methods`` has one name)."""
    if metric.startswith("acc/"):
        base = f"Global accuracy of {metric[4:]} clients"
    elif metric.startswith("server_acc/"):
        base = f"Server model {metric[11:]}: accuracy"
    else:
        base = TITLES.get(metric, metric)
    if len(methods) != 1 or not next(iter(methods)):
        return base
    (method,) = methods
    note = METHOD_NOTES.get((metric, method))
    return f"{base} ({method}: {note})" if note else f"{base} ({method})"


def methods(comparison: Comparison) -> set[str]:
    """The methods (algorithm class names) of the compared runs."""
    return {run.algorithm for run in comparison.runs}


def curve(group: Group, metric: str) -> Curve:
    """The mean and std of the group's counted runs (:attr:`Group.counted`), rows aligned by round; a round only some
    seeds evaluated averages over those."""
    by_round: dict[int, list[tuple[float, float, float, float]]] = {}
    for run in group.counted:  # completed runs only: an unfinished one never drags the later rounds' mean
        for row in run.rows:
            value = row.get(metric, math.nan)
            if not math.isnan(value):
                by_round.setdefault(int(row["round"]), []).append(
                    (value, row.get("comm_mb", math.nan), row.get(EPSILON_AXIS, math.nan),
                     row.get(VIRTUAL_AXIS, math.nan)))
    rounds = sorted(by_round)
    values = [[v[0] for v in by_round[r]] for r in rounds]
    return Curve(
        rounds=[float(r) for r in rounds],
        mb=[statistics.fmean(v[1] for v in by_round[r]) for r in rounds],
        mean=[statistics.fmean(v) for v in values],
        std=[sample_std(v) if len(v) > 1 else 0.0 for v in values],
        epsilon=[statistics.fmean(v[2] for v in by_round[r]) for r in rounds],
        virtual=[_geometric_mean([v[3] for v in by_round[r]]) for r in rounds],
    )


def _geometric_mean(seconds: list[float]) -> float:
    """The seeds' virtual time at a round: their geometric mean (times of heavy-tailed client speeds differ by
    orders of magnitude between seeds; drawn on a log axis, as the claims compare them by ratio); NaN without a
    clock, the arithmetic mean when a time is 0."""
    if any(math.isnan(t) for t in seconds) or not seconds:
        return math.nan
    if min(seconds) <= 0:
        return statistics.fmean(seconds)
    return statistics.geometric_mean(seconds)


def axes(comparison: Comparison, metrics: list[str]) -> dict[str, list[str]]:
    """The x axes of each metric's figures: round and MB; virtual time when a run is on the virtual clock (its
    metrics.csv has ``virtual_s``); and epsilon for an accuracy panel (:func:`panels`, read once) when a run is
    differentially private: accuracy against the privacy spent."""
    accuracy = set(panels(comparison)) if comparison.private else set()
    base = [*X_AXES, VIRTUAL_AXIS] if comparison.timed else list(X_AXES)
    return {m: [*base, EPSILON_AXIS] if m in accuracy else list(base) for m in metrics}
