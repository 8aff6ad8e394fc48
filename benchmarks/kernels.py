"""Kernels per round by phase: a noise-free CPU proxy for the GPU time of a round of small models.

Runs ``lit-fl fit`` in this process with :class:`~lit_fl.kernel_count.KernelCounter` active from the first to the
last instruction of the command (setup, data, checkpoint and run directory included) and attributes every non-view
aten call to a phase: local training, mutual learning (every peer-learning step, noise distillation included),
evaluation, or the rest. Each configuration runs fused and unfused (``trainer.fuse on|off``).

    python benchmarks/kernels.py                 # quickstart at 10 and 50 clients, dfml_cifar100 on synthetic data
    python benchmarks/kernels.py --only quickstart-50
    python benchmarks/kernels.py --methods       # every method's round on a 50-client mnist5k federation
    python -m torch.distributed.run --nproc-per-node 2 benchmarks/kernels.py --methods --only dfml
                                                 # the same, each rank's kernels at --trainer.devices 2

"client phase" counts the client phases (:meth:`StepRunner.run_phase`: every method's local training, FedORION's
and FML's client DML, UA-PDFL's aux-proximal training, Def-KT's fusion, codistillation's clients, DFML's mutual
learning, the predict phases of the public-data methods); "other steps" the server steps
(:meth:`StepRunner.run_server_step`); "per round" is everything a round dispatches (the algorithm's round and the
evaluation that follows it), per round; "host syncs per round" the round's dispatched host synchronisations
(:attr:`~lit_fl.kernel_count.KernelCounter.syncs`: values read back, data-dependent shapes) and "host copies" its
``.tolist()``/``.numpy()``/``.cpu()`` calls, an upper bound (host data counts too). ``--sync-sites N`` lists the
lines of lit-fl that synchronised or copied most.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from lit_fl.kernel_count import KernelCounter

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = [
    "--config", str(ROOT / "experiments/quickstart.yaml"), "--rounds", "1", "--eval_every", "1",
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
METHOD_ROUNDS = 2
#: every method's mnist5k config at 50 clients, two rounds (FedORION: its 10 clients per round at 50 clients)
METHODS: dict[str, list[str]] = {
    name: ["--config", str(ROOT / f"experiments/mnist5k/{name}.yaml"), "--data.num_clients", "50",
           "--rounds", str(METHOD_ROUNDS), "--eval_every", "1"]
    for name in ("dfml", "fedavg", "fedprox", "heterofl", "fedrolex", "feddropout", "fml", "defkt", "fullavg", "combo",
                 "local", "fedper", "uapdfl", "fedorion", "codistillation", "merged_codist",
                 # the baselines of FedORION's and UA-PDFL's tables
                 "dfedavgm", "dispfl", "criticalfl", "serverfedavg", "serverfedprox", "scaffold", "fedntd", "feddf",
                 "fedmd", "dsfl", "ktpfl", "fedkemf", "fdmeta")
}
PHASES = ("client phase", "other steps", "evaluation", "rest")


@contextmanager
def phases(counter: KernelCounter, rounds: list[tuple[int, int, int]]):  # noqa: ANN201
    """Label client phases, other steps and evaluation while the block runs; each round's kernels, host
    synchronisations and host copies go to ``rounds``."""
    from lit_fl.federation.evaluation import Evaluator
    from lit_fl.federation.loop import RoundLoop
    from lit_fl.steps.runner import StepRunner

    run_phase, server_step, evaluate, run_round = (StepRunner.run_phase, StepRunner.run_server_step,
                                                   Evaluator.evaluate, RoundLoop.run_round)

    def labelled(label: str, function: Callable) -> Callable:
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            with counter.phase(label):
                return function(*args, **kwargs)

        return wrapper

    def counted_round(self: RoundLoop, round_: int) -> Any:
        before = counter.total, counter.syncs, counter.copies
        try:
            return run_round(self, round_)
        finally:
            rounds.append((counter.total - before[0], counter.syncs - before[1], counter.copies - before[2]))

    patches: list[tuple[type, str, Callable]] = [
        (StepRunner, "run_phase", labelled("client phase", run_phase)),
        (StepRunner, "run_server_step", labelled("other steps", server_step)),
        (Evaluator, "evaluate", labelled("evaluation", evaluate)),
        (RoundLoop, "run_round", counted_round),
    ]
    for owner, name, function in patches:
        setattr(owner, name, function)
    try:
        yield
    finally:
        StepRunner.run_phase, StepRunner.run_server_step, Evaluator.evaluate = run_phase, server_step, evaluate
        RoundLoop.run_round = run_round


def count(argv: list[str], fuse: str, devices: int = 1) -> tuple[KernelCounter, list[tuple[int, int, int]]]:
    """Kernels of one ``lit-fl fit`` with ``trainer.fuse`` (and the kernels of each of its rounds); raises if the run
    fails. Evaluation runs with the batch size a GPU run uses (1024, one batch for mnist5k's test set) instead of
    the CPU's 128: the count stands for the kernels a GPU launches."""
    from lit_fl.cli import main
    from lit_fl.federation import evaluation

    evaluation.BATCH_SIZES["cpu"] = evaluation.ACCELERATOR_BATCH_SIZE

    with tempfile.TemporaryDirectory() as tmp:
        args = ["fit", *argv, "--trainer.fuse", fuse, "--trainer.accelerator", "cpu", "--run_dir", tmp,
                "--name", "kernels", "--logger.wandb", "false", "--logger.progress", "false"]
        if devices > 1:
            args += ["--trainer.devices", str(devices)]
        counter, rounds = KernelCounter(), []
        with phases(counter, rounds), counter:
            rc = main(args)
        if rc not in (0, None):
            raise SystemExit(f"lit-fl {' '.join(args)} exited {rc}")
    return counter, rounds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", action="store_true", help="every method on 50-client mnist5k federations")
    parser.add_argument("--only", nargs="*", choices=[*CONFIGS, *METHODS], help="configurations to count")
    parser.add_argument("--fuse", nargs="*", default=["off", "on"], choices=["off", "on"])
    parser.add_argument("--sync-sites", type=int, default=0, metavar="N",
                        help="after each row, the N lines of lit-fl that synchronised most often")
    args = parser.parse_args(argv)
    table = METHODS if args.methods else CONFIGS
    world = int(os.environ.get("WORLD_SIZE", "1"))  # under torchrun: each rank counts its own kernels
    rank = f"rank {os.environ.get('RANK', '0')}/{world} | " if world > 1 else ""
    print(f"| {'rank | ' if world > 1 else ''}config | fuse | {' | '.join(PHASES)} | total | per round "
          "| host syncs per round | host copies per round |")
    print("|---|" * (2 if world > 1 else 1) + "---|" + "---|" * (len(PHASES) + 4))
    for name in args.only or list(table):
        per_round = {}
        for fuse in args.fuse:
            counter, rounds = count(table[name], fuse, world)
            per_round[fuse], syncs, copies = (sum(r[i] for r in rounds) / max(len(rounds), 1) for i in range(3))
            cells = " | ".join(f"{counter.by_phase.get(p, 0):,}" for p in PHASES)
            print(f"| {rank}{name} | {fuse} | {cells} | {counter.total:,} | {per_round[fuse]:,.0f} | {syncs:,.0f} "
                  f"| {copies:,.0f} |",
                  flush=True)
            for (phase, site), calls in counter.sync_sites.most_common(args.sync_sites):
                print(f"|   {calls:,} syncs | {phase} | {site} |", flush=True)
        if {"on", "off"} <= set(per_round):
            print(f"| {rank}{name} | on/off | | | | | | {per_round['on'] / per_round['off']:.2f} | | |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
