"""The eight reliability cases of issue 22, each through the command line in subprocesses, as a tester found them:
two writers on one run, compare averaging an unfinished run, --resume of a foreign checkpoint, a sweep name that is a
path, a sweep passing --resume to its runs, a signal before the round loop, a torn last metrics row, and a dry run
that grew quadratically."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import snapshot as _snapshot
from conftest import tiny_config, write_config

from lit_fl.tracking import read_metrics

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[1]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "LIT_FL_KILL_AT"}
    return {**env, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline", **extra}


def _argv(*argv: Any) -> list[str]:
    return [sys.executable, "-m", "lit_fl.cli", *map(str, argv)]


def _cli(*argv: Any, timeout: float = 300, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(_argv(*argv), capture_output=True, text=True, env=_env(**env), timeout=timeout)


def _popen(*argv: Any) -> subprocess.Popen:
    return subprocess.Popen(_argv(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every file under ``root`` but the writer locks (which name the last process that held them)."""
    return {path: data for path, data in _snapshot(root).items() if not path.endswith(".lock")}


def _error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.strip().splitlines() if line.startswith("lit-fl")]


def _one_line(result: subprocess.CompletedProcess) -> str:
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


@pytest.fixture
def cfg(tmp_path: Path) -> Path:
    return write_config(tmp_path / "cfg.yaml", tiny_config("DecentralizedFedAvg", rounds=3))


# 1. two writers, one run folder ----------------------------------------------------------------------------------


def test_1_two_runs_started_with_one_name_one_writes_the_other_is_refused(cfg: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    first = _popen("fit", "--config", cfg, "--run_dir", runs, "--name", "twin", "--seed", "0")
    second = _popen("fit", "--config", cfg, "--run_dir", runs, "--name", "twin", "--seed", "1")
    outcomes = [(p.wait(timeout=300), p.stderr.read()) for p in (first, second)]
    assert sorted(rc for rc, _ in outcomes) == [0, 2], outcomes
    seed, refusal = next((s, err) for s, (rc, err) in enumerate(outcomes) if rc == 2)
    assert "twin" in refusal and ("another lit-fl process (PID" in refusal or "exists" in refusal), refusal
    assert len(_error_lines(refusal)) == 1 and "Traceback" not in refusal
    winner = 1 - seed
    assert yaml.safe_load((runs / "twin" / "config.yaml").read_text())["seed"] == winner
    assert [r["round"] for r in read_metrics(runs / "twin" / "metrics.csv")] == [1, 2, 3]  # one run's rows only
    alone = _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "alone", "--seed", winner)
    assert alone.returncode == 0, alone.stderr
    for key in ("global_acc", "local_acc", "comm_mb", "train_loss"):  # the winner's run, unmixed
        assert _column(runs / "alone", key) == _column(runs / "twin", key), key


def _column(run: Path, key: str) -> list[float]:
    return [row[key] for row in read_metrics(run / "metrics.csv")]


# 2. compare and an unfinished run ----------------------------------------------------------------------------------


def test_2_compare_leaves_an_unfinished_run_out_of_the_final_accuracy_and_names_it(cfg: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "s0", "--seed", "0").returncode == 0
    killed = _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "s1", "--seed", "1", LIT_FL_KILL_AT="round:3")
    assert killed.returncode == -signal.SIGKILL
    result = _cli("compare", runs, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    final = read_metrics(runs / "s0" / "metrics.csv")[-1]["global_acc"]
    table = (tmp_path / "out" / "results.md").read_text()
    row = next(line for line in table.splitlines() if "s1" in line)
    assert f"{100 * final:.2f}" in row  # the completed seed alone, not a mean with the run stopped at round 2
    assert "[unfinished, left out: s1 (seed 1) at round 2]" in row, row


# 3. --resume of another run's checkpoint ---------------------------------------------------------------------------


def test_3_resume_refuses_another_runs_checkpoint_and_a_folder_without_its_config(cfg: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "a", "--rounds", "1").returncode == 0
    assert _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "b", "--seed", 1, "--rounds", 2).returncode == 0
    assert _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "c", "--rounds", "2").returncode == 0
    ckpt = Path("checkpoints") / "last.ckpt"

    shutil.copy(runs / "b" / ckpt, runs / "a" / ckpt)  # another seed's checkpoint
    before = snapshot(runs)
    result = _cli("fit", "--resume", runs / "a", "--rounds", "3")
    assert result.returncode == 2
    assert "belongs to another run (DecentralizedFedAvg, seed 1" in _one_line(result)
    assert snapshot(runs) == before

    shutil.copy(runs / "c" / ckpt, runs / "a" / ckpt)  # same config and seed, but a round this folder never saw
    result = _cli("fit", "--resume", runs / "a", "--rounds", "3")
    assert result.returncode == 2 and "has no row for round 2" in _one_line(result)

    (runs / "c" / "config.yaml").unlink()  # nothing says which run the checkpoint is
    before = snapshot(runs)
    result = _cli("fit", "--config", cfg, "--resume", runs / "c", "--seed", "7")
    assert result.returncode == 2 and "has a checkpoint but no config.yaml" in _one_line(result)
    assert snapshot(runs) == before


# 4. and 5. a sweep's name and options ------------------------------------------------------------------------------


def _sweep_file(folder: Path, name: str = "tiny", rounds: int = 2) -> Path:
    write_config(folder / "tiny.yaml", tiny_config("DecentralizedFedAvg", rounds=rounds))
    sweep = {"program": "lit-fl", "name": name, "method": "grid", "metric": {"name": "global_acc", "goal": "maximize"},
             "parameters": {"config": {"value": str(folder / "tiny.yaml")}, "seed": {"values": [0, 1, 2]}}}
    return write_config(folder / "sweep.yaml", sweep)


def test_4_a_sweep_name_that_is_a_path_is_refused(tmp_path: Path) -> None:
    for name in (str(tmp_path / "abs"), "../../x"):
        result = _cli("sweep", _sweep_file(tmp_path, name), "--run_dir", tmp_path / "runs")
        assert result.returncode == 2 and f"name: {name!r} is not allowed" in _one_line(result)
    assert not (tmp_path / "abs").exists() and not (tmp_path / "runs").exists() and not (tmp_path.parent / "x").exists()


def test_5_a_sweep_never_passes_resume_to_its_runs(cfg: Path, tmp_path: Path) -> None:
    assert _cli("fit", "--config", cfg, "--run_dir", tmp_path / "other", "--name", "r", "--rounds", "1").returncode == 0
    before = snapshot(tmp_path / "other")
    result = _cli("sweep", _sweep_file(tmp_path), "--run_dir", tmp_path / "runs", "--resume", tmp_path / "other" / "r")
    assert result.returncode == 2 and "--resume is not passed to a sweep's runs" in _one_line(result)
    assert snapshot(tmp_path / "other") == before and not (tmp_path / "runs").exists()


# 6. signals before the round loop ----------------------------------------------------------------------------------


def _catches(pid: int, signum: int) -> bool:
    """Whether process ``pid`` has a handler for ``signum`` (``SigCgt`` in /proc/PID/status)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt")), 16)
    return bool(caught >> (signum - 1) & 1)


def _signal_when(process: subprocess.Popen, signum: int, ready: Any) -> None:
    deadline = time.monotonic() + 120
    while not ready():
        assert process.poll() is None, process.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.002)
    process.send_signal(signum)


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads handlers from /proc")
def test_6_a_signal_at_any_moment_before_the_first_round_exits_75_with_one_line(cfg: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    moments = {  # name: (signal, when to send it)
        "config": (signal.SIGTERM, lambda p: _catches(p.pid, signal.SIGTERM)),  # while the config is checked
        "build": (signal.SIGUSR1, lambda p: (runs / "build").exists()),  # the run folder taken, no round yet
        "hangup": (signal.SIGHUP, lambda p: _catches(p.pid, signal.SIGHUP)),
    }
    for name, (signum, ready) in moments.items():
        process = _popen("fit", "--config", cfg, "--run_dir", runs, "--name", name, "--rounds", "3")
        _signal_when(process, signum, lambda p=process, r=ready: r(p))
        rc, err = process.wait(timeout=300), process.stderr.read()
        assert rc == 75, (name, rc, err)
        assert "Traceback" not in err and len(_error_lines(err)) == 1, (name, err)
        assert f"stopped by {signal.Signals(signum).name}" in err, (name, err)
        # what the SLURM recipe does next: resume the folder when it exists, else start again
        again = ["--resume", runs / name] if (runs / name).exists() else ["--name", name]
        result = _cli("fit", "--config", cfg, "--run_dir", runs, *again, "--rounds", "3")
        assert result.returncode == 0, (name, result.stderr)
        assert [r["round"] for r in read_metrics(runs / name / "metrics.csv")] == [1, 2, 3], name


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads handlers from /proc")
def test_a_signal_ends_compare_over_thousands_of_runs_at_once(tmp_path: Path) -> None:
    """Issue 37 case 8: compare over 5,000 run folders ran on past SIGTERM; it has nothing to save, so it ends at
    once with one line and 143 (its outputs are written atomically, none half-written)."""
    runs = tmp_path / "runs"
    for i in range(3000):
        run = runs / f"run{i:04d}"
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"seed: {i % 3}\nalgorithm:\n  class_path: lit_fl.algorithms.DFML\n")
        (run / "metrics.csv").write_text("round,reported_acc,global_acc,comm_mb\n1,0.5,0.5,1.0\n2,0.6,0.6,2.0\n")
        (run / "summary.json").write_text('{"status": "completed"}')
    process = _popen("compare", runs, "--out", tmp_path / "out", "--metric", "global_acc")
    _signal_when(process, signal.SIGTERM, lambda: _catches(process.pid, signal.SIGTERM))
    started = time.monotonic()
    rc, err = process.wait(timeout=120), process.stderr.read()
    assert time.monotonic() - started < 5, err
    assert rc == 143 and _error_lines(err) == ["lit-fl: stopped (SIGTERM)"], (rc, err)
    assert not (tmp_path / "out" / "dashboard.html").exists()


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads handlers from /proc")
def test_6_a_signal_while_the_config_is_read_ends_fit_at_once(tmp_path: Path) -> None:
    """Issue 37: fit recorded a stop for its first safe point from its first instruction, so a config that took
    long to read (an alias bomb, a slow user module) ran on past SIGTERM. The run's safe points start with the run."""
    marker = tmp_path / "importing"
    (tmp_path / "slow_method.py").write_text(f"import pathlib, time\npathlib.Path({str(marker)!r}).touch()\n"
                                             "time.sleep(600)\n")
    config = write_config(tmp_path / "slow.yaml", {**tiny_config("DecentralizedFedAvg", rounds=1),
                                                   "algorithm": {"class_path": "slow_method.Slow"}})
    process = subprocess.Popen(_argv("fit", "--config", config, "--run_dir", tmp_path / "runs"), cwd=tmp_path,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               env=_env(PYTHONPATH=f"{REPO}:{tmp_path}"))
    _signal_when(process, signal.SIGTERM, marker.exists)
    started = time.monotonic()
    rc, err = process.wait(timeout=60), process.stderr.read()
    assert time.monotonic() - started < 10, err  # at once, not after the module's 600 s
    assert rc == 75 and _error_lines(err) == [
        "lit-fl: stopped by SIGTERM before the run started; nothing was written (run the same command again)"], err
    assert not (tmp_path / "runs").exists()


def test_6_sigterm_to_a_sweep_stops_its_runs_marks_the_manifest_and_exits_75(tmp_path: Path) -> None:
    sweep = _sweep_file(tmp_path, rounds=40)
    runs = tmp_path / "runs" / "sweeps" / "tiny" / "runs"
    process = subprocess.Popen(_argv("sweep", sweep, "--run_dir", tmp_path / "runs"), stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, env=_env())
    _signal_when(process, signal.SIGTERM, lambda: (runs / "000-tiny-s0" / "checkpoints" / "last.ckpt").is_file())
    assert process.wait(timeout=300) == 75, process.stdout.read()
    manifest = json.loads((tmp_path / "runs" / "sweeps" / "tiny" / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["interrupted", "pending", "pending"]
    summary = json.loads((runs / "000-tiny-s0" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["stop_signal"] == "SIGTERM"


# 7. a torn last row ------------------------------------------------------------------------------------------------


def test_7_a_torn_last_metrics_row_is_computed_again_on_resume(cfg: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "full").returncode == 0
    assert _cli("fit", "--config", cfg, "--run_dir", runs, "--name", "torn", "--rounds", "2").returncode == 0
    with (runs / "torn" / "metrics.csv").open("a") as handle:
        handle.write("3,0.41")  # a kill between two writes of round 3's row
    result = _cli("fit", "--resume", runs / "torn", "--rounds", "3")
    assert result.returncode == 0, result.stderr
    assert "half-written row" in result.stderr and "Traceback" not in result.stderr
    full, torn = read_metrics(runs / "full" / "metrics.csv"), read_metrics(runs / "torn" / "metrics.csv")
    assert [r["round"] for r in torn] == [1, 2, 3]
    assert [r["global_acc"] for r in torn] == [r["global_acc"] for r in full]


# 8. a dry run of a large grid --------------------------------------------------------------------------------------


def test_8_a_dry_run_is_linear_in_the_runs_and_says_its_size_first(tmp_path: Path) -> None:
    write_config(tmp_path / "tiny.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
    grid = {"seed": list(range(50)), "data.beta": [0.1 * i for i in range(1, 21)], "rounds": list(range(1, 21))}
    sweep = {"program": "lit-fl", "name": "big", "method": "grid",
             "parameters": {"config": {"value": str(tmp_path / "tiny.yaml")},
                            **{key: {"values": values} for key, values in grid.items()}}}
    path = write_config(tmp_path / "big.yaml", sweep)
    process = subprocess.Popen(_argv("sweep", path, "--dry-run", "--run_dir", tmp_path / "runs"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
    first = process.stderr.readline()  # said before the plan is made
    assert first.startswith("planning 20,000 runs of big (grid)"), first
    out, _ = process.communicate(timeout=120)  # quadratic planning took 83 s for 1,000 runs
    lines = out.splitlines()
    assert process.returncode == 0 and len(lines) == 20_001 and lines[-1].startswith("20000 runs (grid)")
    assert not (tmp_path / "runs").exists()


# two sweeps on one sweep file --------------------------------------------------------------------------------------


def test_two_concurrent_sweeps_with_two_jobs_each_train_every_run_exactly_once(tmp_path: Path) -> None:
    sweep = _sweep_file(tmp_path, rounds=2)
    argv = ("sweep", sweep, "--run_dir", tmp_path / "runs", "--jobs", "2")
    both = [subprocess.Popen(_argv(*argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=_env())
            for _ in range(2)]
    outcomes = [(p.wait(timeout=600), p.stdout.read(), p.stderr.read()) for p in both]
    assert sorted(rc for rc, _, _ in outcomes) in ([0, 0], [0, 2]), outcomes
    for rc, _, err in outcomes:
        assert rc == 0 or "is being written by another lit-fl process" in _one_line(
            subprocess.CompletedProcess([], rc, "", err))
    started = sum(out.count(": started") for _, out, _ in outcomes)
    assert started == 3, outcomes  # every run trained once, by one of them
    alone = _cli("sweep", sweep, "--run_dir", tmp_path / "alone", "--jobs", "2")
    assert alone.returncode == 0, alone.stderr
    for name in ("000-tiny-s0", "001-tiny-s1", "002-tiny-s2"):
        ran = tmp_path / "runs" / "sweeps" / "tiny" / "runs" / name
        reference = tmp_path / "alone" / "sweeps" / "tiny" / "runs" / name
        assert [r["round"] for r in read_metrics(ran / "metrics.csv")] == [1, 2], name
        for key in ("global_acc", "local_acc", "comm_mb"):
            assert _column(ran, key) == _column(reference, key), (name, key)


def test_a_second_signal_aborts_with_one_line_and_a_closed_pipe_ends_quietly(cfg: Path, tmp_path: Path) -> None:
    process = _popen("fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "twice")
    _signal_when(process, signal.SIGTERM, lambda: _catches(process.pid, signal.SIGTERM))
    process.send_signal(signal.SIGTERM)  # the second one, at once
    rc, err = process.wait(timeout=300), process.stderr.read()
    assert rc in (75, 130), (rc, err)  # 75 when the first one was acted on before the second arrived
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    assert (rc == 130) == ("aborted" in err), err

    write_config(tmp_path / "tiny.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
    sweep = {"program": "lit-fl", "name": "piped", "method": "grid",
             "parameters": {"config": {"value": str(tmp_path / "tiny.yaml")}, "seed": {"values": list(range(3000))}}}
    path = write_config(tmp_path / "piped.yaml", sweep)
    command = " ".join(_argv("sweep", path, "--dry-run", "--run_dir", tmp_path / "runs")) + " | head -n 1"
    result = subprocess.run(["bash", "-o", "pipefail", "-c", command], capture_output=True, text=True, env=_env(),
                            timeout=120)
    assert result.stdout.startswith("000-"), result.stdout
    assert "Traceback" not in result.stderr and "BrokenPipe" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines() == ["planning 3,000 runs of piped (grid) ..."]


def test_a_signal_ends_a_command_without_safe_points_at_once_with_one_line(tmp_path: Path) -> None:
    """Issue 37: a sweep's planning (and compare) recorded SIGTERM for a safe point they do not have, and ran on."""
    write_config(tmp_path / "tiny.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
    sweep = {"program": "lit-fl", "name": "big", "method": "grid",
             "parameters": {"config": {"value": str(tmp_path / "tiny.yaml")}, "seed": {"values": list(range(10**6))}}}
    path = write_config(tmp_path / "big.yaml", sweep)
    for signum, status in ((signal.SIGTERM, 143), (signal.SIGINT, 130)):
        process = _popen("sweep", path, "--dry-run", "--run_dir", tmp_path / "runs")
        _signal_when(process, signum, lambda p=process: _catches(p.pid, signal.SIGTERM))
        started = time.monotonic()
        rc, err = process.wait(timeout=60), process.stderr.read()
        assert time.monotonic() - started < 10, err  # at once, not after planning a million runs
        assert rc == status, (rc, err)
        assert _error_lines(err) == [f"lit-fl: stopped ({signal.Signals(signum).name})"], err
        assert "Traceback" not in err
        assert not (tmp_path / "runs").exists()
