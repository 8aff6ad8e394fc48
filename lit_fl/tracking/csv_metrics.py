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
        if self.path.exists():
            rows, self.torn = _read(self.path)
            if rows:
                self.columns = list(rows[0])

    def append(self, row: dict[str, float]) -> None:
        if self.columns is None:
            extras = sorted(k for k in row if k not in BASE_COLUMNS)
            self.columns = [c for c in BASE_COLUMNS] + extras
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("w", newline="") as handle:
                csv.writer(handle).writerow(self.columns)
        unknown = set(row) - set(self.columns)
        if unknown:
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
    """The complete rows, and whether a half-written last row was left out."""
    try:
        text = Path(path).read_text()
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: damaged: not a text file") from None
    torn = bool(text) and not text.endswith("\n")
    if torn:
        text = text[: text.rfind("\n") + 1]
    rows = list(csv.DictReader(io.StringIO(text, newline="")))
    if rows and "round" not in rows[0]:
        raise ConfigError(f"{path}: damaged: no round column in its header")
    return [_parsed(path, line, row) for line, row in enumerate(rows, start=2)], torn


def _parsed(path: str | Path, line: int, row: dict[str | None, str | None]) -> dict[str, float]:
    """One row as floats (``round`` as int); a damaged one is a :class:`ConfigError` naming the file and line."""
    if None in row or None in row.values():
        raise ConfigError(f"{path}: damaged: line {line} does not have one value per column")
    try:
        return {k: (int(float(v)) if k == "round" else float(v)) for k, v in row.items()}  # type: ignore[arg-type]
    except ValueError:
        bad = next(k for k, v in row.items() if not _is_number(v))
        raise ConfigError(f"{path}: damaged: line {line}, {bad}: {row[bad]!r} is not a number") from None


def _is_number(value: str | None) -> bool:
    try:
        float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return True


def _format(value: float) -> str:
    if isinstance(value, int):
        return str(value)
    return "nan" if value != value else f"{value:.6g}"
