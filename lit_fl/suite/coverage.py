"""``docs/coverage.md``: every table of the five papers cell by cell, the sweep and configuration that produces each
cell or why it cannot be produced, the checked figures, and every model's parameter count against its paper's.

Written from ``lit_fl/configs/coverage.yaml`` (the papers' tables and figures, and what is not a row of a sweep) and
the sweeps' ``.paper.yaml`` files (their rows are the cells, their claims the figures' comparisons)::

    python -m lit_fl.suite.coverage            # rewrite docs/coverage.md
    python -m lit_fl.suite.coverage --check    # exit 1 if the committed page differs from what it would write
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import Field, model_validator

from lit_fl.configs import ROOT
from lit_fl.errors import ConfigError
from lit_fl.strict_yaml import load_yaml
from lit_fl.suite.document_schema import FileModel, Label, Prose, Text, read_as, refuse
from lit_fl.suite.paper import Paper, PaperRow, load_paper

DATA = ROOT / "coverage.yaml"
PAGE = ROOT.parents[1] / "docs" / "coverage.md"
#: a model's count matches its paper's within this relative difference (issue 31's acceptance)
TOLERANCE = 0.05


Count = Annotated[int, Field(strict=True, ge=0)]


class Produced(FileModel):
    """What a shipped sweep produces (``sweep``), or ``reason`` why none does: exactly one of the two."""

    sweep: Text = ""
    reason: Prose = ""

    @model_validator(mode="after")
    def _produced_or_why_not(self) -> Produced:
        if bool(self.sweep) == bool(self.reason):
            raise refuse([], "needs exactly one of sweep and reason", ["sweep", "reason"])
        return self


class Extra(Produced):
    """``count`` cells (described by ``cells``) that are no row of a sweep: produced by ``sweep`` (``how``), or not
    (``reason``)."""

    cells: Label
    count: Annotated[Count, Field(ge=1)]
    how: Prose = ""


class Table(FileModel):
    """A table of a paper: its ``cells`` (result cells), the sweeps whose paper rows are its cells (an item that is a
    list: sweeps producing the same cells), its ``extra`` cells; a table without cells says why (``note``)."""

    name: Text
    cells: Count
    sweeps: list[Text | list[Text]] = []
    extra: list[Extra] = []
    note: Prose = ""

    @model_validator(mode="after")
    def _cells_or_a_note(self) -> Table:
        if self.cells == 0 and (self.sweeps or self.extra or not self.note):
            raise refuse([], f"{self.name} has no result cells: it needs a note, and no sweeps or extra", ["note"])
        return self


class Figure(Produced):
    """A figure: the sweep whose claims check its comparisons, or the ``reason`` it is not produced."""

    name: Text


class PaperEntry(FileModel):
    paper: Text
    file: Text  # under papers/
    tables: list[Table]
    figures: list[Figure] = []


class ModelEntry(FileModel):
    """A model as its paper counts its parameters: at ``classes`` classes and ``input`` shape."""

    arch: Text
    input: Annotated[list[Annotated[int, Field(strict=True, ge=1)]], Field(min_length=1)]
    classes: Annotated[Count, Field(ge=1)]
    paper: Annotated[Count, Field(ge=1)]
    source: Text


class CoverageData(FileModel):
    """``lit_fl/configs/coverage.yaml``."""

    papers: list[PaperEntry]
    models: list[ModelEntry]
    unmatched_models: Prose


def load_data() -> CoverageData:
    return read_as(CoverageData, load_yaml(DATA, f"coverage data {DATA}"), f"coverage data {DATA}")


@dataclass(frozen=True)
class Cell:
    """One line of a table's listing: ``count`` cells produced by ``sweep`` (``how``), or not (``reason``)."""

    text: str
    count: int
    sweep: str = ""
    how: str = ""
    reason: str = ""


def _paper(sweep: str) -> Paper:
    return load_paper(ROOT / "sweeps" / f"{sweep}.paper.yaml")


def _match_text(row: PaperRow) -> str:
    """The configuration a row names: its ``config`` file and the other sweep parameters, one line."""
    parts = [f"`{v}`" if k == "config" else f"{k}={_plain(v)}" for k, v in row.match.items()]
    return ", ".join(parts) + (f" ({row.metric})" if row.metric else "")


def _plain(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_plain(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ", ".join(_plain(v) for v in value) + "]"
    return str(value)


def table_cells(table: Table) -> list[Cell]:
    """The cells of one table: a row of its sweeps' paper files each, where an item of ``sweeps`` that is a list
    names sweeps producing the same cells (rows of one label are one cell, produced by each of them); then its
    ``extra`` cells; a :class:`ConfigError` if they do not add up to ``cells``."""
    by_label: dict[tuple[int, str], Cell] = {}
    for group, item in enumerate(table.sweeps):
        for sweep in item if isinstance(item, list) else [item]:
            for row in _paper(sweep).rows:
                label = row.label or _match_text(row)
                seen = by_label.get((group, label))
                how = _match_text(row) if seen is None else f"{seen.how}; {_match_text(row)}"
                by_label[(group, label)] = Cell(f"{label}: {row.value * 100:.2f}", 1,
                                                sweep if seen is None else f"{seen.sweep}, {sweep}", how)
    cells = list(by_label.values()) + [Cell(e.cells, e.count, e.sweep, e.how, e.reason) for e in table.extra]
    total = sum(c.count for c in cells)
    if total != table.cells:
        raise ConfigError(f"{DATA}: {table.name} lists {total} cells, not its {table.cells}")
    return cells


def parameter_rows(models: list[ModelEntry]) -> list[tuple[str, int, int, str, float]]:
    """``(arch, lit-fl's count, the paper's, source, relative difference)`` per model of the data file."""
    from lit_fl.models import create_model, num_parameters

    rows = []
    for m in models:
        count = num_parameters(create_model(m.arch, tuple(m.input), m.classes))
        rows.append((m.arch, count, m.paper, m.source, count / m.paper - 1.0))
    return rows


def _table_section(table: Table) -> tuple[list[str], int, int]:
    if table.cells == 0:
        return [f"### {table.name}: no result cells", "", table.note, ""], 0, 0
    cells = table_cells(table)
    done = sum(c.count for c in cells if not c.reason)
    lines = [f"### {table.name}: {done} of {table.cells} cells", "",
             "| cell (paper's value) | sweep | configuration |", "| --- | --- | --- |"]
    for c in cells:
        where = ", ".join(f"`sweeps/{name}.yaml`" for name in c.sweep.split(", ") if name)
        count = f" ({c.count} cells)" if c.count > 1 else ""
        lines.append(f"| {c.text}{count} | {where or 'not produced'} | {c.how or c.reason} |")
    return lines + [""], done, table.cells


def _figure_lines(figure: Figure) -> list[str]:
    if not figure.sweep:
        return [f"- **{figure.name}**: not produced: {figure.reason}"]
    claims = _paper(figure.sweep).claims
    out = [f"- **{figure.name}**: `sweeps/{figure.sweep}.yaml`, {len(claims)} claims:"]
    return out + [f"  - {c.text}" for c in claims]


def render(data: CoverageData) -> str:
    """The whole page from the data file's contents (the sweeps' paper files and the models are read here)."""
    body: list[str] = []
    summary = ["| paper | cells produced | cells in its tables |", "| --- | --- | --- |"]
    all_done = all_cells = 0
    for paper in data.papers:
        body += [f"## {paper.paper} (`papers/{paper.file}`)", ""]
        done = total = 0
        for table in paper.tables:
            lines, d, t = _table_section(table)
            body += lines
            done, total = done + d, total + t
        if not paper.tables:
            body += ["No tables: its results are figures.", ""]
        body += ["### Figures", ""] + [line for f in paper.figures for line in _figure_lines(f)] + [""]
        summary.append(f"| {paper.paper} | {done} | {total} |")
        all_done, all_cells = all_done + done, all_cells + total
    summary.append(f"| **all five** | **{all_done}** | **{all_cells}** |")
    return "\n".join(_head(all_done, all_cells) + summary + [""] + body + _models(data)) + "\n"


def _head(done: int, cells: int) -> list[str]:
    return [
        "# Coverage of the five papers",
        "",
        "Generated by `python -m lit_fl.suite.coverage` from `lit_fl/configs/coverage.yaml` and the sweeps'",
        "`.paper.yaml` files; do not edit by hand (a test checks that this page is what the generator writes).",
        "",
        f"**{done} of the {cells} result cells** of the five papers' tables are produced by a shipped sweep (paper",
        "scale: GPUs and the datasets). Each cell names its sweep and the configuration (the sweep parameters) that",
        "runs it; `lit-fl sweep sweeps/NAME.yaml` runs them and `lit-fl compare runs/sweeps/NAME` prints the paper's",
        "number beside ours. A cell that cannot be produced says why. Figures give curves, not numbers: their sweeps",
        "check the comparisons the paper draws from them (claims, tested by `lit-fl compare`). Figures outside",
        "issue 31's list (e.g. DFML's convergence plots) are not enumerated.",
        "",
    ]


def _models(data: CoverageData) -> list[str]:
    lines = ["## Parameter counts", "",
             f"Each model as lit-fl builds it, at the classes and input its paper counts it with; within "
             f"{TOLERANCE:.0%} of the paper's number or not.", "",
             "| model | classes | lit-fl | paper | source | difference | within 5% |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for (arch, count, paper, source, diff), m in zip(parameter_rows(data.models), data.models):
        ok = "yes" if abs(diff) <= TOLERANCE else "**no**"
        lines.append(f"| `{arch}` | {m.classes} | {count:,} | {paper:,} | {source} | {diff:+.1%} | {ok} |")
    return lines + ["", data.unmatched_models]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m lit_fl.suite.coverage", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/coverage.md is not what would be written")
    args = parser.parse_args(argv)
    text = render(load_data())
    if args.check:
        same = PAGE.is_file() and PAGE.read_text() == text
        print(f"{PAGE}: {'up to date' if same else 'stale: run python -m lit_fl.suite.coverage'}")
        return 0 if same else 1
    PAGE.write_text(text)
    print(f"wrote {PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
