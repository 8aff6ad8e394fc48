"""``metrics.csv`` of the run directory: one row per evaluated round (DESIGN run-directory contract)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from lit_fl.errors import ConfigError
from lit_fl.io import atomic_write_text

#: Columns every run has, in this order; ``acc/<arch>`` and algorithm extras follow.
BASE_COLUMNS = (
    "round",
    "reported_acc",
    "global_acc",
    "global_acc_regular",
    "local_acc",
    "local_acc_regular",
    "alpha",
    "comm_mb",
    "round_comm_mb",
    "round_s",
    "eval_s",
    "train_loss",
    "aggregator",
    "num_participants",
)


class MetricsCSV:
    """Appends rows; the header is fixed by the first row (extra keys later are an error, not silently lost)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.columns: list[str] | None = None
        #: whether the file ended in a half-written row (a kill between two writes), which is left out
        self.torn = False
        #: whether the header came from an existing file (a resumed run) rather than this process's first row
        self.header_read = False
        if self.path.exists():
            rows, self.torn = _read(self.path)
            if rows:
                self.columns = list(rows[0])
                self.header_read = True
                missing = [c for c in BASE_COLUMNS if c not in self.columns]
                if missing:
                    raise ConfigError(f"{self.path}: damaged: no column {', '.join(missing)} (every run writes "
                                      f"{', '.join(BASE_COLUMNS)}); restore the file or start a new run")

    def append(self, row: dict[str, float]) -> None:
        if self.columns is None:
            extras = sorted(k for k in row if k not in BASE_COLUMNS)
            self.columns = [c for c in BASE_COLUMNS] + extras
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("w", newline="") as handle:
                csv.writer(handle).writerow(self.columns)
        unknown = set(row) - set(self.columns)
        if unknown and self.header_read:  # the file on disk lost columns this run writes: damaged input
            raise ConfigError(f"{self.path}: damaged: no column {', '.join(sorted(unknown))}, which this run "
                              "writes; restore the file or start a new run")
        if unknown:  # this process wrote the header: a method that logs a new key later is a bug
            raise KeyError(f"metrics.csv: new columns {sorted(unknown)} after the header was written")
        with self.path.open("a", newline="") as handle:
            csv.writer(handle).writerow([_format(row.get(c, math.nan)) for c in self.columns])

    def truncate_after(self, round_: int) -> list[dict[str, float]]:
        """Drop rows of rounds after ``round_`` (used on resume); returns the rows kept."""
        if not self.path.exists():
            return []
        kept = [r for r in _read(self.path)[0] if r["round"] <= round_]
        out = io.StringIO()
        writer = csv.writer(out)
        if self.columns:
            writer.writerow(self.columns)
            writer.writerows([[_format(r.get(c, math.nan)) for c in self.columns] for r in kept])
        atomic_write_text(self.path, out.getvalue())
        return kept


def read_metrics(path: str | Path) -> list[dict[str, float]]:
    """The rows of a ``metrics.csv`` as dicts of floats (``round`` as int); a half-written last row (the file does
    not end with a newline: a kill between two writes) is left out."""
    return _read(path)[0]


def _read(path: str | Path) -> tuple[list[dict[str, float]], bool]:
    """The complete rows, and whether a half-written last row was left out. The one reader of ``metrics.csv``: it
    checks what it reads (:func:`_checked_header`, :func:`_parsed`, rounds increasing), so a damaged file is one
    :class:`ConfigError` naming the file, the line and the column, never a value that breaks a later use."""
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: damaged: not a text file") from None
    torn = bool(text) and not text.endswith("\n")
    if torn:
        text = text[: text.rfind("\n") + 1]
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[dict[str, float]] = []
    try:
        header = next(reader, None)
        if header is None:
            return [], torn
        columns = _checked_header(path, header)
        for cells in reader:
            if cells:  # a blank line is no row (as csv.DictReader reads it)
                rows.append(_parsed(path, reader.line_num, columns, cells))
                _check_round_order(path, reader.line_num, rows)
    except csv.Error as err:
        raise ConfigError(f"{path}: damaged: line {reader.line_num}: {err}") from None
    return rows, torn


def _checked_header(path: str | Path, header: list[str]) -> list[str]:
    """The column names: ``round`` among them, each named once and not empty."""
    if "round" not in header:
        raise ConfigError(f"{path}: damaged: no round column in its header")
    for column in header:
        if not column.strip():
            raise ConfigError(f"{path}: damaged: line 1 has a column without a name")
        if header.count(column) > 1:
            raise ConfigError(f"{path}: damaged: line 1 names column {column!r} twice")
    return header


def _parsed(path: str | Path, line: int, columns: list[str], cells: list[str]) -> dict[str, float]:
    """One row as floats (``round`` as int), each value checked (:func:`_value`); a damaged one is a
    :class:`ConfigError` naming the file, line and column."""
    if len(cells) != len(columns):
        raise ConfigError(f"{path}: damaged: line {line} does not have one value per column "
                          f"({len(cells)} values, {len(columns)} columns)")
    row: dict[str, float] = {}
    for column, cell in zip(columns, cells):
        problem, value = _value(column, cell)
        if problem:
            raise ConfigError(f"{path}: damaged: line {line}, {column}: {cell!r} is not {problem}")
        row[column] = value
    return row


def _value(column: str, cell: str) -> tuple[str, float]:
    """``("", value)``, or what the cell should have been: ``round`` an integer >= 1, an accuracy a fraction in
    [0, 1] (or nan: not evaluated that round), ``comm_mb`` and ``round_comm_mb`` megabytes >= 0 (or nan), any
    other column a number (a loss may be inf: a run that diverged)."""
    from lit_fl.tracking.metric_kind import MetricKind

    try:
        value = float(cell)
    except ValueError:
        return "a number", math.nan
    if column == "round":
        ok = math.isfinite(value) and value.is_integer() and value >= 1
        return ("" if ok else "a round number (an integer >= 1)"), (int(value) if ok else math.nan)
    if MetricKind(column).is_accuracy and not (math.isnan(value) or 0.0 <= value <= 1.0):
        return "an accuracy (a fraction in [0, 1], or nan)", value
    if column in ("comm_mb", "round_comm_mb") and not (math.isnan(value) or 0.0 <= value < math.inf):
        return "megabytes (a finite number >= 0, or nan)", value
    return "", value


def _check_round_order(path: str | Path, line: int, rows: list[dict[str, float]]) -> None:
    """The row just read is of a later round than the one before (rows are appended in round order)."""
    if len(rows) > 1 and rows[-1]["round"] <= rows[-2]["round"]:
        raise ConfigError(f"{path}: damaged: line {line}, round: {rows[-1]['round']} follows round "
                          f"{rows[-2]['round']} (rows must be of increasing rounds)")


def _format(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return "nan" if value != value else f"{value:.6g}"
