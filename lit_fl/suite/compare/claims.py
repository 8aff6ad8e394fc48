"""The paper's claims (``claims:`` of ``NAME.paper.yaml``, :mod:`lit_fl.suite.paper`) checked on a sweep's runs,
paired by seed.

Pairs: a claim's ``better`` match and each ``worse`` match may each match several configurations. A configuration
matched by ``better`` is compared with every configuration matched by a ``worse`` match that has the same value
of every sweep parameter the claim's matches do not name (e.g. ``better: {config: dfml.yaml}`` and ``worse:
{config: fedavg.yaml}`` over a sweep that also varies ``data`` give one pair per ``data``); a configuration is
never compared with itself. Each pair is one :class:`ClaimResult`.

Per pair, for every seed both configurations ran to completion, ``d_s`` is how much better the better
configuration did than the worse one on that seed: ``better - worse`` of the metric at the last evaluated round
(``at: final``) or at each run's best round (``at: best``); ``worse - better`` for a loss (lower is better). With
``at: to_target`` the compared value is the claim's ``axis`` (virtual seconds, megabytes, rounds) at the first
evaluated round whose metric reached ``target``, on a log scale: ``d = ln(worse / better)``, the log of the speedup
(sooner is better; "x times faster" is how such claims are made, and a heavy-tailed cost, such as the time of
rounds that wait for the slowest of Zipf-distributed clients, is compared by its ratio, not dominated by its
slowest seed); the table shows ``exp(mean d)``, the geometric-mean speedup. A run that never reached the target
has no value (its seed is left out, and named).
Unfinished runs (summary status not ``completed``) are left out and named, and so is each seed that only one side
has (or whose run has no value of the metric). Within a configuration the first completed run of a seed counts.

Verdict (one-sided paired t-test on the ``d_s``, ``n - 1`` degrees of freedom, Holm-adjusted over the claims of
the sweep, level ``ALPHA`` = 0.05): each pair's p is the one-sided p in the direction of its mean ``d``; the family
is every claim and pair of the sweep's paper file (every result of one :func:`evaluate_claims` call), and each p is
adjusted by Holm's step-down procedure (:func:`holm_adjusted`) to ``p_holm``. *holds* when the mean ``d`` > 0 and
``p_holm`` < 0.05 ("better > worse"); *does not hold* when the mean ``d`` < 0 and ``p_holm`` < 0.05 ("worse >
better"); otherwise *within seed noise*; *not enough seeds* with fewer than 2 paired seeds. (All ``d_s`` equal and
nonzero: t is infinite, p = 0.) Why adjusted: a paper file makes several claims, each over several pairs, all
tested at once; at p < 0.05 each, the chance that at least one of them "holds" by seed noise alone grows with their
number. Holm's procedure keeps that family-wise error rate at 0.05 whatever the dependence between the tests (pairs
sharing a configuration are not independent), and rejects everything Bonferroni rejects and sometimes more. A
result built alone (:func:`evaluate_pair`, no family) is a family of one: its verdict reads its own p, which is what
Holm gives with m = 1.

The t distribution is computed exactly for integer degrees of freedom (Abramowitz & Stegun 26.7.3-4), with the
standard library. Why a t-test and not a sign test: with the 3 to 5 seeds a sweep affords, a sign test can never
reach p < 0.05 (its smallest one-sided p with 3 seeds is 1/8), so every claim would read "within seed noise"; the
paired t-test uses the size of the differences, not only their signs.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from lit_fl.errors import ConfigError
from lit_fl.suite.compare.results import Comparison, Group, RunResult
from lit_fl.suite.compare.spread import sample_std
from lit_fl.suite.paper import Claim, check_matches, matches
from lit_fl.tracking.metric_kind import Elapsed, MetricKind

ALPHA = 0.05
HOLDS, FAILS, NOISE, TOO_FEW = "holds", "does not hold", "within seed noise", "not enough seeds"
RULE = (
    "Paired by seed: d = better − worse (worse − better for a loss) per seed both configurations completed. "
    "Verdict by a one-sided paired t-test (p in the direction of mean d), Holm-adjusted over every claim and pair "
    f"of the sweep's paper file (p (Holm)): {HOLDS} if mean d > 0 and p (Holm) < {ALPHA:g}; "
    f"{FAILS} if mean d < 0 and p (Holm) < {ALPHA:g}; {NOISE} otherwise; "
    f"{TOO_FEW} with fewer than 2 paired seeds. Holm, because the claims are tested at once: it keeps the chance "
    f"that any of them holds or fails by seed noise alone at {ALPHA:g} without assuming the tests independent, "
    "and is uniformly more powerful than Bonferroni."
)


@dataclass(frozen=True)
class ClaimResult:
    """Claim ``number`` (from 1, in file order) on one pair of configurations (their labels ``better`` and
    ``worse``): ``differences`` are ``(seed, d_s)`` by seed, ``missing`` the seeds left out (with why),
    ``unfinished`` the names of the runs left out, ``paper`` the paper's (better, worse) numbers or None;
    ``p_holm`` its :attr:`p` Holm-adjusted over its family (every result of one :func:`evaluate_claims` call), NaN
    when it was built alone (then the verdict reads :attr:`p`: a family of one)."""

    number: int
    claim: Claim
    metric: str
    better: str
    worse: str
    differences: tuple[tuple[int, float], ...]
    missing: tuple[str, ...] = ()
    unfinished: tuple[str, ...] = ()
    paper: tuple[float, float] | None = None
    p_holm: float = math.nan
    #: ``at: to_target``: the column that had to reach the target (:attr:`metric` is then the claim's axis)
    reached: str = ""

    @property
    def kind(self) -> MetricKind:
        """How :attr:`metric` compares: as the column does, or (``at: to_target``) lower is better."""
        return Elapsed(self.metric) if self.claim.at == "to_target" else MetricKind(self.metric)

    @property
    def values(self) -> list[float]:
        return [d for _, d in self.differences]

    @property
    def n(self) -> int:
        return len(self.differences)

    @property
    def mean(self) -> float:
        return statistics.fmean(self.values) if self.values else math.nan

    @property
    def std(self) -> float:
        """Sample std (ddof 1) of the ``d_s``; NaN with fewer than 2."""
        return sample_std(self.values) if self.n > 1 else math.nan

    @property
    def holding(self) -> int:
        """Seeds on which the better configuration did better (``d_s > 0``)."""
        return sum(d > 0 for d in self.values)

    @property
    def p_better(self) -> float:
        """One-sided p of the paired t-test for "better > worse" (NaN with fewer than 2 seeds)."""
        return paired_p_greater(self.values)

    @property
    def p_worse(self) -> float:
        """One-sided p for "worse > better"."""
        return paired_p_greater([-d for d in self.values])

    @property
    def p(self) -> float:
        """The one-sided p in the direction of the mean difference."""
        return self.p_worse if self.mean < 0 else self.p_better

    @property
    def p_verdict(self) -> float:
        """The p the verdict reads: :attr:`p_holm`, or :attr:`p` itself when the result was built alone (``p_holm``
        NaN: no family was given, and Holm over a family of one leaves p as it is)."""
        return self.p if math.isnan(self.p_holm) else self.p_holm

    @property
    def verdict(self) -> str:
        if self.n < 2:
            return TOO_FEW
        p = self.p_verdict
        if self.mean > 0 and p < ALPHA:
            return HOLDS
        if self.mean < 0 and p < ALPHA:
            return FAILS
        return NOISE


def evaluate_claims(comparison: Comparison) -> list[ClaimResult]:
    """Every claim of the comparison's paper file, one result per pair of configurations (none without a paper
    file or claims), each with its ``p_holm``: the results are one family, adjusted together by
    :func:`holm_adjusted`; a :class:`ConfigError` line for a claim that matches no run, pairs no configurations or
    names a metric no run has."""
    if comparison.paper is None or not comparison.paper.claims:
        return []
    path = comparison.source / "paper.yaml"
    check_matches(comparison.paper, path, [group.params for group in comparison.groups], rows=False)
    results = []
    for number, claim in enumerate(comparison.paper.claims, start=1):
        metric = claim.metric or comparison.paper.metric
        for key, column in (("metric", metric), ("worse_metric", claim.worse_metric)):
            if column is not None and not any(column in row for run in comparison.runs for row in run.rows):
                raise ConfigError(f"paper numbers {path}: claims[{number}].{key}: no run has a {column!r} column")
        found = claim_pairs(comparison.groups, claim)
        if not found:
            raise ConfigError(f"paper numbers {path}: claims[{number}].better, worse: no configuration matching better "
                              "has the same other sweep parameters as one matching worse")
        results += [evaluate_pair(number, claim, metric, better, worse, j) for better, worse, j in found]
    adjusted = holm_adjusted([result.p for result in results])
    return [replace(result, p_holm=p_holm) for result, p_holm in zip(results, adjusted)]


def holm_adjusted(ps: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order of ``ps``: with the m non-NaN p sorted ascending
    ``p_(1) <= ... <= p_(m)``, ``p_holm_(i) = max_{j <= i} min(1, (m - j + 1) p_(j))``; a NaN stays NaN and does
    not count in m. Rejecting every hypothesis with ``p_holm < alpha`` keeps the family-wise error rate (the chance
    of rejecting any true one) at alpha under any dependence between the tests. Holm, S. (1979), "A simple
    sequentially rejective multiple test procedure", Scandinavian Journal of Statistics 6:65-70."""
    order = sorted((i for i, p in enumerate(ps) if not math.isnan(p)), key=lambda i: ps[i])
    m = len(order)
    adjusted = [math.nan] * len(ps)
    running = 0.0
    for j, i in enumerate(order, start=1):
        running = max(running, min(1.0, (m - j + 1) * ps[i]))
        adjusted[i] = running
    return adjusted


def claim_pairs(groups: list[Group], claim: Claim) -> list[tuple[Group, Group, int]]:
    """``(better, worse, j)`` for every configuration matching ``better`` and every different one matching
    ``worse[j]`` that agrees with it on every sweep parameter the claim does not name."""
    keys = claim.keys
    out = []
    for better in (g for g in groups if matches(claim.better, g.params)):
        for j, match in enumerate(claim.worse):
            out += [(better, worse, j) for worse in groups
                    if worse is not better and matches(match, worse.params)
                    and _context(worse.params, keys) == _context(better.params, keys)]
    return out


def evaluate_pair(number: int, claim: Claim, metric: str, better: Group, worse: Group, j: int = 0) -> ClaimResult:
    """Claim ``number`` on one pair of configurations (``j``: which ``worse`` match ``worse`` matched), paired by
    seed."""
    kind, worse_metric = MetricKind(metric), claim.worse_metric or metric
    sides = [_by_seed(better, metric, claim, kind), _by_seed(worse, worse_metric, claim, kind)]
    if claim.at == "to_target":  # the compared quantity is the axis: lower is better
        kind = Elapsed(claim.axis)
    labels = (better.label, worse.label)
    differences, missing = [], []
    for seed in sorted(set(sides[0][0]) | set(sides[1][0]) | set(sides[0][1]) | set(sides[1][1])):
        values = [side[0].get(seed, math.nan) for side in sides]
        if not any(math.isnan(v) for v in values):
            d = values[0] - values[1]
            differences.append((seed, -d if kind.lower_is_better else d))
            continue
        why = [_absent(label, side, seed, _sought(claim, column)) for label, side, v, column
               in zip(labels, sides, values, (metric, worse_metric)) if math.isnan(v)]
        missing.append(f"seed {seed} ({'; '.join(why)})")
    unfinished = tuple(run.name for side in sides for runs in side[1].values() for run in runs)
    paper = (claim.paper[0], claim.paper[1 + j]) if claim.paper else None
    shown = claim.axis if claim.at == "to_target" else metric
    return ClaimResult(number, claim, shown, better.label, worse.label, tuple(differences), tuple(missing),
                       unfinished, paper, reached=metric if claim.at == "to_target" else "")


def _sought(claim: Claim, column: str) -> str:
    """What a run without a value lacks: the column, or the target it never reached."""
    return f"{column} >= {claim.target:g}" if claim.at == "to_target" else column


#: a configuration's runs by seed: the metric of its first completed run (NaN: no value), and its unfinished runs
Side = tuple[dict[int, float], dict[int, list[RunResult]]]


def _by_seed(group: Group, metric: str, claim: Claim, kind: MetricKind) -> Side:
    values: dict[int, float] = {}
    unfinished: dict[int, list[RunResult]] = {}
    for run in group.runs:
        if not run.complete:
            unfinished.setdefault(run.seed, []).append(run)
        elif run.seed not in values:
            values[run.seed] = (_log(run.at_target(metric, claim.target, claim.axis))
                                if claim.at == "to_target" and claim.target is not None
                                else run_value(run, metric, claim.at, kind))
    return values, unfinished


def _absent(label: str, side: Side, seed: int, metric: str) -> str:
    """Why a configuration has no value for ``seed``."""
    values, unfinished = side
    if seed in values:
        return f"{label}: no {metric}"
    if seed in unfinished:
        return f"{label}: unfinished run {', '.join(run.name for run in unfinished[seed])}"
    return f"no {label} run"


def run_value(run: RunResult, metric: str, at: str, kind: MetricKind | None = None) -> float:
    """``metric`` at the run's last evaluated round (``final``: the last non-NaN value) or its ``best``; NaN when
    the run has none."""
    column = [v for v in run.column(metric) if not math.isnan(v)]
    if not column:
        return math.nan
    return (kind or MetricKind(metric)).best(column) if at == "best" else column[-1]


def _log(cost: float) -> float:
    """The log of a cost to target (NaN for none, or for a cost that is not positive: no ratio to take)."""
    return math.log(cost) if cost > 0 else math.nan


def _context(params: dict[str, Any], keys: set[str]) -> str:
    return json.dumps({k: v for k, v in params.items() if k not in keys}, sort_keys=True, default=str)


def paired_p_greater(differences: list[float]) -> float:
    """One-sided p of the paired t-test that the mean of ``differences`` is > 0: ``P(T >= t)`` with
    ``t = mean / (std / sqrt(n))`` and ``n - 1`` degrees of freedom; NaN with fewer than 2 values. All values
    equal: p = 0 if they are > 0, 1 if < 0, 0.5 if 0."""
    n = len(differences)
    if n < 2:
        return math.nan
    mean, std = statistics.fmean(differences), sample_std(differences)
    if not math.isfinite(std):  # an infinite difference: no t statistic
        return math.nan
    if std == 0.0:
        return 0.0 if mean > 0 else 1.0 if mean < 0 else 0.5
    return student_t_sf(mean / (std / math.sqrt(n)), n - 1)


def student_t_sf(t: float, df: int) -> float:
    """``P(T > t)`` for Student's t with integer ``df >= 1`` degrees of freedom."""
    inside = _student_t_abs_below(abs(t), df)
    return (1.0 - inside) / 2.0 if t >= 0 else (1.0 + inside) / 2.0


def _student_t_abs_below(t: float, df: int) -> float:
    """``P(|T| < t)``, ``t >= 0``: Abramowitz & Stegun 26.7.3 (odd ``df``) and 26.7.4 (even), with
    ``theta = atan(t / sqrt(df))``."""
    theta = math.atan(t / math.sqrt(df))
    sin, cos2 = math.sin(theta), math.cos(theta) ** 2
    if df % 2 == 1:
        term = total = math.cos(theta) if df > 1 else 0.0
        for k in range(1, (df - 1) // 2):  # cos^(2k+1): 2·4···2k / 3·5···(2k+1)
            term *= cos2 * (2 * k) / (2 * k + 1)
            total += term
        return min(1.0, 2.0 / math.pi * (theta + sin * total))
    term = total = 1.0
    for k in range(1, df // 2):  # cos^(2k): 1·3···(2k-1) / 2·4···2k
        term *= cos2 * (2 * k - 1) / (2 * k)
        total += term
    return min(1.0, sin * total)
