"""Several processes (torch.distributed, gloo on CPU): the same metrics and weights as one process, bit for bit.

One torchrun launch runs every method below at ``--trainer.devices 2``; the same configs then run in this
process at ``devices 1`` and everything but the timings must be identical: metrics.csv, summary.json and every
weight of the last checkpoint. DFML's 2-process run stops after 2 of 4 rounds and is resumed at 1 process; it
must equal the uninterrupted 1-process run. Both sides run one thread per process (torchrun's default for
several processes), since a CPU kernel's float sums may depend on the thread count.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import TESTS_DIR, run_cli, tiny_config, write_config
from test_codistillation import codist_config
from test_resume import TIMING, assert_runs_equal, assert_same, load_ckpt

from lit_fl.tracking import read_metrics

pytestmark = pytest.mark.slow


def configs() -> dict[str, dict[str, Any]]:
    fedavg = tiny_config("DecentralizedFedAvg", rounds=2)
    heterofl = tiny_config("HeteroFL", rounds=2)
    heterofl["models"]["pool"] = ["cnn_8_16", "cnn_4_8"]
    defkt = tiny_config("DefKT", rounds=2)
    defkt["models"]["pool"] = ["cnn_4_8"]
    return {
        "DFML": tiny_config("DFML", rounds=4, noise_batches=2, noise_batch_size=8),  # both peer works
        "DecentralizedFedAvg": fedavg,
        "HeteroFL": heterofl,
        "DefKT": defkt,
        "MergedCodist": codist_config("MergedCodist", rounds=2, merge_alpha=0.5),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The 2-process runs (one torchrun launch) and the 1-process runs of every config."""
    root = tmp_path_factory.mktemp("multi")
    runs: list[list[str]] = []
    for name, config in configs().items():
        cfg = write_config(root / f"{name}.yaml", config)
        stop = ["--rounds", "2"] if name == "DFML" else []
        runs.append(["fit", "--config", str(cfg), "--run_dir", str(root / "two"), "--name", name,
                     "--trainer.accelerator", "cpu", "--trainer.devices", "2", *stop])
    fit_two_processes(runs, timeout=180)
    with one_thread():
        for name in configs():
            result = run_cli("fit", "--config", root / f"{name}.yaml", "--run_dir", root / "one", "--name", name,
                             "--trainer.accelerator", "cpu")
            assert result.rc == 0, result.err
    return root


def fit_two_processes(runs: list[list[str]], timeout: float) -> None:
    """Every ``lit-fl`` argument list of ``runs`` in one torchrun launch of 2 processes (gloo, one thread each,
    W&B offline); fails the test with the launch's stderr if it does not end with 0."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-addr", "127.0.0.1",
               "--master-port", str(free_port()), str(TESTS_DIR / "distributed_fit.py"), json.dumps(runs)]
    returncode, stderr = run_bounded(command, env, timeout=timeout)
    said = "\n".join(line for line in stderr.splitlines() if line.startswith("lit-fl"))  # every rank's own lines
    assert returncode == 0, f"{said}\n...\n{stderr[-4000:]}"


def run_bounded(command: list[str], env: dict[str, str], timeout: float) -> tuple[int, str]:
    """Run ``command`` in a session of its own; past ``timeout`` the whole session (torchrun and its workers)
    is killed and the test fails instead of hanging."""
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        _, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, stderr = proc.communicate()
        pytest.fail(f"the 2-process runs took more than {timeout:.0f} s:\n{stderr[-4000:]}")
    return proc.returncode, stderr


@contextlib.contextmanager
def one_thread() -> Iterator[None]:
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


@pytest.mark.parametrize("name", ["DecentralizedFedAvg", "HeteroFL", "DefKT", "MergedCodist"])
def test_two_processes_equal_one(root: Path, name: str) -> None:
    assert_same_run(root / "two" / name, root / "one" / name)


def test_dfml_stopped_at_two_processes_resumes_at_one(root: Path) -> None:
    two = root / "two" / "DFML"
    assert [r["round"] for r in read_metrics(two / "metrics.csv")] == [1, 2]
    with one_thread():
        result = run_cli("fit", "--config", root / "DFML.yaml", "--resume", two, "--rounds", "4",
                         "--trainer.accelerator", "cpu")
    assert result.rc == 0, result.err
    assert_runs_equal(two, root / "one" / "DFML")


def test_only_rank_zero_writes(root: Path) -> None:
    """One run directory per run, one metrics row per round: the second process wrote nothing."""
    assert sorted(p.name for p in (root / "two").iterdir()) == sorted(configs())
    for name in ("DecentralizedFedAvg", "HeteroFL"):
        assert [r["round"] for r in read_metrics(root / "two" / name / "metrics.csv")] == [1, 2]


def assert_same_run(got: Path, want: Path) -> None:
    rows, expected = read_metrics(got / "metrics.csv"), read_metrics(want / "metrics.csv")
    assert len(rows) == len(expected) == 2
    for row, ref in zip(rows, expected):
        assert list(row) == list(ref)
        for key in ref:
            if key not in TIMING:
                assert_same(row[key], ref[key], f"metrics.csv round {ref['round']} {key}")
    state, ref_state = load_ckpt(got), load_ckpt(want)
    for n, (client, ref_client) in enumerate(zip(state["federation"]["clients"], ref_state["federation"]["clients"])):
        assert_same(client["model"], ref_client["model"], f"client {n} model")
        assert_same(client["peak"], ref_client["peak"], f"client {n} peak")
    assert_same(state["federation"]["server"], ref_state["federation"]["server"], "server models")
    assert_same(state["federation"]["rng"], ref_state["federation"]["rng"], "random streams")


def test_stopped_two_process_run_keeps_its_checkpoint_and_exits_75(tmp_path: Path) -> None:
    """SIGTERM to ``lit-fl fit --trainer.devices 2`` (Fabric's own launcher): every process stops after the same
    round, rank 0 writes the checkpoint and summary.json, and the run exits 75. Followers exit 0: a follower
    exiting non-zero makes the launcher SIGKILL rank 0 while it writes."""
    import time

    cfg = write_config(tmp_path / "long.yaml", tiny_config("DFML", rounds=500))
    run = tmp_path / "runs" / "long"
    command = [str(Path(sys.executable).parent / "lit-fl"), "fit", "--config", str(cfg), "--run_dir",
               str(tmp_path / "runs"), "--name", "long", "--trainer.accelerator", "cpu", "--trainer.devices", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "WANDB_MODE": "offline"}
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not (run / "checkpoints" / "last.ckpt").is_file() and proc.poll() is None:
            assert time.monotonic() < deadline, "no checkpoint after 120 s"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 75, stderr[-4000:]
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    rounds = [r["round"] for r in read_metrics(run / "metrics.csv")]
    assert rounds == list(range(1, summary["rounds_completed"] + 1)) and len(rounds) < 500
    assert load_ckpt(run)["federation"]["round"] == summary["rounds_completed"]
