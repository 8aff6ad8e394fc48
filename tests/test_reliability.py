"""Every way a long run fails, handled: checkpoints that cannot run code, crashes that keep their evidence,
W&B down, strict summary files, and ``kill -9`` at any moment followed by ``--resume``."""

from __future__ import annotations

import json
import math
import os
import pickle
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli, snapshot, tiny_config, write_config

from lit_fl.algorithms import DFML
from lit_fl.tracking import read_metrics

REPO = Path(__file__).resolve().parents[1]


def _fit(cfg: Path, runs: Path, *argv: Any):  # noqa: ANN202
    return run_cli("fit", "--config", cfg, "--run_dir", runs, *argv)


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path / "cfg.yaml", tiny_config("DFML", rounds=4))


# -- checkpoints that cannot run code -------------------------------------------------------------------------


class _Payload:
    """A pickle that would create a marker file when unpickled by an unrestricted loader."""

    marker = ""

    def __reduce__(self):  # noqa: ANN204
        return (Path.touch, (Path(self.marker),))


def test_a_checkpoint_whose_pickle_would_run_code_runs_nothing(cfg: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert _fit(cfg, runs, "--name", "r", "--rounds", "2").rc == 0
    ckpt = runs / "r" / "checkpoints" / "last.ckpt"
    marker = tmp_path / "code-ran"
    _Payload.marker = str(marker)
    with ckpt.open("wb") as handle:
        pickle.dump({"format_version": 1, "payload": _Payload()}, handle)
    before = snapshot(tmp_path)
    result = _fit(cfg, runs, "--resume", runs / "r")
    assert not marker.exists(), "loading the checkpoint ran code"
    assert result.rc == 2 and result.err.count("\n") == 1 and str(ckpt) in result.err, result.err
    assert snapshot(tmp_path) == before
    pickle.loads(ckpt.read_bytes())  # the same bytes with plain pickle do run the code
    assert marker.exists()


@pytest.mark.parametrize("damage", ["truncated", "foreign", "empty"])
def test_a_damaged_checkpoint_is_one_line_naming_the_file(cfg: Path, tmp_path: Path, damage: str) -> None:
    runs = tmp_path / "runs"
    assert _fit(cfg, runs, "--name", "r", "--rounds", "2").rc == 0
    ckpt = runs / "r" / "checkpoints" / "last.ckpt"
    data = ckpt.read_bytes()
    ckpt.write_bytes({"truncated": data[: len(data) // 2], "foreign": b"PK\x03\x04 not ours", "empty": b""}[damage])
    before = snapshot(tmp_path)
    result = _fit(cfg, runs, "--resume", runs / "r")
    assert result.rc == 2 and result.err.count("\n") == 1, result.err
    assert str(ckpt) in result.err and result.err.startswith("lit-fl: error: --resume")
    assert snapshot(tmp_path) == before


# -- crashes keep their evidence ----------------------------------------------------------------------------------


def test_a_crash_keeps_the_checkpoint_the_error_and_the_traceback(
    cfg: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = DFML.run_round

    def broken(self: DFML, round_: int, *args: Any, **kwargs: Any) -> Any:
        if round_ == 3:
            raise ValueError("a bug inside training")  # a ValueError, but no config error
        return original(self, round_, *args, **kwargs)

    monkeypatch.setattr(DFML, "run_round", broken)
    runs = tmp_path / "runs"
    result = _fit(cfg, runs, "--name", "r")
    assert result.rc == 1
    assert "Traceback (most recent call last)" in result.err and "a bug inside training" in result.err
    assert "in broken" in result.err  # the traceback reaches the frame that raised
    summary = json.loads((runs / "r" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] == "ValueError: a bug inside training"
    assert summary["rounds_completed"] == 2
    monkeypatch.setattr(DFML, "run_round", original)
    resumed = _fit(cfg, runs, "--resume", runs / "r")  # the last checkpoint (round 2) continues
    assert resumed.rc == 0, resumed.err
    assert [r["round"] for r in read_metrics(runs / "r" / "metrics.csv")] == [1, 2, 3, 4]


# -- W&B down -----------------------------------------------------------------------------------------------------


def test_wandb_unreachable_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with socket.socket() as sock:  # a local port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("WANDB_BASE_URL", f"http://127.0.0.1:{port}")
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.setattr("lit_fl.tracking.wandb_tracker.INIT_TIMEOUT_S", 5.0)
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DFML", rounds=2, wandb=True))
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "r", "--logger.mode", "online")
    assert result.rc == 0, result.err
    warnings = [line for line in result.err.splitlines() if line.startswith("lit-fl: warning: W&B is off")]
    assert len(warnings) == 1, result.err
    assert [r["round"] for r in read_metrics(tmp_path / "runs" / "r" / "metrics.csv")] == [1, 2]
    assert json.loads((tmp_path / "runs" / "r" / "summary.json").read_text())["status"] == "completed"


# -- strict files -------------------------------------------------------------------------------------------------


def _strict(constant: str) -> None:
    raise AssertionError(f"summary.json holds {constant}, which strict JSON parsers refuse")


def test_summary_and_config_are_strict_json_and_yaml(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DFML", rounds=2, local_epochs=0))  # train_loss is NaN
    assert _fit(cfg, tmp_path / "runs", "--name", "r").rc == 0
    summary = json.loads((tmp_path / "runs" / "r" / "summary.json").read_text(), parse_constant=_strict)
    assert summary["final"]["train_loss"] is None  # NaN is written as null
    assert math.isnan(read_metrics(tmp_path / "runs" / "r" / "metrics.csv")[-1]["train_loss"])  # the CSV keeps nan
    config = yaml.safe_load((tmp_path / "runs" / "r" / "config.yaml").read_text())
    assert config["algorithm"]["init_args"]["local_epochs"] == 0


# -- kill -9 at any moment ----------------------------------------------------------------------------------------

KILL_POINTS = ["round:2", "write:last.ckpt#2", "write:config.yaml", "summary"]


def _cli(*argv: Any, kill_at: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), WANDB_MODE="offline")
    env.pop("LIT_FL_KILL_AT", None)
    if kill_at:
        env["LIT_FL_KILL_AT"] = kill_at
    return subprocess.run([sys.executable, "-m", "lit_fl.cli", *map(str, argv)], capture_output=True, text=True,
                          env=env, timeout=300)


@pytest.mark.slow
def test_kill_9_at_any_moment_then_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DFML", rounds=4))
    runs = tmp_path / "runs"
    assert _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "full").returncode == 0
    reference = read_metrics(runs / "full" / "metrics.csv")
    for point in KILL_POINTS:
        name = point.replace(":", "-").replace("#", "-").replace(".", "-")
        killed = _cli("fit", "--config", cfg, "--run_dir", runs, "--name", name, kill_at=point)
        assert killed.returncode == -signal.SIGKILL, (point, killed.stderr)
        run = runs / name
        if point == "write:config.yaml":  # killed before the first checkpoint: resume starts it from round 0
            assert not (run / "config.yaml").exists() and not (run / "checkpoints").exists()  # nothing torn
        resumed = _cli("fit", "--config", cfg, "--resume", run)
        assert resumed.returncode == 0, (point, resumed.stderr)
        rows = read_metrics(run / "metrics.csv")
        assert [r["round"] for r in rows] == [1, 2, 3, 4], point
        for key in ("global_acc", "global_acc_regular", "local_acc", "comm_mb", "alpha", "train_loss"):
            assert [r[key] for r in rows] == [r[key] for r in reference], (point, key)
        assert json.loads((run / "summary.json").read_text())["status"] == "completed"
