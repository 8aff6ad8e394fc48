"""One federation over several processes: the DFML quickstart with ``--trainer.devices 2`` against 1.

Each repeat runs ``lit-fl fit --config experiments/quickstart.yaml --rounds R`` with 1 process (torch's default
threads, all cores), 1 process with 1 thread (the scaling baseline) and N processes (Lightning gives each
``cores / N`` threads), interleaved, on the CPU. A round's time is ``round_s + eval_s`` from metrics.csv (training,
transport and evaluation; process start-up and imports excluded), the median over the run's rounds; the ratio is
1-process seconds per round / N-process seconds per round, min and median over repeats.

A second table gives the peak RSS of the largest process for a 100-client mnist5k DFML round: 1 process with 1
thread, then 1, 2 and 3 processes (``--memory-processes``) with their default threads. Every rank holds every
model's weights (see lit_fl/federation/placement.py); what shrinks per rank is its share of the work's memory:
the activations and gradients of the mutual-learning participants it trains, and its evaluation passes. The
1-thread line shows how much of a difference comes from threads per process instead.

    python benchmarks/multi_process.py [--processes 2] [--rounds 6] [--repeats 3] [--memory-only]
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "experiments" / "quickstart.yaml"


def fit_command(run_dir: Path, name: str, devices: int, *extra: str) -> list[str]:
    """``lit-fl fit`` of the quickstart on the CPU, W&B and the progress bar off."""
    return [sys.executable, "-m", "lit_fl.cli", "fit", "--config", str(QUICKSTART), "--run_dir", str(run_dir),
            "--name", name, "--logger.wandb", "false", "--logger.progress", "false",
            "--trainer.accelerator", "cpu", "--trainer.devices", str(devices), *extra]


def threads_env(threads: int | None) -> dict[str, str]:
    """This environment with OMP_NUM_THREADS = ``threads`` (None: torch's or Lightning's default)."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    return env


def fit(run_dir: Path, name: str, devices: int, *extra: str, threads: int | None = None) -> float:
    """Run ``lit-fl fit`` in a fresh process; returns its wall seconds."""
    start = time.perf_counter()
    subprocess.run(fit_command(run_dir, name, devices, *extra), check=True, env=threads_env(threads),
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def seconds_per_round(run: Path) -> float:
    with (run / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    return statistics.median(float(r["round_s"]) + float(r["eval_s"]) for r in rows)


def peak_rss_mb(run_dir: Path, name: str, devices: int, threads: int | None = None) -> float:
    """Peak RSS of the largest finished descendant (every rank is one) of a 1-round, 100-client run."""
    script = (
        "import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True, stdout=subprocess.DEVNULL, "
        "stderr=subprocess.DEVNULL); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)"
    )
    command = [sys.executable, "-c", script,
               *fit_command(run_dir, name, devices, "--rounds", "1", "--data.num_clients", "100")]
    out = subprocess.run(command, check=True, capture_output=True, text=True, env=threads_env(threads))
    return int(out.stdout.strip().splitlines()[-1]) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--memory-only", action="store_true", help="only the peak-RSS lines")
    parser.add_argument("--memory-processes", type=int, nargs="+", default=[1, 2, 3])
    args = parser.parse_args()
    n = args.processes
    ratios: list[float] = []
    scaling: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        runs = Path(tmp)
        for repeat in range(1, 0 if args.memory_only else args.repeats + 1):
            wall_1 = fit(runs, f"one-{repeat}", 1, "--rounds", str(args.rounds))
            fit(runs, f"single-{repeat}", 1, "--rounds", str(args.rounds), threads=1)
            wall_n = fit(runs, f"many-{repeat}", n, "--rounds", str(args.rounds))
            one, many = seconds_per_round(runs / f"one-{repeat}"), seconds_per_round(runs / f"many-{repeat}")
            single = seconds_per_round(runs / f"single-{repeat}")
            ratios.append(one / many)
            scaling.append(single / many)
            print(f"repeat {repeat}: s/round 1 process {one:.3f} (1 thread: {single:.3f}), {n} processes {many:.3f} "
                  f"-> {ratios[-1]:.2f}x faster than 1 process ({scaling[-1]:.2f}x than 1 thread) | wall incl. "
                  f"start-up {wall_1:.1f} s vs {wall_n:.1f} s", flush=True)
        if ratios:
            print(f"DFML quickstart, {n} processes vs 1: {min(ratios):.2f}x min, "
                  f"{statistics.median(ratios):.2f}x median per round; vs 1 process with 1 thread: "
                  f"{min(scaling):.2f}x min, {statistics.median(scaling):.2f}x median ({args.repeats} repeats x "
                  f"{args.rounds} rounds)", flush=True)
        # weights are replicated; a rank's activations and gradients are those of its share of the participants
        for devices, threads in [(1, 1)] + [(d, None) for d in args.memory_processes]:
            label = f"{devices} process(es)" + (f", {threads} thread" if threads else "")
            print(f"100 clients, {label}: peak RSS of the largest process "
                  f"{peak_rss_mb(runs, f'rss-{devices}-{threads}', devices, threads):.0f} MB", flush=True)


if __name__ == "__main__":
    main()
