"""Generated input for the property-based tests (Hypothesis): run folders as a model (header, cells, summary status,
config) written in the real on-disk formats, edits that damage a file the way people do (a column dropped or
renamed, a cell replaced, a row cut short, bytes that are not UTF-8, a key repeated, an empty file), and the check
every command must pass: it works, or it exits 2 with at most three lines, no traceback, naming the file.

Profiles (``conftest.py``): ``fast`` (the default in ``make test``: derandomized, a few dozen examples per test) and
``fuzz`` (``LIT_FL_HYPOTHESIS=fuzz``, ``make fuzz``: 100 times as many, randomized)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st

#: examples of the fuzz profile per example of the fast one
FUZZ_FACTOR = 100


def budget(fast: int) -> settings:
    """``fast`` examples in the fast profile, ``FUZZ_FACTOR`` times as many in the fuzz profile."""
    scale = FUZZ_FACTOR if settings.default.max_examples >= 1000 else 1
    return settings(max_examples=fast * scale)


# -- what a command printed ---------------------------------------------------------------------------------------


def check_refusal_or_success(rc: int, out: str, err: str, must_name: str | None = None) -> None:
    """Exit 0, or exit 2 with 1 to 3 lines on stderr, the last one naming ``must_name``; never a traceback, and the
    output is text a UTF-8 terminal takes (stdout strictly; stderr as Python writes it, with backslash escapes)."""
    out.encode("utf-8")  # a name that is not UTF-8 must be shown escaped, never crash the print
    err.encode("utf-8", "backslashreplace")
    assert "Traceback" not in err and "Traceback" not in out, err
    assert rc in (0, 2), (rc, err[-2000:])
    if rc == 2:
        lines = err.strip().splitlines()
        assert 1 <= len(lines) <= 3, err
        if must_name is not None:
            assert must_name in lines[-1].encode("utf-8", "backslashreplace").decode(), (must_name, lines[-1])


# -- metrics.csv ----------------------------------------------------------------------------------------------------

COLUMNS = ["round", "global_acc", "local_acc", "comm_mb", "train_loss"]
ACCURACIES = ("global_acc", "local_acc")


@dataclass
class MetricsModel:
    """A ``metrics.csv`` as its header and cells; ``cut`` (a damage) cuts the text inside line ``cut`` (0: the
    header), which a reader must take as a torn last line."""

    header: list[str]
    cells: list[list[str]]
    cut: int | None = None
    raw: bytes | None = None  # set by a damage that writes bytes no model describes (not UTF-8)

    def text(self) -> bytes:
        if self.raw is not None:
            return self.raw
        lines = [",".join(self.header)] + [",".join(row) for row in self.cells]
        if self.cut is None:
            return ("\n".join(lines) + "\n").encode()
        kept = "".join(line + "\n" for line in lines[: self.cut])
        return (kept + lines[self.cut][: max(1, len(lines[self.cut]) // 2)]).encode()

    def complete_rows(self) -> list[list[str]]:
        """The rows a reader sees: every line of a cut file before the cut (none of an empty file)."""
        if self.raw is not None:
            return []
        if self.cut is None:
            return self.cells
        return self.cells[: max(0, self.cut - 1)]

    def problem(self) -> str | None:
        """Why the file is damaged by the rules of ``metrics.csv`` (None: it is valid)."""
        if self.raw is not None:
            return None if self.raw == b"" else "not UTF-8"
        if self.cut == 0:
            return None  # only a torn header: an empty file, no row yet
        header = self.header
        if "round" not in header or len(set(header)) != len(header) or not all(h.strip() for h in header):
            return "header"
        last = 0
        for row in self.complete_rows():
            if len(row) != len(header):
                return "row length"
            for column, cell in zip(header, row):
                try:
                    value = float(cell)
                except ValueError:
                    return f"{column} not a number"
                if column == "round" and not (math.isfinite(value) and value.is_integer() and value > last):
                    return "round"
                if column == "round":
                    last = value
                if column in ACCURACIES and not (math.isnan(value) or 0 <= value <= 1):
                    return "accuracy range"
                if column == "comm_mb" and not (math.isnan(value) or 0 <= value < math.inf):
                    return "MB range"
        return None

    def column(self, name: str) -> list[float]:
        if name not in self.header:
            return []
        i = self.header.index(name)
        return [float(row[i]) for row in self.complete_rows()]


def _fraction() -> st.SearchStrategy[str]:
    return st.integers(0, 10_000).map(lambda k: f"{k / 10_000:g}")


@st.composite
def metrics_models(draw: st.DrawFn) -> MetricsModel:
    rounds = draw(st.integers(1, 4))
    cells = []
    for r in range(1, rounds + 1):
        cells.append([str(r), draw(_fraction()), draw(_fraction()), f"{0.25 * r:g}", f"{draw(st.floats(0, 3)):.4g}"])
    return MetricsModel(list(COLUMNS), cells)


CELL_DAMAGE = st.sampled_from(["5", "-0.5", "inf", "abc", "", "-inf", "nan", "NaN", "1.5", "1e309", "0x10", " 0.5",
                               "1_0", "0.5.1"])


@st.composite
def damaged_metrics(draw: st.DrawFn, model: MetricsModel) -> tuple[str, MetricsModel]:
    """One generated edit of ``model``: its name and the damaged model."""
    kind = draw(st.sampled_from(["cell", "drop-column", "cell", "rename-column", "cell", "short-row", "cut",
                                 "not-utf8", "repeat-column", "empty", "repeat-row", "long-row"]))  # a cell: most ways
    header, cells = list(model.header), [list(row) for row in model.cells]
    if kind in ("drop-column", "rename-column", "repeat-column"):
        i = draw(st.integers(0, len(header) - 1))
        if kind == "drop-column":
            header.pop(i)
            cells = [row[:i] + row[i + 1:] for row in cells]
        elif kind == "rename-column":
            header[i] = draw(st.sampled_from(["", "Round", "global acc", header[i] + "_x", "comm_mb", "round"]))
        else:
            header[draw(st.integers(0, len(header) - 1))] = header[i]
    elif kind == "cell":
        row, col = draw(st.integers(0, len(cells) - 1)), draw(st.integers(0, len(header) - 1))
        cells[row][col] = draw(CELL_DAMAGE)
    elif kind == "short-row":
        row = draw(st.integers(0, len(cells) - 1))
        cells[row] = cells[row][: draw(st.integers(1, len(header) - 1))]
    elif kind == "long-row":
        cells[draw(st.integers(0, len(cells) - 1))].append("7")
    elif kind == "repeat-row":
        row = draw(st.integers(0, len(cells) - 1))
        cells.insert(row, list(cells[row]))
    elif kind == "cut":
        return kind, MetricsModel(header, cells, cut=draw(st.integers(0, len(cells))))
    elif kind == "empty":
        return kind, MetricsModel(header, cells, raw=b"")
    else:  # bytes that are not UTF-8 in a value
        text = MetricsModel(header, cells).text()
        at = draw(st.integers(len(",".join(header)) + 1, len(text) - 1))
        return kind, MetricsModel(header, cells, raw=text[:at] + b"\xff\xfe" + text[at:])
    return kind, MetricsModel(header, cells)


# -- run folders ----------------------------------------------------------------------------------------------------

STATUSES = ("completed", "interrupted", "failed", None)


@dataclass
class RunModel:
    """A run folder: its name (bytes: a name need not be UTF-8), seed, metrics, summary status (None: no
    summary.json) and the text of its config.yaml and summary.json where a damage replaced them."""

    name: bytes
    seed: int
    metrics: MetricsModel | None
    status: str | None
    config_text: bytes | None = None
    summary_text: bytes | None = None
    files: dict[str, bool] = field(default_factory=lambda: {"config.yaml": True, "summary.json": True})

    @property
    def shown(self) -> str:
        """The name as lit-fl prints it (bytes that are not UTF-8 as backslash escapes)."""
        return self.name.decode("utf-8", "backslashreplace")

    def write(self, root: Path) -> Path:
        import json

        import yaml

        folder = Path(os.fsdecode(os.path.join(os.fsencode(root), self.name)))
        folder.mkdir(parents=True)
        if self.metrics is not None:
            (folder / "metrics.csv").write_bytes(self.metrics.text())
        config = {"seed": self.seed, "data": {"beta": 0.5}}
        if self.files["config.yaml"]:
            text = self.config_text if self.config_text is not None else yaml.safe_dump(config).encode()
            (folder / "config.yaml").write_bytes(text)
        if self.files["summary.json"] and (self.status is not None or self.summary_text is not None):
            text = self.summary_text if self.summary_text is not None else json.dumps({"status": self.status}).encode()
            (folder / "summary.json").write_bytes(text)
        return folder


@st.composite
def run_sets(draw: st.DrawFn) -> list[RunModel]:
    count = draw(st.integers(1, 3))
    return [RunModel(f"run{i}".encode(), i, draw(metrics_models()), draw(st.sampled_from(STATUSES)))
            for i in range(count)]


CONFIG_DAMAGE = {  # the config.yaml text, and whether compare must refuse it
    "seed-text": (b"seed: abc\n", True),
    "seed-negative": (b"seed: -1\n", True),
    "seed-list": (b"seed: [1, 2]\n", True),
    "seed-bool": (b"seed: true\n", True),
    "seed-float": (b"seed: 1.5\n", True),
    "repeated-key": (b"seed: 0\nseed: 1\n", True),
    "not-utf8": (b"seed: 0\ndata: {beta: \xff}\n", True),
    "a-list": (b"- 1\n- 2\n", True),
    "malformed": (b"seed: [0\n", True),
    "date": (b"seed: 0\nday: 2020-01-01\n", False),
    "empty": (b"", False),
}
SUMMARY_DAMAGE = {  # the summary.json text (each is damaged: lit-fl writes a JSON mapping with a known status)
    "empty": b"",
    "not-json": b"{\"status\": ",
    "a-list": b"[\"completed\"]",
    "unknown-status": b"{\"status\": \"done\"}",
    "no-status": b"{\"rounds\": 3}",
    "not-utf8": b"{\"status\": \"\xff\"}",
}


@st.composite
def damaged_runs(draw: st.DrawFn, runs: list[RunModel]) -> tuple[str, int, list[RunModel]]:
    """One generated edit of one run folder: its name, the index of the run it damaged and the runs after it."""
    i = draw(st.integers(0, len(runs) - 1))
    run = runs[i]
    target = draw(st.sampled_from(["metrics", "config", "summary", "folder-name", "emptied", "no-metrics"]))
    if target == "metrics":
        kind, metrics = draw(damaged_metrics(run.metrics))
        damaged = replace(run, metrics=metrics)
    elif target == "config":
        kind = draw(st.sampled_from(sorted(CONFIG_DAMAGE)))
        damaged = replace(run, config_text=CONFIG_DAMAGE[kind][0])
    elif target == "summary":
        kind = draw(st.sampled_from(sorted(SUMMARY_DAMAGE)))
        damaged = replace(run, summary_text=SUMMARY_DAMAGE[kind])
    elif target == "folder-name":
        kind = "not-utf8"
        damaged = replace(run, name=run.name + draw(st.sampled_from([b"\xff", b"-\xe9t\xe9", b"\xc3("])))
    elif target == "emptied":
        kind = "nothing in it"
        damaged = replace(run, metrics=None, files={"config.yaml": False, "summary.json": False})
    else:
        kind = "no metrics.csv"
        damaged = replace(run, metrics=None)
    return f"{target}:{kind}", i, [damaged if j == i else r for j, r in enumerate(runs)]
