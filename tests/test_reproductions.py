"""``docs/reproductions.md`` is written from the runs, never by hand: on a hand-made sweep, the page holds the
command, the recorded wall time, the table with the paper's number, each claim with its verdict, the note on a
claim that does not hold, and figures that exist beside it."""

from __future__ import annotations

import json
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
