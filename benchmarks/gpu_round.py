"""Seconds per round and GPU utilisation of ``dfml_cifar100`` (50 clients, K = 10, H2 CNN pool) on synthetic data of
CIFAR-100's shape, at 32-true and bf16-mixed, fused and unfused (``trainer.fuse on|off``). Needs a CUDA GPU; on a
machine without one it says so and exits 0.

Each configuration runs ``--rounds`` rounds in this process after one warm-up round (cuDNN autotuning, allocator);
the figures are the medians of the timed rounds' ``round_s`` (training: local, mutual learning, peaks) and
``eval_s`` (evaluation of every model) columns of ``metrics.csv``. GPU utilisation is sampled
every 0.5 s with ``torch.cuda.utilization()`` (NVML) while the timed rounds run.

    python benchmarks/gpu_round.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import tempfile
import threading
from pathlib import Path

import torch
from kernels import CIFAR100_SYNTHETIC


def run(precision: str, fuse: str, rounds: int) -> tuple[float, float, float]:
    """Median training and evaluation seconds per timed round, and the mean GPU utilisation (%)."""
    from lit_fl.cli import main

    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            samples.append(float(torch.cuda.utilization()))

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["fit", *CIFAR100_SYNTHETIC, "--rounds", str(rounds + 1), "--eval_every", "1",
                "--checkpoint_every", "1000", "--trainer.precision", precision, "--trainer.fuse", fuse,
                "--trainer.accelerator", "gpu", "--run_dir", tmp, "--name", "gpu", "--logger.wandb", "false",
                "--logger.progress", "false"]
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        rc = main(argv)
        done.set()
        if rc not in (0, None):
            raise SystemExit(f"lit-fl {' '.join(argv)} exited {rc}")
        with (Path(tmp) / "gpu" / "metrics.csv").open() as handle:
            rows = list(csv.DictReader(handle))[1:]  # round 1 warms up
    train, evaluation = (statistics.median(float(r[key]) for r in rows) for key in ("round_s", "eval_s"))
    return train, evaluation, statistics.fmean(samples) if samples else float("nan")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds per configuration (after one warm-up)")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_round.py: no CUDA GPU here; nothing measured")
        return 0
    print(f"| precision | fuse | training s/round | evaluation s/round (medians of {args.rounds}) | GPU utilisation |")
    print("|---|---|---|---|---|")
    for precision in ("32-true", "bf16-mixed"):
        for fuse in ("off", "on"):
            train, evaluation, utilisation = run(precision, fuse, args.rounds)
            print(f"| {precision} | {fuse} | {train:.2f} | {evaluation:.2f} | {utilisation:.0f} % |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
