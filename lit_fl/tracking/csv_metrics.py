"""``metrics.csv`` of the run directory: one row per evaluated round (DESIGN run-directory contract)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

from lit_fl.file_schema import FileSchema
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
#: the file's schema: a header naming each column once (``round`` and :data:`BASE_COLUMNS` among them), then one row
#: of numbers per evaluated round in increasing rounds (:func:`_header_problem`, :func:`_row_problem`, :func:`_value`)
METRICS_CSV = FileSchema("a header naming each column once, then one row of numbers per evaluated round",
                         written=True, remedy="restore the file or start a new run")


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
                METRICS_CSV.names(self.path, "column", BASE_COLUMNS, self.columns)  # every run writes them

    def append(self, row: dict[str, float]) -> None:
        if self.columns is None:
            extras = sorted(k for k in row if k not in BASE_COLUMNS)
            self.columns = [c for c in BASE_COLUMNS] + extras
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("w", newline="") as handle:
                csv.writer(handle).writerow(self.columns)
        unknown = set(row) - set(self.columns)
        if unknown and not self.header_read:  # this process wrote the header: a method that logs a new key later
            raise KeyError(f"metrics.csv: new columns {sorted(unknown)} after the header was written")  # is a bug
        METRICS_CSV.names(self.path, "column", sorted(row), self.columns)  # the file on disk lost columns: damaged
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
    checks what it reads against :data:`METRICS_CSV`, so a damaged file is one :class:`~lit_fl.errors.ConfigError`
    naming the file, the line and the column, never a value that breaks a later use."""
    text = METRICS_CSV.read_text(path, may_be_absent=True)  # a missing file is the caller's to decide
    torn = bool(text) and not text.endswith("\n")
    if torn:
        text = text[: text.rfind("\n") + 1]
    reader = csv.reader(io.StringIO(text, newline=""))
    rows: list[dict[str, float]] = []
    with METRICS_CSV.reading(path, (csv.Error,), lambda: f"line {reader.line_num} is not CSV"):
        header = next(reader, None)
        if header is None:
            return [], torn
        problem = _header_problem(header)
        METRICS_CSV.require(path, problem is None, f"line 1 {problem}")
        for cells in reader:
            if cells:  # a blank line is no row (as csv.DictReader reads it)
                problem, row = _row_problem(header, cells, rows[-1]["round"] if rows else 0)
                METRICS_CSV.require(path, problem is None, f"line {reader.line_num}{problem}")
                rows.append(row)
    return rows, torn


def _header_problem(header: list[str]) -> str | None:
    """What the header breaks: ``round`` among the column names, each named once and not empty."""
    if "round" not in header:
        return "has no round column"
    if not all(column.strip() for column in header):
        return "has a column without a name"
    twice = [column for column in header if header.count(column) > 1]
    return f"names column {twice[0]!r} twice" if twice else None


def _row_problem(columns: list[str], cells: list[str], previous: int) -> tuple[str | None, dict[str, float]]:
    """``(None, row)`` with the row's values as floats (``round`` as int), or what the row breaks (following the
    line number): one value per column, each as :func:`_value` says, its round after ``previous``."""
    if len(cells) != len(columns):
        return f" does not have one value per column ({len(cells)} values, {len(columns)} columns)", {}
    row: dict[str, float] = {}
    for column, cell in zip(columns, cells):
        problem, value = _value(column, cell)
        if problem:
            return f", {column}: {cell!r} is not {problem}", {}
        row[column] = value
    if row["round"] <= previous:
        return f", round: {row['round']} follows round {previous} (rows must be of increasing rounds)", {}
    return None, row


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


def _format(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return "nan" if value != value else f"{value:.6g}"
