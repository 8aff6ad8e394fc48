"""Issue 37 item 3: ``fit``, ``sweep`` and ``reproduce`` write only where their run or sweep folder says, never
into the working directory they were started from (a sweep continued from elsewhere once wrote its run there)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_config, write_config

REPO = Path(__file__).resolve().parents[1]


def _in(cwd: Path, *argv: object) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    return subprocess.run([sys.executable, "-m", "lit_fl.cli", *map(str, argv)], cwd=cwd, capture_output=True,
                          text=True, env=env, timeout=600)


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """An unrelated, empty working directory."""
    (tmp_path / "elsewhere").mkdir()
    return tmp_path / "elsewhere"


def test_fit_with_wandb_writes_only_into_its_run_folder(tmp_path: Path, elsewhere: Path) -> None:
    config = write_config(tmp_path / "tiny.yaml", {**tiny_config("DFML", rounds=1), "logger": {"wandb": True}})
    result = _in(elsewhere, "fit", "--config", config, "--run_dir", tmp_path / "runs", "--name", "one")
    assert result.returncode == 0, result.stderr
    assert list(elsewhere.iterdir()) == []
    run = tmp_path / "runs" / "one"
    assert {"config.yaml", "metrics.csv", "summary.json", "checkpoints", "wandb"} <= {p.name for p in run.iterdir()}


def test_a_sweep_started_and_continued_from_two_other_folders_writes_into_its_own(
    tmp_path: Path, elsewhere: Path
) -> None:
    write_config(tmp_path / "tiny.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
    sweep = write_config(tmp_path / "s.yaml", {"program": "lit-fl", "name": "s", "method": "grid", "parameters": {
        "config": {"value": str(tmp_path / "tiny.yaml")}, "seed": {"values": [0, 1]}}})
    first = _in(elsewhere, "sweep", sweep, "--run_dir", "../runs")
    assert first.returncode == 0, first.stderr
    folder = tmp_path / "runs" / "sweeps" / "s"
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["runs"][1]["status"] = "interrupted"  # as a stop during run 001 leaves it
    (folder / "manifest.json").write_text(json.dumps(manifest))
    shutil.rmtree(folder / "runs" / "001-tiny-s1")
    deeper = tmp_path / "a" / "b"  # another depth: the relative ../runs of the first call is another folder here
    deeper.mkdir(parents=True)
    again = _in(deeper, "sweep", sweep, "--run_dir", "../../runs")
    assert again.returncode == 0, again.stderr
    assert list(elsewhere.iterdir()) == [] and list(deeper.iterdir()) == [] and not (tmp_path / "a" / "runs").exists()
    runs = tmp_path / "runs" / "sweeps" / "s" / "runs"
    assert sorted(p.name for p in runs.iterdir()) == ["000-tiny-s0", "001-tiny-s1"]
    assert all((run / "summary.json").is_file() for run in runs.iterdir())
    assert [run["status"] for run in json.loads((folder / "manifest.json").read_text())["runs"]] == ["completed"] * 2


def test_reproduce_writes_its_sweeps_and_page_where_it_is_told(
    tmp_path: Path, elsewhere: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from lit_fl.suite import reproduce

    write_config(tmp_path / "tiny.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
    sweep = write_config(tmp_path / "toy.yaml", {"program": "lit-fl", "name": "toy", "method": "grid", "parameters": {
        "config": {"value": str(tmp_path / "tiny.yaml")}, "seed": {"values": [0]}}})
    monkeypatch.setattr(reproduce, "SWEEPS", [("Toy paper", "toy", 0.5)])
    monkeypatch.setattr(reproduce, "sweep_file", lambda name: sweep)
    monkeypatch.chdir(elsewhere)
    assert reproduce.main(["--run_dir", str(tmp_path / "out" / "runs"), "--out", str(tmp_path / "out" / "docs")]) == 0
    assert list(elsewhere.iterdir()) == []
    assert (tmp_path / "out" / "docs" / "reproductions.md").is_file()
    assert (tmp_path / "out" / "runs" / "sweeps" / "toy" / "wall_time.json").is_file()
