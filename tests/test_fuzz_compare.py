"""``lit-fl compare`` under generated run folders, valid and damaged by one generated edit (Hypothesis): it prints
the final accuracy of the completed runs (mean and std over seeds, as computed here from the cells written) and
names every run it leaves out, or it exits 2 in at most three lines naming the damaged file; never a traceback and
never a write outside ``--out``. Failures Hypothesis found are kept as ``@example``s."""

from __future__ import annotations

import math
import re
import shutil
import statistics
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import run_cli, snapshot
from fuzz_inputs import (
    CONFIG_DAMAGE,
    MetricsModel,
    RunModel,
    budget,
    check_refusal_or_success,
    damaged_metrics,
    damaged_runs,
    metrics_models,
    run_sets,
)
from hypothesis import example, given
from hypothesis import strategies as st

#: the table shows accuracies in percent with 2 decimals: a reference within half a display unit is the same number
SHOWN = 0.005 + 1e-9


@dataclass
class Expected:
    """What compare must do with the runs: refuse naming ``name``, or show the counted runs and name the others."""

    refuse: str | None  # the text the error line must hold; None: compare works
    counted: list[RunModel]
    unfinished_named: list[RunModel]  # runs left out of the statistics, named in the row
    left_out: list[RunModel]  # folders without an evaluated round, named under "Left out"


def expected(runs: list[RunModel], damage: str, damaged: int) -> Expected:
    """The reference: what the rules of each file say compare must do (computed from the models, not the files)."""
    target, _, kind = damage.partition(":")
    run = runs[damaged] if damaged >= 0 else None
    with_metrics = [r for r in runs if r.metrics is not None]
    if run is not None and run.metrics is not None:  # compare reads a folder's files when it has a metrics.csv
        if target == "metrics" and run.metrics.problem():
            return Expected(f"{run.shown}/metrics.csv", [], [], [])
        if target == "config" and CONFIG_DAMAGE[kind][1]:
            return Expected(f"{run.shown}/config.yaml", [], [], [])
        if target == "summary":
            return Expected(f"{run.shown}/summary.json", [], [], [])
    with_rows = [r for r in with_metrics if r.metrics.complete_rows()]
    left_out = [r for r in runs if r not in with_rows]
    if not with_rows:
        return Expected("no runs with metrics", [], [], [])
    lacking = [r for r in with_rows if "global_acc" not in r.metrics.header]
    if lacking:
        return Expected("global_acc", [], [], [])
    done = [r for r in with_rows if r.status == "completed"]
    unfinished = [r for r in with_rows if r.status != "completed"]
    return Expected(None, done or unfinished, unfinished if done else [], left_out)


def _table_row(out: str) -> list[str]:
    lines = [line for line in out.splitlines() if line.startswith("| ") and not line.startswith("| configuration")]
    rows = [line for line in lines if not line.startswith("| ---")]
    assert len(rows) == 1, out  # one configuration: the runs differ in their seed only
    return [cell.strip() for cell in rows[0].strip("|").split("|")]


def _percent(cell: str) -> tuple[float, float | None]:
    match = re.fullmatch(r"(-?[\d.]+|nan|inf)(?: ± (-?[\d.]+|nan))?", cell)
    assert match, cell
    return float(match.group(1)), None if match.group(2) is None else float(match.group(2))


def check_compare(runs: list[RunModel], damage: str = "none", damaged: int = -1) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for run in runs:
            run.write(root / "runs")
        before = snapshot(root)
        result = run_cli("compare", root / "runs", "--out", root / "out", "--metric", "global_acc")
        want = expected(runs, damage, damaged)
        check_refusal_or_success(result.rc, result.out, result.err, want.refuse)
        assert (result.rc == 2) == (want.refuse is not None), (damage, want.refuse, result.rc, result.err)
        after = {k: v for k, v in snapshot(root).items() if k != "out" and not k.startswith("out/")}
        assert after == before  # nothing written outside --out
        if result.rc == 0 and not damage.startswith("config"):  # a config.yaml edit may make two configurations
            _check_numbers(result.out, want)
        shutil.rmtree(root, ignore_errors=True)


def _check_numbers(out: str, want: Expected) -> None:
    cells = _table_row(out)
    finals = [v for v in (r.metrics.column("global_acc")[-1] for r in want.counted) if not math.isnan(v)]
    assert int(cells[1]) == len(want.counted), cells
    assert int(cells[2]) == max(int(r.metrics.column("round")[-1]) for r in want.counted), cells
    if not finals:
        assert cells[3] == "-", cells
    else:
        mean, std = _percent(cells[3])
        assert abs(mean - 100 * statistics.fmean(finals)) <= SHOWN, (cells[3], finals)
        if len(finals) > 1:
            assert std is not None and abs(std - 100 * statistics.stdev(finals)) <= SHOWN, (cells[3], finals)
    for run in want.unfinished_named:
        assert f"{run.shown} (seed {run.seed})" in cells[0], (run.shown, cells[0])
    left_out = out.split("## Left out", 1)[1] if want.left_out else ""
    for run in want.left_out:
        assert run.shown in left_out, (run.shown, out)


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[list[RunModel], str, int]:
    """Runs, and the damage done to one of them (``none``, -1: the runs as written)."""
    runs = draw(run_sets())
    if draw(st.booleans()):
        damage, damaged, runs = draw(damaged_runs(runs))
        return runs, damage, damaged
    return runs, "none", -1


def _run(name: str, seed: int, header: list[str], cells: list[list[str]], status: str | None) -> RunModel:
    return RunModel(name.encode(), seed, MetricsModel(header, cells), status)


FULL = ["round", "global_acc", "local_acc", "comm_mb", "train_loss"]


@pytest.mark.slow  # the command end to end, dozens of times: tens of seconds on 2 cores
@budget(25)
@given(scenarios())
@example(([_run("run0", 0, FULL, [["1", "0.5", "0.4", "0.25", "1.2"]], "completed"),
           _run("run1", 1, FULL[:4], [["1", "0.6", "0.5", "0.25"]], "completed")], "metrics:drop-column", 1))
# found by the fuzz profile: a run without a column the other runs have (train_loss) was a KeyError in the dashboard
def test_compare_shows_the_reference_numbers_or_refuses_naming_the_damaged_file(
    scenario: tuple[list[RunModel], str, int],
) -> None:
    check_compare(*scenario)


# -- the metrics.csv reader alone: many examples, each a few milliseconds --------------------------------------------


@st.composite
def metrics_files(draw: st.DrawFn) -> tuple[str, MetricsModel]:
    model = draw(metrics_models())
    return draw(st.one_of(st.just(("none", model)), damaged_metrics(model)))


@budget(300)
@given(metrics_files())
@example(("cell", MetricsModel(FULL, [["1", "5", "0.4", "0.25", "1.2"]])))  # an accuracy of 500%
@example(("cell", MetricsModel(FULL, [["nan", "0.5", "0.4", "0.25", "1.2"]])))  # was a StopIteration traceback
@example(("cell", MetricsModel(FULL, [["inf", "0.5", "0.4", "0.25", "1.2"]])))  # was an OverflowError traceback
def test_the_metrics_reader_returns_the_cells_or_names_the_file_and_line(case: tuple[str, MetricsModel]) -> None:
    from lit_fl.errors import ConfigError
    from lit_fl.tracking import read_metrics

    _, model = case
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "metrics.csv"
        path.write_bytes(model.text())
        problem = model.problem()
        try:
            rows = read_metrics(path)
        except ConfigError as err:
            assert problem is not None, (str(err), model)
            assert str(err).startswith(f"{path}: damaged") and "\n" not in str(err), str(err)
            return
        assert problem is None, (problem, rows)
        expected = [[float(cell) for cell in row] for row in model.complete_rows()]
        got = [[row[column] for column in model.header] for row in rows]
        assert [[c if c == c else "nan" for c in row] for row in got] == \
            [[c if c == c else "nan" for c in row] for row in expected]
