"""The results table: per configuration, final and best accuracy (mean +- std over seeds), rounds and MB until
a target accuracy is first reached (DFML Table 8 style), and the paper's number beside ours; and the claims table
(:mod:`lit_fl.suite.compare.claims`): per claim and pair of configurations the mean paired difference, the seeds
on which it holds and the verdict."""

from __future__ import annotations

import csv
import dataclasses
import html
import io
import math
import statistics
from dataclasses import dataclass
from typing import Any

from lit_fl.suite.compare.claims import RULE, ClaimResult
from lit_fl.suite.compare.results import Comparison, Group, RunResult, paper_value_of
from lit_fl.suite.compare.spread import sample_std
from lit_fl.suite.paper import PaperRow, matches, rows_for
from lit_fl.tracking.metric_kind import MetricKind


@dataclass
class Stat:
    """Mean and sample std over seeds of the values that exist (NaN dropped)."""

    values: list[float]

    @property
    def kept(self) -> list[float]:
        return [v for v in self.values if not math.isnan(v)]

    @property
    def mean(self) -> float:
        return statistics.fmean(self.kept) if self.kept else math.nan

    @property
    def std(self) -> float:
        return sample_std(self.kept) if len(self.kept) > 1 else 0.0 if self.kept else math.nan

    def percent(self) -> str:
        return self.shown(MetricKind("acc"))

    def shown(self, kind: MetricKind) -> str:
        """``mean ± std`` in the unit of the metric's kind (``-`` when no seed has a value; one seed has no std: its
        value alone)."""
        if not self.kept:
            return "-"
        return kind.format(self.mean, self.std if len(self.kept) > 1 else None)

    def plain(self, digits: int = 1, style: str = "f") -> str:
        if not self.kept:
            return "-"
        if len(self.kept) == 1:
            return f"{self.mean:.{digits}{style}}"
        return f"{self.mean:.{digits}{style}} ± {self.std:.{digits}{style}}"


@dataclass
class TableRow:
    kind: MetricKind
    label: str
    seeds: int
    rounds: int
    final: Stat
    best: Stat
    rounds_to_target: Stat
    mb_to_target: Stat
    reached: int
    paper: float | None
    #: epsilon(delta) spent by the last evaluated round (differentially private runs; none otherwise)
    epsilon: Stat = dataclasses.field(default_factory=lambda: Stat([]))
    #: virtual seconds until the target was first reached (runs on the virtual clock; none otherwise)
    virtual_to_target: Stat = dataclasses.field(default_factory=lambda: Stat([]))


def first_reach(run: RunResult, metric: str, target: float) -> tuple[float, float]:
    """``(round, comm_mb)`` of the first evaluated round at which ``metric`` reaches ``target`` (``>=``; ``<=`` for
    a loss), NaN when never."""
    return run.at_target(metric, target, "round"), run.at_target(metric, target, "comm_mb")


def table_rows(comparison: Comparison, target: float) -> list[TableRow]:
    """A row per configuration, then a row per paper number that no configuration's runs match (``no run``): a
    paper row is never dropped, nor shown beside a configuration it does not describe."""
    kind = MetricKind(comparison.metric)
    return [_row(comparison, group, target) for group in comparison.groups] + [
        TableRow(kind, f"{row.label or _match_label(row.match)} [paper only: no run]", 0, 0, Stat([]), Stat([]),
                 Stat([]), Stat([]), 0, row.value)
        for row in unmatched_paper_rows(comparison)
    ]


def unmatched_paper_rows(comparison: Comparison) -> list[PaperRow]:
    """The paper's rows of the compared metric that match none of the configurations."""
    return [row for row in rows_for(comparison.paper, comparison.metric)
            if not any(matches(row.match, group.params) for group in comparison.groups)]


def _match_label(match: dict[str, Any]) -> str:
    return " ".join(f"{key}={value}" for key, value in match.items())


def _row(comparison: Comparison, group: Group, target: float) -> TableRow:
    """The statistics of the group's completed runs; runs that stopped early are left out of them and named in
    the row (when no run completed, the row is of the unfinished ones, and says so)."""
    metric = comparison.metric
    kind = MetricKind(metric)
    done = [run for run in group.runs if run.complete]
    unfinished = [run for run in group.runs if not run.complete]
    runs = done or unfinished
    finals = [run.rows[-1].get(metric, math.nan) for run in runs]
    bests = [kind.best(run.column(metric)) for run in runs]
    reach = [first_reach(run, metric, target) for run in runs]
    label = group.label
    if unfinished:
        stopped = ", ".join(f"{run.name} (seed {run.seed}) at round {int(run.rows[-1]['round'])}" for run in unfinished)
        label += f" [unfinished, left out: {stopped}]" if done else f" [unfinished, shown alone: {stopped}]"
    return TableRow(
        kind=kind,
        label=label,
        seeds=len(runs),
        rounds=max(int(run.rows[-1]["round"]) for run in runs),
        final=Stat(finals),
        best=Stat(bests),
        rounds_to_target=Stat([r for r, _ in reach]),
        mb_to_target=Stat([mb for _, mb in reach]),
        reached=sum(not math.isnan(r) for r, _ in reach),
        paper=paper_value_of(comparison, group),
        epsilon=Stat([run.rows[-1].get("epsilon", math.nan) for run in runs]),
        virtual_to_target=Stat([run.at_target(metric, target, "virtual_s") for run in runs]),
    )


def header(comparison: Comparison, target: float) -> list[str]:
    metric, unit = comparison.metric, MetricKind(comparison.metric).unit
    return [
        "configuration", "seeds", "rounds", f"final {metric}{unit}", f"best {metric}{unit}",
        f"rounds to {target:g}", f"MB to {target:g}", f"paper{unit}",
    ] + (["final epsilon"] if comparison.private else []) + (
        [f"virtual s to {target:g}"] if comparison.timed else [])


def _cells(row: TableRow, private: bool = False, timed: bool = False) -> list[str]:
    """The row's cells; with ``private``, the epsilon spent last (``-`` for a run without privacy); with ``timed``,
    the virtual seconds to the target (``not reached``; ``-`` for a run without the clock)."""
    cells = _plain_cells(row)
    if private:
        cells += [row.epsilon.plain(3, "g")]
    if timed:
        cells += [_virtual_cell(row)]
    return cells


def _virtual_cell(row: TableRow) -> str:
    if not row.reached:
        return "not reached" if row.seeds else "-"
    reached = len(row.virtual_to_target.kept)
    note = "" if reached == row.seeds else f" ({reached}/{row.seeds} seeds)"
    return row.virtual_to_target.plain(3, "g") + note if reached else "-"


def _plain_cells(row: TableRow) -> list[str]:
    reached = "" if row.reached == row.seeds else f" ({row.reached}/{row.seeds} seeds)"
    if not row.seeds:  # a paper number without a run
        return [row.label, "0", "-", "-", "-", "-", "-", _paper_cell(row)]
    return [
        row.label,
        str(row.seeds),
        str(row.rounds),
        row.final.shown(row.kind),
        row.best.shown(row.kind),
        row.rounds_to_target.plain(1) + reached if row.reached else "not reached",
        row.mb_to_target.plain(3, "g") + reached if row.reached else "not reached",
        _paper_cell(row),
    ]


def _paper_cell(row: TableRow) -> str:
    return "-" if row.paper is None else (f"{100 * row.paper:.2f}" if row.kind.is_accuracy else f"{row.paper:.4g}")


def to_markdown(comparison: Comparison, target: float) -> str:
    head = header(comparison, target)
    lines = ["| " + " | ".join(head) + " |", "| " + " | ".join("---" for _ in head) + " |"]
    lines += ["| " + " | ".join(_cells(row, comparison.private, comparison.timed)) + " |"
              for row in table_rows(comparison, target)]
    if unmatched := len(unmatched_paper_rows(comparison)):
        lines += ["", f"{unmatched} paper row{'s' * (unmatched != 1)} of {comparison.metric} match no run: shown as "
                      "'paper only: no run'."]
    return "\n".join(lines) + "\n"


def to_csv(comparison: Comparison, target: float) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    metric = comparison.metric
    writer.writerow([
        "configuration", "seeds", "rounds", f"final_{metric}_mean", f"final_{metric}_std", f"best_{metric}_mean",
        f"best_{metric}_std", "rounds_to_target_mean", "rounds_to_target_std", "mb_to_target_mean",
        "mb_to_target_std", "seeds_reaching_target", "target", "paper",
    ] + (["final_epsilon_mean", "final_epsilon_std"] if comparison.private else [])
      + (["virtual_s_to_target_mean", "virtual_s_to_target_std"] if comparison.timed else []))
    for row in table_rows(comparison, target):
        writer.writerow([
            row.label, row.seeds, row.rounds, _num(row.final.mean), _num(row.final.std), _num(row.best.mean),
            _num(row.best.std), _num(row.rounds_to_target.mean), _num(row.rounds_to_target.std),
            _num(row.mb_to_target.mean), _num(row.mb_to_target.std), row.reached, target,
            "" if row.paper is None else row.paper,
        ] + ([_num(row.epsilon.mean), _num(row.epsilon.std)] if comparison.private else [])
          + ([_num(row.virtual_to_target.mean), _num(row.virtual_to_target.std)] if comparison.timed else []))
    return out.getvalue()


def to_latex(comparison: Comparison, target: float) -> str:
    head = header(comparison, target)
    lines = [r"\begin{tabular}{l" + "r" * (len(head) - 1) + "}", r"\toprule", " & ".join(map(_tex, head)) + r" \\"]
    lines.append(r"\midrule")
    lines += [" & ".join(map(_tex, _cells(row, comparison.private, comparison.timed))) + r" \\"
              for row in table_rows(comparison, target)]
    lines += [r"\bottomrule", r"\end{tabular}"]
    return "\n".join(lines) + "\n"


def _tex(text: str) -> str:
    return text.replace("\\", r"\textbackslash{}").replace("_", r"\_").replace("%", r"\%").replace("±", r"$\pm$")


def _num(value: float) -> str:
    return "" if math.isnan(value) else f"{value:.6g}"


def to_html(comparison: Comparison, target: float) -> str:

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header(comparison, target))
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in _cells(row, comparison.private, comparison.timed))
        + "</tr>"
        for row in table_rows(comparison, target)
    )
    return f'<table id="results"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


CLAIMS_HEADER = ["claim", "better vs worse", "metric", "mean difference ± std", "seeds holding", "p (one-sided)",
                 "p (Holm)", "verdict", "paper (better vs worse)"]


def claim_cells(result: ClaimResult) -> list[str]:
    """A claim's row: the mean paired difference ± its std in percentage points (pp) for an accuracy, as numbers
    otherwise; the seeds with ``d > 0`` of the paired ones; the one-sided p in the direction of the mean, and that p
    Holm-adjusted over the sweep's claims (which the verdict reads)."""
    claim, kind = result.claim, result.kind
    text = claim.text if not claim.source or claim.source in claim.text else f"{claim.text} ({claim.source})"
    pair = f"{result.better} vs {result.worse}"
    if result.missing:
        pair += f" [left out: {'; '.join(result.missing)}]"
    return [
        text,
        pair,
        _compared(result),
        _difference(result),
        f"{result.holding}/{result.n}",
        _p(result.p),
        _p(result.p_holm),
        result.verdict,
        "-" if result.paper is None else " vs ".join(_value(v, kind) for v in result.paper),
    ]


def _compared(result: ClaimResult) -> str:
    """What the claim compares: ``metric, final``, or ``virtual_s to global_acc >= 0.8``."""
    claim = result.claim
    if claim.at == "to_target" and claim.target is not None:
        return f"{result.metric} to {result.reached} >= {claim.target:g} (lower is better)"
    return (f"{result.metric}{f' vs {claim.worse_metric}' if claim.worse_metric else ''}, {claim.at}"
            + (" (lower is better)" if result.kind.lower_is_better else ""))


def _p(p: float) -> str:
    return "-" if math.isnan(p) else "< 0.001" if p < 0.001 else f"{p:.3g}"


def _difference(result: ClaimResult) -> str:
    if not result.n:
        return "-"
    if result.claim.at == "to_target":  # d = ln(worse / better): the geometric-mean speedup and its spread
        spread = "" if math.isnan(result.std) else f" (x/÷ {math.exp(result.std):.3g})"
        return f"{math.exp(result.mean):.3g}x sooner{spread}"
    scale, digits, unit = (100.0, ".2f", " pp") if result.kind.is_accuracy else (1.0, ".4g", "")
    spread = "" if math.isnan(result.std) else f" ± {scale * result.std:{digits}}"
    return f"{scale * result.mean:+{digits}}{spread}{unit}"


def _value(value: float, kind: MetricKind) -> str:
    return f"{100 * value:.2f}%" if kind.is_accuracy else f"{value:.4g}"


def claims_markdown(results: list[ClaimResult]) -> str:
    """The "Claims" section of results.md (empty without claims)."""
    if not results:
        return ""
    return "\n".join(["", "## Claims", "", RULE, "", claims_table(results)])


def claims_table(results: list[ClaimResult]) -> str:
    """The claims as one markdown table (header, then a row per claim and pair)."""
    lines = ["| " + " | ".join(CLAIMS_HEADER) + " |", "| " + " | ".join("---" for _ in CLAIMS_HEADER) + " |"]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in claim_cells(r)) + " |" for r in results]
    return "\n".join(lines) + "\n"


def claims_html(results: list[ClaimResult]) -> str:
    """The claims table of the dashboard (empty without claims)."""

    if not results:
        return ""
    head = "".join(f"<th>{html.escape(h)}</th>" for h in CLAIMS_HEADER)
    body = "".join(
        "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in claim_cells(r)) + "</tr>" for r in results
    )
    return (f'<h2>Claims</h2><p>{html.escape(RULE)}</p>'
            f'<table id="claims"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>')


def left_out_markdown(comparison: Comparison) -> str:
    """The run folders left out of the comparison, each with its reason (empty when none was)."""
    if not comparison.left_out:
        return ""
    lines = [f"- {item.name}: {item.reason}" for item in comparison.left_out]
    return "\n## Left out\n\n" + "\n".join(lines) + "\n"


def left_out_html(comparison: Comparison) -> str:
    if not comparison.left_out:
        return ""
    items = "".join(f"<li>{html.escape(item.name)}: {html.escape(item.reason)}</li>" for item in comparison.left_out)
    return f'<h2>Left out</h2><ul id="left-out">{items}</ul>'
