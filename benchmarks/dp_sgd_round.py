"""What sample-level DP-SGD costs a client phase: 50 clients' local training (``experiments/mnist5k/dp_sgd.yaml``
at 50 clients, every client training) with ``privacy.level sample`` against the same phase without privacy, fused
and unfused, and against Opacus (its ``GradSampleModule`` and ``DPOptimizer``, the library's per-sample gradients)
run client by client on the same batches.

Per side: the phase's kernels (:class:`~lit_fl.kernel_count.KernelCounter`, every non-view aten call: the
noise-free CPU proxy of a GPU phase of small models, which is bound by kernel launches) and its CPU seconds (min and
median of ``--repeats`` interleaved runs, one thread).

    python benchmarks/dp_sgd_round.py [--repeats 3] [--clients 50]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def experiment(clients: int, private: bool):  # noqa: ANN201 - an Experiment
    """The benchmark's experiment, built from the sweep's config."""
    from lit_fl.fit_config import fit_parser, prepare, resolve_config_files, with_run_config

    argv = ["--config", str(ROOT / "experiments/mnist5k/dp_sgd.yaml"), "--data.num_clients", str(clients),
            "--trainer.accelerator", "cpu", "--logger.wandb", "false"]
    if not private:
        argv += ["--privacy.level", "none"]
    parser = fit_parser()
    return prepare(parser.parse_args(with_run_config(resolve_config_files(argv))), parser)[0]


def lit_fl_phase(clients: int, private: bool, fuse: str) -> Callable[[], None]:
    """One local phase of every client, as lit-fl runs it."""
    exp = experiment(clients, private)
    federation, runner = exp.build()
    runner.fuse = fuse == "on"
    algorithm = exp.algorithm
    return lambda: algorithm.local_phase(federation.clients, federation, runner)


def opacus_phase(clients: int) -> Callable[[], None]:
    """One local phase of every client with Opacus, client by client: the same models, batches, clip norm, noise
    multiplier and SGD, each client's model wrapped in a ``GradSampleModule`` with a ``DPOptimizer``."""
    from opacus import GradSampleModule
    from opacus.optimizers import DPOptimizer

    from lit_fl.losses import LOSSES

    exp = experiment(clients, True)
    federation, _ = exp.build()
    algorithm, privacy = exp.algorithm, exp.privacy
    loss_fn = LOSSES[algorithm.loss]
    assert privacy.noise_multiplier is not None

    def run() -> None:
        for client in federation.clients:
            if client.num_train == 0:
                continue
            own = copy.deepcopy(client.model)
            for module in own.modules():  # Opacus's hooks refuse in-place activations
                if getattr(module, "inplace", False):
                    module.inplace = False
            model = GradSampleModule(own)
            sgd = torch.optim.SGD(model.parameters(), lr=algorithm.optimizer.lr)
            optimizer = DPOptimizer(sgd, noise_multiplier=privacy.noise_multiplier, max_grad_norm=privacy.clip_norm,
                                    expected_batch_size=min(algorithm.batch_size, client.num_train))
            for x, y in algorithm.batches(federation, client.train_idx, algorithm.local_epochs):
                loss = loss_fn(model(x), y, client.class_proportions)
                loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)

    return run


def kernels(run: Callable[[], None]) -> int:
    from lit_fl.kernel_count import KernelCounter

    with KernelCounter() as counter:
        run()
    return counter.total


def seconds(run: Callable[[], None]) -> float:
    start = time.process_time()
    run()
    return time.process_time() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--clients", type=int, default=50)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sides = {
        "fused, no DP": lit_fl_phase(args.clients, False, "on"),
        "fused, DP-SGD": lit_fl_phase(args.clients, True, "on"),
        "unfused, no DP": lit_fl_phase(args.clients, False, "off"),
        "unfused, DP-SGD": lit_fl_phase(args.clients, True, "off"),
        "Opacus client by client": opacus_phase(args.clients),
    }
    counted = {name: kernels(run) for name, run in sides.items()}
    times: dict[str, list[float]] = {name: [] for name in sides}
    for _ in range(args.repeats):  # interleaved: every side sees the same machine
        for name, run in sides.items():
            times[name].append(seconds(run))
    base = counted["fused, no DP"]
    print(f"{args.clients} clients, one local phase (every client), CPU, one thread")
    print("| side | kernels | x fused no DP | CPU s (min) | CPU s (median) |")
    print("|---|---|---|---|---|")
    for name in sides:
        print(f"| {name} | {counted[name]:,} | {counted[name] / base:.2f} | {min(times[name]):.2f} "
              f"| {statistics.median(times[name]):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
