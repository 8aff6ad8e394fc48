"""The paper's numbers beside a sweep: ``sweeps/NAME.paper.yaml``.

::

    source: "DFML (papers/dfml.txt), Table 6"   # where the numbers come from
    metric: global_acc                           # the metrics.csv column they compare to
    rows:                                        # one per configuration the paper reports
      - match: {config: experiments/mnist5k/dfml.yaml, data.beta: 0.1}   # sweep parameters that identify it
        value: 0.7366                            # a fraction, like metrics.csv
        label: "DFML, Dir(0.1)"                  # optional
        metric: server_acc/small                 # optional: a row for another column than ``metric``

A run's configuration matches a row when every ``match`` item equals the run's sweep parameter and the row is
for the metric the table shows.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from lit_fl.errors import ConfigError


@dataclass(frozen=True)
class PaperRow:
    match: dict[str, Any]
    value: float
    label: str = ""
    metric: str | None = None  # None: the file's metric


@dataclass(frozen=True)
class Paper:
    source: str
    metric: str
    rows: list[PaperRow] = field(default_factory=list)


def load_paper(path: str | Path) -> Paper:
    """Read and check a ``.paper.yaml`` file (one :class:`ConfigError` line naming the problem otherwise)."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as err:
        raise ConfigError(f"paper numbers {path}: malformed YAML: {str(err).splitlines()[0]}") from None
    if not isinstance(raw, dict) or not isinstance(raw.get("rows"), list):
        raise ConfigError(f"paper numbers {path}: expected keys source, metric, rows (a list)")
    unknown = set(raw) - {"source", "metric", "rows"}
    if unknown:
        raise ConfigError(f"paper numbers {path}: unknown key {sorted(unknown)[0]!r}; allowed: metric, rows, source")
    rows = []
    for i, row in enumerate(raw["rows"], start=1):
        if not isinstance(row, dict) or not isinstance(row.get("match"), dict) or "value" not in row:
            raise ConfigError(f"paper numbers {path}: row {i} needs match (a mapping) and value")
        value = float(row["value"])
        if not 0.0 <= value <= 1.0:
            raise ConfigError(f"paper numbers {path}: row {i} value must be a fraction in [0, 1], got {value}")
        unknown = set(row) - {"match", "value", "label", "metric"}
        if unknown:
            raise ConfigError(f"paper numbers {path}: row {i} has unknown key {sorted(unknown)[0]!r}; "
                              "allowed: label, match, metric, value")
        rows.append(PaperRow(dict(row["match"]), value, str(row.get("label", "")), row.get("metric")))
    return Paper(str(raw.get("source", "")), str(raw.get("metric", "global_acc")), rows)


def paper_row(paper: Paper | None, params: dict[str, Any], metric: str | None = None) -> PaperRow | None:
    """The first row for ``metric`` (default: the file's) whose every ``match`` item equals ``params`` (a run's
    sweep parameters)."""
    if paper is None:
        return None
    wanted = metric or paper.metric
    for row in paper.rows:
        if (row.metric or paper.metric) != wanted:
            continue
        if all(key in params and params[key] == value for key, value in row.match.items()):
            return row
    return None


def paper_value(paper: Paper | None, params: dict[str, Any], metric: str | None = None) -> float | None:
    row = paper_row(paper, params, metric)
    return None if row is None else row.value
