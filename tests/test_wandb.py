"""W&B in offline mode: the run file holds the same per-round metrics as metrics.csv, the summary and the
resolved config."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
import yaml
from conftest import TINY_POOL, run_cli, tiny_config, write_config
from wandb_records import read_payloads, read_run

from lit_fl.tracking import read_metrics

ROUNDS = 3
LOGGED = ["reported_acc", "global_acc", "global_acc_regular", "local_acc", "alpha", "comm_mb"]
LOGGED += [f"acc/{a}" for a in TINY_POOL]


def wait_for_exit_record(path: Path, timeout_s: float = 2.0) -> None:
    """wandb-core writes the offline run file asynchronously; lit-fl tears W&B down after ``finish()`` so the
    file is complete when ``lit-fl fit`` returns. Allow only a short grace period for the file system."""
    from wandb.proto import wandb_internal_pb2 as pb

    deadline = time.monotonic() + timeout_s
    while True:
        kinds = []
        try:
            for payload in read_payloads(path):
                record = pb.Record()
                record.ParseFromString(payload)
                kinds.append(record.WhichOneof("record_type"))
        except Exception:  # a record being written right now: read again
            kinds = []
        if "exit" in kinds or time.monotonic() > deadline:
            assert "exit" in kinds, f"{path}: no exit record after {timeout_s}s; records: {kinds}"
            return
        time.sleep(0.1)


def test_offline_wandb_run_matches_run_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DFML", rounds=ROUNDS, wandb=True))

    result = run_cli(
        "fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "wb",
        "--logger.group=sweep-a", "--logger.tags=[extra]",
    )
    assert result.rc == 0, result.err

    run = tmp_path / "runs" / "wb"
    files = sorted(run.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, sorted(str(p) for p in run.rglob("*"))
    wait_for_exit_record(files[0])
    record = read_run(files[0])

    rows = read_metrics(run / "metrics.csv")
    history = record["history"]
    assert len(history) == ROUNDS == len(rows)
    for step, row in zip(history, rows):
        assert step["round"] == row["round"]
        assert step.get("_step", row["round"]) == row["round"]
        for key in LOGGED:
            assert key in step, (key, sorted(step))
            assert step[key] == pytest.approx(row[key], rel=1e-5, abs=1e-5), key

    # a sweep's runs share a group; the method is the job type; dataset, partition and pool are tags
    assert record["run"]["group"] == "sweep-a"
    assert record["run"]["job_type"] == "DFML"
    assert record["run"]["tags"] == ["synthetic", "dirichlet-0.5", "+".join(TINY_POOL), "extra"]
    assert ("*", "round") in record["metrics"]  # round is the step metric of every key
    assert all("comm_mb" in step for step in history)  # curves against traffic in the W&B UI

    summary = json.loads((run / "summary.json").read_text())
    assert record["summary"]["status"] == "completed"
    assert record["summary"]["best/reported_acc"] == pytest.approx(summary["best"]["reported_acc"], abs=1e-9)
    assert record["summary"]["best/round"] == summary["best"]["round"]

    config = record["config"]
    saved = yaml.safe_load((run / "config.yaml").read_text())
    assert config["algorithm"] == saved["algorithm"]
    assert config["algorithm"]["class_path"] == "lit_fl.algorithms.DFML"
    assert config["algorithm"]["init_args"]["mutual_epochs"] == 1
    assert config["algorithm"]["init_args"]["alpha_max"] == 0.9
    assert config["data"] == saved["data"]
    assert config["data"]["dataset"] == "synthetic"
    assert config["models"] == saved["models"]


def test_wandb_starts_beside_the_first_round_and_the_checkpoint_keeps_its_id(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """W&B starts on a thread (its start-up overlaps round 1); the id that --resume continues must still reach the
    checkpoint, and the one offline run holds every round."""
    from lit_fl.federation.checkpoint import read_checkpoint

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DFML", rounds=2, wandb=True))
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "wb")
    assert result.rc == 0, result.err
    run = tmp_path / "runs" / "wb"
    (file,) = run.glob("wandb/offline-run-*/run-*.wandb")
    assert read_checkpoint(run / "checkpoints" / "last.ckpt")["extra"]["wandb_id"] == file.stem.removeprefix("run-")


def test_a_private_run_logs_epsilon_to_wandb_every_round_and_its_settings_in_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR", "WANDB_ARTIFACT_DIR"):
        monkeypatch.setenv(var, str(tmp_path / "wandb-home"))
    config = tiny_config("ServerFedAvg", rounds=2, wandb=True, client_fraction=0.5, local_epochs=1)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"] = {"pool": ["cnn_4_8"]}
    config["privacy"] = {"level": "user", "noise_multiplier": 1.0, "delta": 0.1}
    result = run_cli("fit", "--config", write_config(tmp_path / "cfg.yaml", config), "--run_dir", tmp_path / "runs",
                     "--name", "dp")
    assert result.rc == 0, result.err
    (file,) = (tmp_path / "runs" / "dp").glob("wandb/offline-run-*/run-*.wandb")
    wait_for_exit_record(file)
    record = read_run(file)
    rows = read_metrics(tmp_path / "runs" / "dp" / "metrics.csv")
    # metrics.csv writes 6 significant digits (relative rounding at most 5e-6); W&B keeps the float
    assert [step["epsilon"] for step in record["history"]] == pytest.approx([row["epsilon"] for row in rows], rel=5e-6)
    assert record["config"]["privacy"]["noise_multiplier"] == 1.0 and record["config"]["privacy"]["level"] == "user"
    assert record["summary"]["privacy/epsilon"] == pytest.approx(rows[-1]["epsilon"], rel=1e-5)
