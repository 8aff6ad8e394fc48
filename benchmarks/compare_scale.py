"""``lit-fl compare`` over thousands of run folders: wall time and peak memory (issue 37: 5,000 runs within 30 s).

Writes ``--runs`` run folders as ``lit-fl fit`` writes them (``config.yaml``, ``metrics.csv`` of ``--rounds`` rows,
``summary.json``), ``--configurations`` configurations of ``--runs / --configurations`` seeds each, into a temporary
folder, then times ``lit-fl compare`` on it in a fresh process per repeat and reports the wall seconds and the
process's peak RSS (``ru_maxrss`` of the child), min and median over the repeats.

    python benchmarks/compare_scale.py [--runs 5000] [--configurations 50] [--rounds 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

COLUMNS = ("round", "reported_acc", "global_acc", "global_acc_regular", "local_acc", "comm_mb", "train_loss")


def write_runs(root: Path, runs: int, configurations: int, rounds: int) -> None:
    """``runs`` completed run folders under ``root``, configuration ``i % configurations`` (its ``alpha_max``)."""
    for i in range(runs):
        folder = root / f"run-{i:05d}"
        folder.mkdir(parents=True)
        config, seed = i % configurations, i // configurations
        (folder / "config.yaml").write_text(
            f"algorithm:\n  class_path: lit_fl.algorithms.DFML\n  init_args:\n    alpha_max: {0.5 + config / 1000}\n"
            f"data:\n  dataset: mnist5k\n  num_clients: 10\nseed: {seed}\nrounds: {rounds}\n")
        lines = [",".join(COLUMNS)]
        for r in range(1, rounds + 1):
            acc = min(0.99, 0.1 + 0.04 * r + config / 1000 + seed / 10_000)
            lines.append(f"{r},{acc},{acc},{acc},{acc},{r * 1.5},{1.0 / r}")
        (folder / "metrics.csv").write_text("\n".join(lines) + "\n")
        (folder / "summary.json").write_text(json.dumps({"status": "completed", "rounds_completed": rounds,
                                                         "rounds": rounds}))


def compare_once(root: Path) -> tuple[float, float]:
    """Wall seconds and peak RSS (MiB) of one ``lit-fl compare`` of ``root`` in a fresh process."""
    started = time.perf_counter()
    argv = [sys.executable, "-m", "lit_fl.cli", "compare", str(root), "--out", str(root.parent / "compare")]
    result = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "WANDB_MODE": "offline"})
    seconds = time.perf_counter() - started
    if result.returncode != 0:
        raise SystemExit(f"compare failed ({result.returncode}): {result.stderr.strip()[-500:]}")
    return seconds, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5000)
    parser.add_argument("--configurations", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "runs"
        started = time.perf_counter()
        write_runs(root, args.runs, args.configurations, args.rounds)
        print(f"wrote {args.runs} runs ({args.configurations} configurations x {args.runs // args.configurations} "
              f"seeds, {args.rounds} rounds) in {time.perf_counter() - started:.1f}s")
        times, peaks = zip(*(compare_once(root) for _ in range(args.repeats)))
    print(f"lit-fl compare of {args.runs} runs: wall min {min(times):.2f}s median {statistics.median(times):.2f}s; "
          f"peak RSS max {max(peaks):.0f} MiB (repeats {args.repeats})")


if __name__ == "__main__":
    main()
