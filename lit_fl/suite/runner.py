"""Run the runs of a local sweep, ``jobs`` at a time, each as its own ``lit-fl fit`` process.

Idempotent: a run whose ``summary.json`` says completed is skipped, a run with a checkpoint continues from it
(``--resume``), so a sweep stopped at any moment completes with no run repeated and none lost. Ctrl-C, SIGTERM,
SIGUSR1 or SIGHUP: the runs in flight stop after their current round with a checkpoint (the signal is passed on to
them), no new run starts, the manifest records it and the sweep exits 75; a second signal aborts the runs at once.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lit_fl import stop_signals
from lit_fl.run_dir import RunDir
from lit_fl.suite.manifest import Manifest, SweepRun


@dataclass
class Slot:
    """Where a run executes: its CPU threads and, on a GPU machine, its device."""

    threads: int
    gpu: str | None = None

    def env(self) -> dict[str, str]:
        env = dict(os.environ, OMP_NUM_THREADS=str(self.threads), MKL_NUM_THREADS=str(self.threads))
        if self.gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.gpu
        return env


def slots(jobs: int) -> list[Slot]:
    """``jobs`` slots: the CPU cores shared evenly, and one GPU each in turn when GPUs are visible."""
    threads = max(1, (os.cpu_count() or 1) // jobs)
    gpus = visible_gpus()
    return [Slot(threads, gpus[i % len(gpus)] if gpus else None) for i in range(jobs)]


def jobs_that_run(jobs: int, runs: int, report: Callable[[str], None]) -> int:
    """``--jobs`` clamped to what can run at once: no more than the runs left, nor than the CPU cores (a process
    needs a core); said in one line when it clamps."""
    cores = os.cpu_count() or 1
    can = max(1, min(jobs, runs, cores))
    if can < jobs:
        report(f"--jobs {jobs}: {can} at once ({runs} run{'s' * (runs != 1)} to do on {cores} CPU cores)")
    return can


def visible_gpus() -> list[str]:
    """GPU ids from CUDA_VISIBLE_DEVICES, else from ``nvidia-smi -L`` (no torch import), else none."""
    if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
        return [g for g in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if g.strip()]
    if shutil.which("nvidia-smi") is None:
        return []
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(out.splitlines()) if line.startswith("GPU ")]


def run_state(sweep_dir: Path, run: SweepRun) -> str:
    """``completed`` (summary says so), ``resumable`` (a checkpoint exists), ``stale`` (a run directory without
    a checkpoint: it stopped before its first round ended) or ``new``."""
    run_dir = RunDir(sweep_dir / run.run_dir)
    if run_dir.status() == "completed":
        return "completed"
    if run_dir.has_checkpoint():
        return "resumable"
    return "stale" if run_dir.path.exists() else "new"


def run_sweep(
    sweep_dir: Path,
    manifest: Manifest,
    jobs: int = 1,
    report: Callable[[str], None] = print,
) -> int:
    """Run every run that is not completed; returns 0 (all completed), 1 (a run failed) or 130 (interrupted)."""
    todo = []
    for run in manifest.runs:
        state = run_state(sweep_dir, run)
        run.status = "completed" if state == "completed" else run.status
        if state != "completed":
            todo.append((run, state))
    manifest.save(sweep_dir)
    done = len(manifest.runs) - len(todo)
    if done:
        report(f"{done} of {len(manifest.runs)} runs already completed: skipped")
    free = slots(jobs_that_run(jobs, len(todo), report))
    running: dict[subprocess.Popen, tuple[SweepRun, Slot, float]] = {}
    stopping = False
    while todo or running:
        try:
            if not stopping and (stop := stop_signals.requested()) is not None:
                stopping = True
                todo.clear()
                _forward(running, stop)
                report(f"stopping ({stop}): the runs in flight finish their round and checkpoint (again to abort)")
            while todo and free and not stopping:
                run, state = todo.pop(0)
                slot = free.pop(0)
                process = _start(sweep_dir, run, state, slot)
                running[process] = (run, slot, time.monotonic())
                run.status = "running"
                manifest.save(sweep_dir)
                verb = "resumed" if state == "resumable" else "started"
                report(f"[{done + len(running)}/{len(manifest.runs)}] {run.name}: {verb}")
            for process in [p for p in running if p.poll() is not None]:
                run, slot, started = running.pop(process)
                free.append(slot)
                run.status = _finished_status(sweep_dir, run, process.returncode)
                done += run.status == "completed"
                manifest.save(sweep_dir)
                report(f"{run.name}: {run.status} in {time.monotonic() - started:.0f}s{_result(sweep_dir, run)}")
            if not todo and not running:
                break
            time.sleep(0.2)
        except KeyboardInterrupt:  # a second signal: the runs abort at once (they keep their last checkpoint)
            _forward(running, "SIGTERM")
            _abort(sweep_dir, manifest, running)
            raise
    statuses = [run.status for run in manifest.runs]
    if stopping or "interrupted" in statuses:
        return 75
    return 1 if "failed" in statuses else 0


def _forward(running: dict[subprocess.Popen, tuple[SweepRun, Slot, float]], name: str) -> None:
    """Pass a stop signal on to the runs in flight (each runs in its own session, so only the sweep receives a
    terminal's Ctrl-C or a SIGTERM)."""
    for process in running:
        if process.poll() is None:
            process.send_signal(getattr(signal, name, signal.SIGTERM))


def _abort(sweep_dir: Path, manifest: Manifest, running: dict[subprocess.Popen, tuple[SweepRun, Slot, float]]) -> None:
    """Wait for the aborted runs (they exit within seconds of their second signal) and record how they ended."""
    for process, (run, _, _) in running.items():
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        run.status = _finished_status(sweep_dir, run, process.returncode)
    manifest.save(sweep_dir)


def run_argv(sweep_dir: Path, run: SweepRun) -> list[str]:
    """The run's ``lit-fl fit`` command line, writing into this sweep folder whatever the working directory: the
    manifest's ``--run_dir`` was written relative to where the sweep was planned, so it is replaced by the sweep
    folder's own, absolute."""
    runs = (sweep_dir / run.run_dir).parent.absolute()
    kept = [arg for arg in run.command[1:] if not arg.startswith("--run_dir=")]
    return [sys.executable, "-m", "lit_fl.cli", *kept, f"--run_dir={runs}"]


def _start(sweep_dir: Path, run: SweepRun, state: str, slot: Slot) -> subprocess.Popen:
    path = sweep_dir / run.run_dir
    argv = run_argv(sweep_dir, run)
    if state == "resumable":
        argv += [f"--resume={path}"]
    elif state == "stale":  # stopped before its first checkpoint: keep it aside, start again
        stale = sweep_dir / "stale" / f"{run.name}-{time.strftime('%Y%m%d-%H%M%S')}"
        stale.parent.mkdir(parents=True, exist_ok=True)
        path.rename(stale)
    log = sweep_dir / "logs" / f"{run.name}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as out:
        # its own session: a terminal's Ctrl-C reaches the sweep alone, which passes it on once (:func:`_forward`)
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=slot.env(), preexec_fn=_die_with_parent,
                                start_new_session=True)


def _die_with_parent() -> None:
    """Linux: the run gets SIGTERM if ``lit-fl sweep`` dies (kill -9), so no orphan keeps training."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _finished_status(sweep_dir: Path, run: SweepRun, returncode: int) -> str:
    status = RunDir(sweep_dir / run.run_dir).status()
    if status in ("completed", "interrupted", "failed"):
        return status
    return "interrupted" if returncode in (75, 130, -signal.SIGINT, -signal.SIGTERM) else "failed"


def _result(sweep_dir: Path, run: SweepRun) -> str:
    try:
        summary = RunDir(sweep_dir / run.run_dir).read_summary() or {}
        return f", reported_acc {summary['final']['reported_acc']:.4f}"
    except (KeyError, TypeError):
        return f" (see {sweep_dir / 'logs' / (run.name + '.log')})"
