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
        at: final                                # optional: final (the last evaluated round, default) or best
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

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError
from lit_fl.strict_yaml import load_yaml
from lit_fl.tracking.metric_kind import MetricKind

CLAIM_KEYS = ("about", "at", "better", "claim", "differs", "metric", "note", "paper", "source", "worse", "worse_metric")
AT = ("final", "best")


@dataclass(frozen=True)
class PaperRow:
    match: dict[str, Any]
    value: float
    label: str = ""
    metric: str | None = None  # None: the file's metric


@dataclass(frozen=True)
class Claim:
    """One comparison the paper makes: the configuration(s) ``better`` match beat those of every ``worse`` match
    on ``metric`` (None: the file's) at the ``final`` evaluated round or at their ``best``. ``paper`` holds the
    paper's numbers, better first, then one per ``worse`` match (empty when not given); ``note`` what a reproduction
    found about it (why it does not hold at this scale, a deviation)."""

    text: str
    better: dict[str, Any]
    worse: tuple[dict[str, Any], ...]
    metric: str | None = None
    at: str = "final"
    paper: tuple[float, ...] = ()
    source: str = ""
    note: str = ""  # what was found about it at this scale (shown by docs/reproductions.md), e.g. why it does not hold
    about: tuple[str, ...] = ()  # the config key prefixes the claim is about (empty: those its matches name)
    differs: dict[str, str] = field(default_factory=dict)  # other keys allowed to differ, with the paper's reason
    #: the worse side's column, when the paper reports another quantity for those methods (FedORION sec. 4.1:
    #: FedMD and KT-pFL learn no server model and report their clients' mean accuracy); None: ``metric``
    worse_metric: str | None = None

    @property
    def keys(self) -> set[str]:
        """The sweep parameters named by ``better`` or any ``worse`` match (the rest must agree within a pair)."""
        return set(self.better).union(*self.worse)


@dataclass(frozen=True)
class Choice:
    """A setting the paper leaves open (``choice``), what the sweep does about it (``taken``) and ``why``."""

    choice: str
    taken: str
    why: str


@dataclass(frozen=True)
class Paper:
    source: str
    metric: str
    rows: list[PaperRow] = field(default_factory=list)
    claims: tuple[Claim, ...] = ()
    choices: tuple[Choice, ...] = ()


def load_paper(path: str | Path) -> Paper:
    """Read and check a ``.paper.yaml`` file (one :class:`ConfigError` line naming the problem otherwise)."""
    path = Path(path)
    raw = load_yaml(path, f"paper numbers {path}")
    if not isinstance(raw, dict) or not isinstance(raw.get("rows"), list):
        raise ConfigError(f"paper numbers {path}: expected keys source, metric, rows (a list)")
    unknown = set(raw) - {"source", "metric", "rows", "claims", "choices"}
    if unknown:
        raise ConfigError(f"paper numbers {path}: unknown key {sorted(unknown, key=str)[0]!r}; "
                          "allowed: choices, claims, metric, rows, source")
    metric = raw.get("metric", "reported_acc")
    if not isinstance(metric, str) or not metric:
        raise ConfigError(f"paper numbers {path}: metric must be a metrics.csv column name, got {metric!r}")
    rows = [_row(path, i, row) for i, row in enumerate(raw["rows"], start=1)]
    claims = raw.get("claims", [])
    if not isinstance(claims, list):
        raise ConfigError(f"paper numbers {path}: claims must be a list, got {type(claims).__name__}")
    parsed = tuple(_claim(path, i, claim, metric) for i, claim in enumerate(claims, start=1))
    return Paper(str(raw.get("source", "")), metric, rows, parsed, _choices(path, raw.get("choices", [])))


def _row(path: Path, i: int, row: Any) -> PaperRow:
    """One ``rows`` item: ``match`` (a mapping), ``value`` (a fraction, like metrics.csv), optional ``label`` (text)
    and ``metric`` (a column name); a :class:`ConfigError` naming the file, row ``i`` and the key otherwise."""
    where = f"paper numbers {path}: row {i}"
    if not isinstance(row, dict) or not isinstance(row.get("match"), dict) or "value" not in row:
        raise ConfigError(f"{where} needs match (a mapping) and value")
    unknown = set(row) - {"match", "value", "label", "metric"}
    if unknown:
        raise ConfigError(f"{where} has unknown key {sorted(unknown, key=str)[0]!r}; allowed: label, match, metric, "
                          "value")
    value = row["value"]
    if not _is_number(value) or not 0.0 <= value <= 1.0:
        raise ConfigError(f"{where} value must be a fraction in [0, 1], got {value!r}")
    metric = row.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise ConfigError(f"{where} metric must be a metrics.csv column name, got {metric!r}")
    label = row.get("label", "")
    if not isinstance(label, (str, int, float)) or isinstance(label, bool):
        raise ConfigError(f"{where} label must be text, got {label!r}")
    return PaperRow(dict(row["match"]), float(value), str(label), metric)


def _choices(path: Path, raw: Any) -> tuple[Choice, ...]:
    """``choices``: a list of mappings with the keys choice, taken and why (non-empty strings)."""
    keys = ("choice", "taken", "why")
    if not isinstance(raw, list):
        raise ConfigError(f"paper numbers {path}: choices must be a list, got {type(raw).__name__}")
    out = []
    for i, item in enumerate(raw, start=1):
        if not isinstance(item, dict) or set(item) != set(keys) or not all(
            isinstance(item[k], str) and item[k].strip() for k in keys
        ):
            raise ConfigError(f"paper numbers {path}: choice {i} must have exactly the keys choice, taken, why "
                              f"(non-empty strings), got {item!r}")
        out.append(Choice(*(" ".join(item[k].split()) for k in keys)))
    return tuple(out)


def _claim(path: Path, i: int, raw: Any, file_metric: str) -> Claim:
    """One ``claims`` item, checked key by key (a :class:`ConfigError` naming the file, claim ``i`` and the key);
    the paper's numbers of an accuracy are fractions, like the rows'."""
    where = f"paper numbers {path}: claim {i}"
    if not isinstance(raw, dict):
        raise ConfigError(f"{where} must be a mapping with keys claim, better, worse; got {type(raw).__name__}")
    unknown = set(raw) - set(CLAIM_KEYS)
    if unknown:
        raise ConfigError(f"{where} has unknown key {sorted(unknown, key=str)[0]!r}; allowed: {', '.join(CLAIM_KEYS)}")
    for key in ("claim", "better", "worse"):
        if key not in raw:
            raise ConfigError(f"{where} needs key {key!r}")
    if not isinstance(raw["claim"], str) or not raw["claim"].strip():
        raise ConfigError(f"{where} key 'claim' must be the claim's text (a non-empty string)")
    better = _match(where, "better", raw["better"])
    worse_raw = raw["worse"] if isinstance(raw["worse"], list) else [raw["worse"]]
    if not worse_raw:
        raise ConfigError(f"{where} key 'worse' must be a match or a non-empty list of matches")
    worse = tuple(_match(where, "worse", w) for w in worse_raw)
    metric = raw.get("metric")
    if metric is not None and (not isinstance(metric, str) or not metric):
        raise ConfigError(f"{where} key 'metric' must be a metrics.csv column name, got {metric!r}")
    worse_metric = raw.get("worse_metric")
    if worse_metric is not None and (not isinstance(worse_metric, str) or not worse_metric):
        raise ConfigError(f"{where} key 'worse_metric' must be a metrics.csv column name, got {worse_metric!r}")
    kinds = [MetricKind(m) for m in (worse_metric, metric or file_metric) if m is not None]
    if len({(k.is_accuracy, k.lower_is_better) for k in kinds}) > 1:
        raise ConfigError(f"{where} key 'worse_metric': {worse_metric!r} is not measured like "
                          f"{metric or file_metric!r} (a claim compares one kind of quantity)")
    at = raw.get("at", "final")
    if at not in AT:
        raise ConfigError(f"{where} key 'at' must be final or best, got {at!r}")
    paper = _paper_numbers(where, raw.get("paper"), 1 + len(worse))
    if MetricKind(metric or file_metric).is_accuracy and not all(0.0 <= v <= 1.0 for v in paper):
        raise ConfigError(f"{where} key 'paper' must be fractions in [0, 1] for an accuracy, got {list(paper)}")
    return Claim(raw["claim"].strip(), better, worse, metric, at, paper, str(raw.get("source", "")),
                 " ".join(str(raw.get("note", "")).split()), _about(where, raw.get("about")),
                 _differs(where, raw.get("differs")), worse_metric)


def _about(where: str, raw: Any) -> tuple[str, ...]:
    """``about``: absent, or a non-empty list of dotted config keys."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw or not all(isinstance(k, str) and k.strip() for k in raw):
        raise ConfigError(f"{where} key 'about' must be a non-empty list of config keys (e.g. [algorithm]), "
                          f"got {raw!r}")
    return tuple(k.strip() for k in raw)


def _differs(where: str, raw: Any) -> dict[str, str]:
    """``differs``: absent, or a mapping of dotted config key to the reason (a non-empty string)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw or not all(
        isinstance(k, str) and k.strip() and isinstance(v, str) and v.strip() for k, v in raw.items()
    ):
        raise ConfigError(f"{where} key 'differs' must map config keys to the paper's reason for the difference "
                          f"(non-empty strings), got {raw!r}")
    return {k.strip(): " ".join(v.split()) for k, v in raw.items()}


def _match(where: str, key: str, raw: Any) -> dict[str, Any]:
    if not isinstance(raw, dict) or not raw:
        raise ConfigError(f"{where} key {key!r} must be a non-empty mapping of sweep parameters, got {raw!r}")
    if "seed" in raw:
        raise ConfigError(f"{where} key {key!r} must not match seed (a claim is paired over the seeds)")
    return dict(raw)


def _paper_numbers(where: str, raw: Any, count: int) -> tuple[float, ...]:
    """``paper``: absent, or ``count`` finite numbers (better, then one per worse match)."""
    if raw is None:
        return ()
    numbers = raw if isinstance(raw, list) else [None]
    if len(numbers) != count or not all(_is_number(v) for v in numbers):
        raise ConfigError(f"{where} key 'paper' must be a list of {count} numbers (better, then each worse), "
                          f"got {raw!r}")
    return tuple(float(v) for v in numbers)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def matches(match: dict[str, Any], params: dict[str, Any]) -> bool:
    """Whether every ``match`` item equals the sweep parameter of that name in ``params``."""
    return all(key in params and params[key] == value for key, value in match.items())


def check_claims(paper: Paper | None, path: str | Path, configurations: Iterable[dict[str, Any]]) -> None:
    """A :class:`ConfigError` line for the first claim whose ``better`` or a ``worse`` match matches none of
    ``configurations`` (the sweep parameters of its runs)."""
    if paper is None:
        return
    configurations = list(configurations)
    for i, claim in enumerate(paper.claims, start=1):
        for key, match in [("better", claim.better)] + [("worse", w) for w in claim.worse]:
            if not any(matches(match, params) for params in configurations):
                raise ConfigError(f"paper numbers {path}: claim {i} key {key!r} ({match}) matches no run of the sweep")


def paper_row(paper: Paper | None, params: dict[str, Any], metric: str | None = None) -> PaperRow | None:
    """The first row for ``metric`` (default: the file's) whose every ``match`` item equals ``params`` (a run's
    sweep parameters)."""
    if paper is None:
        return None
    wanted = metric or paper.metric
    for row in paper.rows:
        if (row.metric or paper.metric) != wanted:
            continue
        if matches(row.match, params):
            return row
    return None


def paper_value(paper: Paper | None, params: dict[str, Any], metric: str | None = None) -> float | None:
    row = paper_row(paper, params, metric)
    return None if row is None else row.value
