"""``docs/reproductions.md`` is written from the runs, never by hand: on a hand-made sweep, the page holds the
command, the recorded wall time, the table with the paper's number, each claim with its verdict, the note on a
claim that does not hold, and figures that exist beside it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from test_compare import sweep_dir  # noqa: F401 - the fixture: 2 configurations x 2 seeds, paper numbers

from lit_fl.suite.reproductions import WALL_TIME, Reproduction, write_reproductions


def test_the_page_is_written_from_the_sweep_with_its_claims_notes_and_figures(sweep_dir: Path, tmp_path: Path) -> None:  # noqa: F811
    paper = yaml.safe_load((sweep_dir / "paper.yaml").read_text())
    paper["claims"] = [
        {"claim": "DFML above FedAvg", "better": {"config": "experiments/dfml.yaml"},
         "worse": {"config": "experiments/fedavg.yaml"}, "paper": [0.7366, 0.6543], "source": "Table 6"},
        {"claim": "FedAvg above DFML", "better": {"config": "experiments/fedavg.yaml"},
         "worse": {"config": "experiments/dfml.yaml"}, "note": "Two seeds cannot separate them at 4 rounds."},
    ]
    (sweep_dir / "paper.yaml").write_text(yaml.safe_dump(paper))
    sweep_file = tmp_path / "toy.yaml"
    sweep_file.write_text(yaml.safe_dump({"program": "lit-fl", "name": "toy", "method": "grid",
                                          "description": "DFML vs FedAvg on a toy federation",
                                          "parameters": {"seed": {"values": [0, 1]}}}))
    (sweep_dir / WALL_TIME).write_text(json.dumps({"wall_s": 630.0, "runs": 4, "machine": "2-core AMD EPYC"}))
    out = tmp_path / "docs"
    page = write_reproductions([Reproduction("DFML", sweep_file, sweep_dir)], out).read_text()
    assert "## DFML" in page and "### toy" in page and "DFML vs FedAvg on a toy federation" in page
    assert "Command: `lit-fl sweep toy.yaml --jobs 2 && lit-fl compare runs/sweeps/toy --target 0.8`" in page
    assert "Wall time: 10.5 min for 4 runs on 2-core AMD EPYC (`--jobs 2`)" in page
    assert "| dfml | 2 | 4 | 88.00 ± 2.83 |" in page and "73.66" in page  # ours, and the paper's beside it
    assert "| DFML above FedAvg (Table 6) |" in page and "73.66% vs 65.43%" in page
    assert "- Claim 2 (fedavg vs dfml): " in page and "Two seeds cannot separate them at 4 rounds." in page
    figures = [line[line.index("(") + 1 : -1] for line in page.splitlines() if line.startswith("![")]
    assert figures and all((out / figure).stat().st_size > 10_000 for figure in figures), figures
    assert not list(out.rglob(".all"))  # the scratch figures are gone


def _toy_page(sweep_dir: Path, tmp_path: Path, paper_extra: dict, provenances: list[dict]) -> str:  # noqa: F811
    """The page of ``len(provenances)`` copies of the toy sweep, each recorded as run on its provenance."""
    paper = yaml.safe_load((sweep_dir / "paper.yaml").read_text())
    paper.update(paper_extra)
    (sweep_dir / "paper.yaml").write_text(yaml.safe_dump(paper))
    sweep_file = tmp_path / "toy.yaml"
    sweep_file.write_text(yaml.safe_dump({"program": "lit-fl", "name": "toy", "method": "grid",
                                          "parameters": {"seed": {"values": [0, 1]}}}))
    items = []
    for i, origin in enumerate(provenances):
        folder = sweep_dir if i == 0 else sweep_dir.with_name(f"toy{i}")
        if i:
            shutil.copytree(sweep_dir, folder)
        record = {"wall_s": 60.0, "runs": 4, "machine": "2-core AMD EPYC", "provenance": origin}
        (folder / WALL_TIME).write_text(json.dumps(record))
        items.append(Reproduction("DFML", sweep_file, folder))
    return write_reproductions(items, tmp_path / "docs").read_text()


ORIGIN = {"lit_fl": "abc123", "torch": "2.14.1", "python": "3.11.7", "cpu": "2-core AMD EPYC"}
CLAIM = {"claim": "DFML above FedAvg", "better": {"config": "experiments/dfml.yaml"},
         "worse": {"config": "experiments/fedavg.yaml"}}


def test_the_page_shows_provenance_choices_differences_and_the_regular_models(
    sweep_dir: Path, tmp_path: Path  # noqa: F811
) -> None:
    extra = {
        "claims": [{**CLAIM, "differs": {"rounds": "the paper runs FedAvg twice as long"}}],
        "choices": [{"choice": "initialisation", "taken": "both readings", "why": "sec. 3.5 is ambiguous"}],
    }
    dfml_s0 = sweep_dir / "runs" / "000-dfml-s0" / "metrics.csv"  # its last regular model: 0.75, not 0.85
    lines = dfml_s0.read_text().splitlines()
    cells = lines[-1].split(",")
    cells[lines[0].split(",").index("global_acc_regular")] = "0.75"  # by name: columns are added over time
    lines[-1] = ",".join(cells)
    dfml_s0.write_text("\n".join(lines) + "\n")
    page = _toy_page(sweep_dir, tmp_path, extra, [ORIGIN])
    assert "Provenance: lit-fl abc123, torch 2.14.1, Python 3.11.7, 2-core AMD EPYC" in page
    assert "Mixed versions" not in page
    assert "| initialisation | both readings | sec. 3.5 is ambiguous |" in page
    assert ("- Claim 1 is about `algorithm`; its configurations also differ in `rounds`: the paper runs FedAvg "
            "twice as long") in page
    # the regular models: dfml 0.75, 0.81 against fedavg 0.65, 0.75 -> d = 0.10, 0.06 (peak models: 0.20, 0.06)
    regular = page[page.index("#### The same claims on the regular models"):]
    assert "| DFML above FedAvg | dfml vs fedavg | global_acc_regular, final | +8.00 ± 2.83 pp | 2/2 |" in regular
    assert "| DFML above FedAvg | dfml vs fedavg | global_acc, final | +13.00 ± 9.90 pp | 2/2 |" in page


def test_sweeps_run_on_different_versions_are_named_at_the_top(
    sweep_dir: Path, tmp_path: Path, capsys  # noqa: ANN001, F811
) -> None:
    page = _toy_page(sweep_dir, tmp_path, {"claims": [CLAIM]}, [ORIGIN, {**ORIGIN, "torch": "2.15.0"}])
    top = page[: page.index("## DFML")]
    assert ("**Mixed versions: the sweeps of this page ran on different versions (toy on lit_fl abc123, torch "
            "2.14.1, python 3.11.7; toy1 on lit_fl abc123, torch 2.15.0, python 3.11.7).**") in top
    assert "Mixed versions" in capsys.readouterr().err


def test_a_sweep_with_unfinished_runs_is_left_off_the_page_with_one_line(tmp_path: Path) -> None:
    from lit_fl.suite.reproduce import unfinished_runs

    folder = tmp_path / "sweep"
    assert unfinished_runs(folder) == "not run"
    folder.mkdir()
    runs = [{"name": f"r{i}", "status": status} for i, status in enumerate(["completed", "running", "pending"])]
    (folder / "manifest.json").write_text(json.dumps({"runs": runs}))
    assert unfinished_runs(folder) == "2 of 3 runs not completed"
    (folder / "manifest.json").write_text(json.dumps({"runs": [{**r, "status": "completed"} for r in runs]}))
    assert unfinished_runs(folder) == ""
