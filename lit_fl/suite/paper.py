"""The paper's numbers beside a sweep: ``sweeps/NAME.paper.yaml``.

::

    source: "DFML (papers/dfml.txt), Table 6"   # where the numbers come from
    metric: global_acc                           # the metrics.csv column they compare to (default: reported_acc)
    rows:                                        # one per configuration the paper reports
      - match: {config: experiments/mnist5k/dfml.yaml, data.beta: 0.1}   # sweep parameters that identify it
        value: 0.7366                            # a fraction, like metrics.csv
        label: "DFML, Dir(0.1)"                  # optional
        metric: server_acc/small                 # optional: a row for another column than ``metric``
    claims:                                      # optional: the comparisons the paper makes
      - claim: "DFML above FedAvg under label skew (Table 6)"   # the text shown
        better: {config: experiments/mnist5k/dfml.yaml}          # the configuration(s) claimed better
        worse: {config: experiments/mnist5k/fedavg.yaml}         # claimed worse; or a list: better than each
        metric: global_acc                       # optional: default the file's metric
        worse_metric: global_acc                 # optional: the worse side's column, where the paper reports
                                                 # another quantity for those methods (default: metric)
        at: final                                # optional: final (the last evaluated round, default), best, or
                                                 # to_target: reach `target` sooner on `axis` (lower is better)
        target: 0.8                              # with at: to_target, the metric value to reach
        axis: virtual_s                          # with at: to_target, the column compared (default virtual_s)
        paper: [0.7366, 0.6543]                  # optional: the paper's better and worse numbers (one per worse)
        source: "Table 6"                        # optional
        note: "..."                              # optional: what a reproduction found (why it fails at CPU scale)
        about: [algorithm]                       # optional: the config keys the claim is about (its subject)
        differs: {rounds: "why the paper ..."}   # optional: other keys the compared configurations may differ in
    choices:                                     # optional: what the paper leaves open, and the reading taken
      - choice: "initialisation"                 # the open question
        taken: "both: models.same_init true and false"   # what the sweep does
        why: "sec. 3.5 says ..."                 # why (the paper's text, or why both)

The configurations a claim compares must differ only in its subject (``about``; by default the sweep parameters
its matches name, ``config`` standing for ``algorithm``) or in a key its ``differs`` gives the paper's reason for:
``lit-fl sweep`` refuses a sweep whose claims compare anything else (:mod:`lit_fl.suite.controlled`).

A run's configuration matches a row when every ``match`` item equals the run's sweep parameter and the row is
for the metric the table shows. A claim's ``better`` and each of its ``worse`` matches follow the same rule; how
a claim whose matches each match several configurations is paired and tested is in
:mod:`lit_fl.suite.compare.claims`.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BeforeValidator, Field, model_validator

from lit_fl.errors import ConfigError
from lit_fl.strict_yaml import load_yaml
from lit_fl.suite.document_schema import Column, FileModel, Fraction, Label, Note, Number, Prose, Text, read_as, refuse
from lit_fl.tracking.metric_kind import MetricKind

#: where a claim reads its runs: the last evaluated round, or each run's best
At = Literal["final", "best", "to_target"]


def _no_seed(match: dict[str, Any]) -> dict[str, Any]:
    if "seed" in match:
        raise ValueError("must not match seed (a claim is paired over the seeds)")
    return match


def _listed(value: Any) -> Any:
    """``worse``: one match, or a list of them."""
    return [value] if isinstance(value, dict) else value


#: sweep parameters that identify configurations: ``{config: experiments/mnist5k/dfml.yaml, data.beta: 0.1}``
Match = dict[str, Any]
#: a claim's side: a non-empty match that leaves the seed free
ClaimMatch = Annotated[Match, Field(min_length=1), AfterValidator(_no_seed)]


class PaperRow(FileModel):
    """One number of the paper: the configuration ``match`` names scored ``value`` (a fraction) on ``metric``."""

    match: Match
    value: Fraction
    label: Label = ""
    metric: Column | None = None  # None: the file's metric


class Claim(FileModel):
    """One comparison the paper makes: the configuration(s) ``better`` match beat those of every ``worse`` match
    on ``metric`` (None: the file's) at the ``final`` evaluated round or at their ``best``, or (``at: to_target``)
    reach ``metric`` >= ``target`` at a lower ``axis`` (virtual seconds, megabytes, rounds). ``paper`` holds the
    paper's numbers, better first, then one per ``worse`` match (empty when not given); ``note`` what a reproduction
    found about it (why it does not hold at this scale, a deviation)."""

    text: Text = Field(alias="claim")
    better: ClaimMatch
    worse: Annotated[tuple[ClaimMatch, ...], BeforeValidator(_listed), Field(min_length=1)]
    metric: Column | None = None
    at: At = "final"
    #: ``at: to_target``: the value of ``metric`` to reach, and the column whose value when it is first reached is
    #: compared (lower is better)
    target: Number | None = None
    axis: Column = "virtual_s"
    paper: tuple[Number, ...] = ()
    source: Label = ""
    note: Note = ""  # what was found about it at this scale (shown by docs/reproductions.md)
    #: the config key prefixes the claim is about (empty: those its matches name)
    about: Annotated[tuple[Text, ...], Field(min_length=1)] = ()
    #: other keys allowed to differ, with the paper's reason
    differs: Annotated[dict[Text, Prose], Field(min_length=1)] = {}
    #: the worse side's column, when the paper reports another quantity for those methods (FedORION sec. 4.1:
    #: FedMD and KT-pFL learn no server model and report their clients' mean accuracy); None: ``metric``
    worse_metric: Column | None = None

    @model_validator(mode="after")
    def _target_with_to_target(self) -> Claim:
        if (self.at == "to_target") != (self.target is not None):
            raise refuse(["target"], "is given with at: to_target, and only then (the metric value to reach)")
        return self

    @model_validator(mode="after")
    def _one_paper_number_per_side(self) -> Claim:
        if self.paper and len(self.paper) != 1 + len(self.worse):
            raise refuse(["paper"], f"must be a list of {1 + len(self.worse)} numbers (better, then each worse), "
                                    f"got {list(self.paper)}")
        return self

    @property
    def keys(self) -> set[str]:
        """The sweep parameters named by ``better`` or any ``worse`` match (the rest must agree within a pair)."""
        return set(self.better).union(*self.worse)


class Choice(FileModel):
    """A setting the paper leaves open (``choice``), what the sweep does about it (``taken``) and ``why``."""

    choice: Prose
    taken: Prose
    why: Prose


class Paper(FileModel):
    """A ``.paper.yaml`` file: where its numbers come from, the metric they are of, its rows, claims and choices."""

    source: Label = ""
    metric: Column = "reported_acc"
    rows: list[PaperRow]
    claims: tuple[Claim, ...] = ()
    choices: tuple[Choice, ...] = ()

    @model_validator(mode="after")
    def _claims_compare_one_kind(self) -> Paper:
        """A claim compares one kind of quantity, and the paper's numbers of an accuracy are fractions."""
        for i, claim in enumerate(self.claims):
            metric = claim.metric or self.metric
            sides = map(MetricKind, (metric, claim.worse_metric or metric))
            kinds = {(kind.is_accuracy, kind.lower_is_better) for kind in sides}
            if len(kinds) > 1:
                raise refuse(["claims", i, "worse_metric"], f"{claim.worse_metric!r} is not measured like {metric!r} "
                             "(a claim compares one kind of quantity)")
            if MetricKind(metric).is_accuracy and not all(0.0 <= v <= 1.0 for v in claim.paper):
                raise refuse(["claims", i, "paper"], f"must be fractions in [0, 1] for an accuracy, got "
                             f"{list(claim.paper)}")
        return self


def load_paper(path: str | Path) -> Paper:
    """Read and check a ``.paper.yaml`` file (one :class:`ConfigError` line naming the problem otherwise)."""
    return read_as(Paper, load_yaml(path, f"paper numbers {path}"), f"paper numbers {path}")


def matches(match: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether every ``match`` item equals the sweep parameter of that name in ``params``."""
    return all(key in params and params[key] == value for key, value in match.items())


def check_matches(paper: Paper | None, path: str | Path, configurations: Iterable[dict[str, Any]],
                  rows: bool = True) -> None:
    """A :class:`ConfigError` line for the first row (unless not ``rows``: a comparison shows a row without a run as
    missing), or claim's ``better`` or ``worse`` match, that matches none of ``configurations`` (the sweep parameters
    of its runs)."""
    if paper is None:
        return
    configurations = list(configurations)
    sides = [(f"rows[{i}]", row.match) for i, row in enumerate(paper.rows, start=1) if rows]
    for i, claim in enumerate(paper.claims, start=1):
        sides += [(f"claims[{i}].better", claim.better)] + [(f"claims[{i}].worse", w) for w in claim.worse]
    for where, match in sides:
        if not any(matches(match, params) for params in configurations):
            raise ConfigError(f"paper numbers {path}: {where}: {match} matches no run of the sweep")


def paper_row(paper: Paper | None, params: dict[str, Any], metric: str | None = None) -> PaperRow | None:
    """The row for ``metric`` (default: the file's) that describes ``params`` (a run's sweep parameters) most
    closely: of the rows whose every ``match`` item equals ``params``, the one that matches the most items (the first
    of those), so a general row never stands beside a configuration a more specific row describes."""
    found = [row for row in rows_for(paper, metric) if matches(row.match, params)]
    return max(found, key=lambda row: len(row.match), default=None)


def rows_for(paper: Paper | None, metric: str | None = None) -> list[PaperRow]:
    """The paper's rows of ``metric`` (default: the file's), in the file's order."""
    if paper is None:
        return []
    wanted = metric or paper.metric
    return [row for row in paper.rows if (row.metric or paper.metric) == wanted]


def paper_value(paper: Paper | None, params: dict[str, Any], metric: str | None = None) -> float | None:
    row = paper_row(paper, params, metric)
    return None if row is None else row.value
