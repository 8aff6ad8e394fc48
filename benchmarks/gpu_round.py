"""Seconds per round and GPU utilisation, fused and unfused (``trainer.fuse on|off``). Needs a CUDA GPU; on a machine
without one it says so and exits 0.

Default: ``dfml_cifar100`` (50 clients, K = 10, H2 CNN pool) on synthetic data of CIFAR-100's shape, at 32-true and
bf16-mixed. ``--methods``: every method's round on a 50-client mnist5k federation (the configurations of
``benchmarks/kernels.py --methods``), at 32-true.

Each configuration runs ``--rounds`` rounds in this process after one warm-up round (cuDNN autotuning, allocator);
the figures are the medians of the timed rounds' ``round_s`` (training: the algorithm's round) and ``eval_s``
(evaluation of every model) columns of ``metrics.csv``. GPU utilisation is sampled every 0.5 s with
``torch.cuda.utilization()`` (NVML) while the run goes on.

    python benchmarks/gpu_round.py [--rounds 3]
    python benchmarks/gpu_round.py --methods [--only fedorion uapdfl] [--rounds 3]
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
from kernels import CIFAR100_SYNTHETIC, METHODS


def without_rounds(argv: list[str]) -> list[str]:
    """``argv`` without its ``--rounds`` and ``--eval_every`` flags (this benchmark sets its own)."""
    kept: list[str] = []
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in ("--rounds", "--eval_every"):
            skip = True
        else:
            kept.append(arg)
    return kept


def run(config: list[str], precision: str, fuse: str, rounds: int) -> tuple[float, float, float]:
    """Median training and evaluation seconds per timed round, and the mean GPU utilisation (%)."""
    from lit_fl.cli import main

    samples: list[float] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(0.5):
            samples.append(float(torch.cuda.utilization()))

    with tempfile.TemporaryDirectory() as tmp:
        argv = ["fit", *without_rounds(config), "--rounds", str(rounds + 1), "--eval_every", "1",
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
    parser.add_argument("--methods", action="store_true", help="every method on 50-client mnist5k federations")
    parser.add_argument("--only", nargs="*", choices=list(METHODS), help="with --methods: the methods to time")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("gpu_round.py: no CUDA GPU here; nothing measured")
        return 0
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}; medians of {args.rounds} rounds")
    print("| config | precision | fuse | training s/round | evaluation s/round | GPU utilisation |")
    print("|---|---|---|---|---|---|")
    if args.methods:
        configs = {name: (METHODS[name], ("32-true",)) for name in args.only or METHODS}
    else:
        configs = {"dfml_cifar100-synthetic": (CIFAR100_SYNTHETIC, ("32-true", "bf16-mixed"))}
    failed: list[str] = []
    for name, (config, precisions) in configs.items():
        for precision in precisions:
            timed = {}
            for fuse in ("off", "on"):
                try:
                    train, evaluation, utilisation = timed[fuse] = run(config, precision, fuse, args.rounds)
                except SystemExit as error:  # the run's own error is on stderr above; time the others
                    failed.append(f"{name} {precision} fuse {fuse}: {error}")
                    print(f"| {name} | {precision} | {fuse} | failed | | |", flush=True)
                    continue
                print(f"| {name} | {precision} | {fuse} | {train:.3f} | {evaluation:.3f} | {utilisation:.0f} % |",
                      flush=True)
            if len(timed) == 2:
                print(f"| {name} | {precision} | off/on | {timed['off'][0] / timed['on'][0]:.2f}x | "
                      f"{timed['off'][1] / timed['on'][1]:.2f}x | |", flush=True)
    for line in failed:
        print(f"failed: {line}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
