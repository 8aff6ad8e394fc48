"""Kernels per round by phase: a noise-free CPU proxy for the GPU time of a round of small models.

Runs ``lit-fl fit`` in this process with :class:`~lit_fl.kernel_count.KernelCounter` active from the first to the
last instruction of the command (setup, data, checkpoint and run directory included) and attributes every non-view
aten call to a phase: local training, mutual learning (every peer-learning step, noise distillation included),
evaluation, or the rest. Each configuration runs fused and unfused (``trainer.fuse on|off``).

    python benchmarks/kernels.py                 # quickstart at 10 and 50 clients, dfml_cifar100 on synthetic data
    python benchmarks/kernels.py --only quickstart-50
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lit_fl.kernel_count import KernelCounter

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = [
    "--config", str(ROOT / "experiments/quickstart.yaml"), "--rounds", "1", "--eval_every", "100",
    "--algorithm.init_args.mutual_epochs", "10", "--algorithm.init_args.batch_size", "64",
]
#: dfml_cifar100 as configured, on synthetic data of CIFAR-100's shape and size (no download needed)
CIFAR100_SYNTHETIC = [
    "--config", str(ROOT / "experiments/dfml_cifar100.yaml"), "--rounds", "1", "--data.dataset", "synthetic",
    "--data.options", '{"num_classes": 100, "input_shape": [3, 32, 32], "num_train": 50000, "num_test": 10000}',
]
CONFIGS: dict[str, list[str]] = {
    "quickstart-10": QUICKSTART,
    "quickstart-50": [*QUICKSTART, "--data.num_clients", "50"],
    "dfml_cifar100-synthetic": CIFAR100_SYNTHETIC,
}
PHASES = ("local training", "mutual learning", "evaluation", "rest")


LOCAL_STEPS = ("LocalTraining", "BatchedLocalTraining", "AuxProximalTraining")


def phase_of(step: Any) -> str:
    return "local training" if type(step).__name__ in LOCAL_STEPS else "mutual learning"


@contextmanager
def phases(counter: KernelCounter):  # noqa: ANN201
    """Label the work of ``StepRunner._fit`` and ``Evaluator.evaluate`` while the block runs."""
    from lit_fl.federation.evaluation import Evaluator
    from lit_fl.steps.runner import StepRunner

    fit, evaluate = StepRunner._fit, Evaluator.evaluate

    def labelled_fit(self: StepRunner, step: Any, batches: Any) -> Any:
        with counter.phase(phase_of(step)):
            return fit(self, step, batches)

    def labelled_evaluate(self: Evaluator, fed: Any) -> Any:
        with counter.phase("evaluation"):
            return evaluate(self, fed)

    patches: list[tuple[type, str, Callable]] = [(StepRunner, "_fit", labelled_fit),
                                                  (Evaluator, "evaluate", labelled_evaluate)]
    for owner, name, function in patches:
        setattr(owner, name, function)
    try:
        yield
    finally:
        StepRunner._fit, Evaluator.evaluate = fit, evaluate


def count(argv: list[str], fuse: str) -> KernelCounter:
    """Kernels of one ``lit-fl fit`` with ``trainer.fuse``; raises if the run fails."""
    from lit_fl.cli import main

    with tempfile.TemporaryDirectory() as tmp:
        args = ["fit", *argv, "--trainer.fuse", fuse, "--trainer.accelerator", "cpu", "--run_dir", tmp,
                "--name", "kernels", "--logger.wandb", "false", "--logger.progress", "false"]
        counter = KernelCounter()
        with phases(counter), counter:
            rc = main(args)
        if rc not in (0, None):
            raise SystemExit(f"lit-fl {' '.join(args)} exited {rc}")
    return counter


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", choices=list(CONFIGS), help="configurations to count")
    parser.add_argument("--fuse", nargs="*", default=["off", "on"], choices=["off", "on"])
    args = parser.parse_args(argv)
    print(f"| config | fuse | {' | '.join(PHASES)} | total |")
    print("|---|---|" + "---|" * (len(PHASES) + 1))
    for name in args.only or list(CONFIGS):
        for fuse in args.fuse:
            counter = count(CONFIGS[name], fuse)
            cells = " | ".join(f"{counter.by_phase.get(p, 0):,}" for p in PHASES)
            print(f"| {name} | {fuse} | {cells} | {counter.total:,} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
