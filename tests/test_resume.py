"""``--resume``: a run stopped after round 2 (by its round budget or by Ctrl-C) and continued to round 4 equals
an uninterrupted 4-round run, metric for metric and weight for weight; a changed config is refused."""

from __future__ import annotations

import json
import math
import os
import re
import shlex
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from conftest import run_cli, snapshot, tiny_config, write_config

from lit_fl.algorithms import DFML
from lit_fl.federation.checkpoint import read_unpacked
from lit_fl.tracking import read_metrics

ALGORITHMS = ["DFML", "DecentralizedFedAvg"]
TIMING = {"round_s", "eval_s"}  # the only columns allowed to differ


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("resume")
    for algorithm in ALGORITHMS:
        write_config(root / f"{algorithm}.yaml", tiny_config(algorithm, rounds=4))
    return root


def fit(root: Path, algorithm: str, *argv: Any) -> None:
    result = run_cli("fit", "--config", root / f"{algorithm}.yaml", "--run_dir", root / "runs", *argv)
    assert result.rc == 0, result.err


@pytest.fixture(scope="module")
def uninterrupted(root: Path) -> dict[str, Path]:
    """Uninterrupted 4-round runs, one per algorithm, built on first use."""

    class Runs(dict):
        def __missing__(self, algorithm: str) -> Path:
            fit(root, algorithm, "--name", f"full-{algorithm}")
            self[algorithm] = root / "runs" / f"full-{algorithm}"
            return self[algorithm]

    return Runs()


def load_ckpt(run: Path) -> dict[str, Any]:
    """The run's last.ckpt with every model state unpacked into its state dict (what gets compared)."""
    return read_unpacked(run / "checkpoints" / "last.ckpt")


def assert_same(a: Any, b: Any, where: str = "") -> None:
    """Exact, NaN-aware equality of nested checkpoint states (tensors, arrays, dicts, lists, numbers)."""
    if isinstance(a, torch.Tensor):
        assert isinstance(b, torch.Tensor) and a.shape == b.shape and a.dtype == b.dtype, where
        assert torch.equal(a, b), f"{where}: max |diff| {(a.double() - b.double()).abs().max().item()}"
    elif isinstance(a, np.ndarray):
        assert np.array_equal(a, b), where
    elif isinstance(a, dict):
        assert isinstance(b, dict) and list(a) == list(b), f"{where}: keys {list(a)} vs {list(b)}"
        for key in a:
            assert_same(a[key], b[key], f"{where}/{key}")
    elif isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_same(x, y, f"{where}[{i}]")
    elif isinstance(a, float) and math.isnan(a):
        assert isinstance(b, float) and math.isnan(b), f"{where}: nan vs {b}"
    else:
        assert a == b, f"{where}: {a!r} vs {b!r}"


def assert_runs_equal(resumed: Path, full: Path) -> None:
    rows, expected = read_metrics(resumed / "metrics.csv"), read_metrics(full / "metrics.csv")
    assert [r["round"] for r in rows] == [1, 2, 3, 4]
    assert list(rows[0]) == list(expected[0])
    for got, want in zip(rows, expected):
        for key in want:
            if key not in TIMING:
                assert_same(got[key], want[key], f"metrics.csv round {want['round']} {key}")

    summary, full_summary = (json.loads((run / "summary.json").read_text()) for run in (resumed, full))
    assert summary["status"] == "completed"
    assert summary["rounds_completed"] == 4
    assert summary["comm_mb"] == full_summary["comm_mb"]
    assert summary["best"] == full_summary["best"]
    for key, value in full_summary["final"].items():  # full precision, unlike metrics.csv
        if key not in TIMING:
            assert_same(summary["final"][key], value, f"summary final {key}")

    state, full_state = load_ckpt(resumed), load_ckpt(full)
    assert state["federation"]["round"] == full_state["federation"]["round"] == 4
    clients, full_clients = state["federation"]["clients"], full_state["federation"]["clients"]
    assert len(clients) == len(full_clients) == 4
    for n, (client, full_client) in enumerate(zip(clients, full_clients)):
        assert_same(client["model"], full_client["model"], f"client {n} model")
        assert_same(client["peak"], full_client["peak"], f"client {n} peak")
    # everything else that a further resume would continue from: alpha_n, versions, RNG streams, ledger
    assert_same(state["federation"], full_state["federation"], "federation")
    assert_same(state["algorithm"], full_state["algorithm"], "algorithm")
    assert_same(state["ledger"], full_state["ledger"], "ledger")


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_resume_equals_uninterrupted_run(algorithm: str, root: Path, uninterrupted: dict[str, Path]) -> None:
    full = uninterrupted[algorithm]
    part = root / "runs" / f"part-{algorithm}"
    fit(root, algorithm, "--name", part.name, "--rounds", "2")
    first = json.loads((part / "summary.json").read_text())
    assert first["status"] == "completed" and first["rounds_completed"] == 2
    assert load_ckpt(part)["federation"]["round"] == 2

    fit(root, algorithm, "--resume", part, "--rounds", "4")
    assert yaml.safe_load((part / "config.yaml").read_text())["rounds"] == 4
    assert_runs_equal(part, full)
    if algorithm == "DFML":  # the peak models are the ones reported: each is stored, or shares the regular one
        assert all(c["peak"] is not None or c["peak_shared"] for c in load_ckpt(part)["federation"]["clients"])


@pytest.mark.parametrize(
    ("argv", "section"),
    [
        pytest.param(["--data.beta", "0.3"], "data", id="beta"),
        pytest.param(["--seed", "1"], "seed", id="seed"),
        pytest.param(["--algorithm.alpha_max", "0.8"], "algorithm", id="alpha_max"),
    ],
)
def test_resume_with_changed_config_is_refused(
    argv: list[str], section: str, root: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DFML", rounds=1))
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "src")
    assert result.rc == 0, result.err
    before = snapshot(tmp_path)

    result = run_cli("fit", "--config", cfg, "--resume", tmp_path / "runs" / "src", "--rounds", "4", *argv)
    assert result.rc != 0
    lines = result.err.strip().splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("lit-fl: error: --resume"), lines[0]
    assert section in lines[0], lines[0]
    assert snapshot(tmp_path) == before


def test_resume_alone_refuses_a_changed_seed_and_says_a_changed_rounds(tmp_path: Path) -> None:
    """``--resume runs/NAME`` reads the run's config.yaml; a key that differs from it is refused, except rounds."""
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DecentralizedFedAvg", rounds=5))
    run = tmp_path / "runs" / "src"
    assert run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "src", "--rounds", "1").rc == 0
    before = snapshot(tmp_path)

    result = run_cli("fit", "--resume", run, "--seed", "7")
    assert result.rc == 2 and result.err.strip().splitlines() == [
        f"lit-fl: error: --resume: the config differs from {run / 'config.yaml'} in seed; resume with the run's own "
        "config (only rounds, checkpoint_every, trainer and logger may change)"]
    assert snapshot(tmp_path) == before

    result = run_cli("fit", "--resume", run, "--rounds", "2")
    assert result.rc == 0 and result.err.strip() == "lit-fl: --resume: rounds 1 -> 2 (config.yaml records it)"
    assert result.out.startswith("completed: 2/2 rounds")
    result = run_cli("fit", "--config", cfg, "--resume", run)  # the file's rounds (5) over the run's (2): said
    assert result.rc == 0 and "rounds 2 -> 5" in result.err and result.out.startswith("completed: 5/5 rounds")
    assert yaml.safe_load((run / "config.yaml").read_text())["rounds"] == 5
    assert [r["round"] for r in read_metrics(run / "metrics.csv")] == [1, 2, 3, 4, 5]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGUSR1], ids=lambda s: s.name)
def test_ctrl_c_sigterm_sigusr1_stop_after_the_round_and_resume_exactly(
    root: Path, uninterrupted: dict[str, Path], monkeypatch: pytest.MonkeyPatch, signum: signal.Signals
) -> None:
    """Ctrl-C, and the pre-emption signals of SLURM, timeout, docker stop and Kubernetes."""
    full = uninterrupted["DFML"]
    run = root / "runs" / f"stop-{signum.name}"
    original = DFML.run_round
    sent: list[int] = []

    def run_round(self: DFML, round_: int, *args: Any, **kwargs: Any) -> Any:
        if round_ == 2 and not sent:
            sent.append(round_)
            os.kill(os.getpid(), signum)  # Ctrl-C or pre-emption during round 2
        return original(self, round_, *args, **kwargs)

    monkeypatch.setattr(DFML, "run_round", run_round)
    handler = signal.getsignal(signum)
    result = run_cli("fit", "--config", root / "DFML.yaml", "--run_dir", root / "runs", "--name", run.name)
    assert sent == [2]
    assert signal.getsignal(signum) is handler  # the loop restores the previous handler
    assert result.rc == 75, result.err  # interrupted: EX_TEMPFAIL, resume it
    assert result.out.startswith("interrupted: 2/4 rounds"), result.out

    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stop_signal"] == signum.name
    assert summary["rounds_completed"] == 2
    assert summary["final"]["round"] == 2
    assert [r["round"] for r in read_metrics(run / "metrics.csv")] == [1, 2]
    assert load_ckpt(run)["federation"]["round"] == 2

    monkeypatch.setattr(DFML, "run_round", original)
    result = run_cli("fit", "--resume", run)  # the run alone: its config.yaml says the rest
    assert result.rc == 0 and result.err == "", result.err
    assert_runs_equal(run, full)


def test_a_half_written_last_row_is_left_out_said_and_its_round_computed_again(
    root: Path, uninterrupted: dict[str, Path]
) -> None:
    """A kill between two writes of metrics.csv leaves a torn row: resume drops it (one line) and reproduces."""
    full = uninterrupted["DecentralizedFedAvg"]
    part = root / "runs" / "torn"
    fit(root, "DecentralizedFedAvg", "--name", part.name, "--rounds", "2")
    with (part / "metrics.csv").open("a") as handle:
        handle.write("3,0.41")  # the start of round 3's row, then the kill
    assert [r["round"] for r in read_metrics(part / "metrics.csv")] == [1, 2]  # compare reads the complete rows
    result = run_cli("fit", "--resume", part, "--rounds", "4")
    assert result.rc == 0, result.err
    assert result.err.strip().splitlines() == [
        "lit-fl: --resume: rounds 2 -> 4 (config.yaml records it)",
        f"lit-fl: --resume: {part / 'metrics.csv'} ended in a half-written row (a kill between two writes); it is "
        "left out and its round computed again"]
    assert_runs_equal(part, full)


def assert_resumed_run_equals_uninterrupted(cfg: Path, runs: Path) -> tuple[Path, list[dict[str, Any]], dict[str, Any]]:
    """``lit-fl fit --config cfg`` for its 3 rounds (``full``), stopped after 2 (``part``) and resumed to 3: every
    metric but the timings, the federation (clients, server models, random streams), the method's state and the
    ledger equal the uninterrupted run's exactly. Returns the full run's folder, metrics rows and checkpoint."""
    base = ("fit", "--config", cfg, "--run_dir", runs)
    for argv in (("--name", "full"), ("--name", "part", "--rounds", "2"), ("--resume", runs / "part", "--rounds", "3")):
        result = run_cli(*base, *argv)
        assert result.rc == 0, result.err
    part, full = runs / "part", runs / "full"
    rows, expected = read_metrics(part / "metrics.csv"), read_metrics(full / "metrics.csv")
    assert [r["round"] for r in rows] == [1, 2, 3]
    for got, want in zip(rows, expected):
        for key in want:
            if key not in TIMING:
                assert_same(got[key], want[key], f"metrics round {want['round']} {key}")
    state, full_state = load_ckpt(part), load_ckpt(full)
    assert full_state["federation"]["round"] == 3
    for part_name in ("federation", "algorithm", "ledger"):
        assert_same(state[part_name], full_state[part_name], part_name)
    return full, expected, full_state


def test_a_run_that_crashed_in_round_1_starts_again_with_the_command_it_printed(
    root: Path, uninterrupted: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client step raises in round 1, before the first checkpoint: the run fails (summary.json says so, no
    checkpoint), its last line prints the command that starts it again, and that command, the run folder alone, runs
    it from round 1 in the same folder to the same metrics and weights as a run that never failed."""
    from lit_fl.steps import LocalTraining

    full = uninterrupted["DecentralizedFedAvg"]
    run = root / "runs" / "crashed"

    def raising(self: LocalTraining, batch: Any, batch_idx: int) -> Any:
        raise RuntimeError("a bug in the step")

    monkeypatch.setattr(LocalTraining, "training_step", raising)
    result = run_cli("fit", "--config", root / "DecentralizedFedAvg.yaml", "--run_dir", root / "runs", "--name",
                     run.name)
    assert result.rc == 1, result.err
    assert json.loads((run / "summary.json").read_text())["status"] == "failed"
    assert not (run / "checkpoints" / "last.ckpt").exists()
    printed = re.search(r"no checkpoint was written yet: (lit-fl fit --resume \S+) starts it again from round 1$",
                        result.err.strip().splitlines()[-1])
    assert printed is not None, result.err.strip().splitlines()[-1]

    monkeypatch.undo()  # the bug fixed
    program, *argv = shlex.split(printed.group(1))
    assert program == "lit-fl"
    result = run_cli(*argv)
    assert result.rc == 0, result.err
    assert result.err.splitlines() == [f"lit-fl: --resume: {run} holds no checkpoint (the run stopped before its first "
                                       "one); it starts again from round 1 in the same folder"]
    assert_runs_equal(run, full)
