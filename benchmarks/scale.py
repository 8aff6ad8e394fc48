"""Federations of 100 and 1,000 clients: build time, peak RSS, and where a round's time goes.

* ``build``: builds the federation (``cnn_8_16``, Dirichlet 0.5) in a fresh subprocess per case and reports the
  build seconds and the process's peak RSS (``ru_maxrss``) after the build; min and median over repeats.
* ``round``: runs DFML (50% senders, K=1) and decentralized FedAvg (50% senders) rounds on a 1,000-client
  mnist5k federation exactly as ``lit-fl fit`` does (``RoundLoop.run_round``, a metrics.csv row, a checkpoint)
  and splits every round into

  - *training steps*: the time spent inside ``StepRunner.run_phase`` and ``StepRunner.run_server_step`` (every
    client phase and server step: forward, backward, optimizer steps);
  - *evaluation*: ``Evaluator.evaluate`` (global, local and peak accuracy of every changed model);
  - *other*: everything else, i.e. selection, transport and the ledger, peak bookkeeping, averaging,
    the metrics row and the checkpoint, reported with its share of the round.

    python benchmarks/scale.py [--clients 100 1000] [--repeats 3] [--rounds 3] [--skip-build] [--skip-round]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: dataset options per case: synthetic gets 20 training images per client so that every client has data.
DATASETS = ("mnist5k", "synthetic")


def build_once(dataset: str, num_clients: int) -> dict[str, float]:
    """Load the dataset, build the federation, report seconds and peak RSS (run in a fresh process)."""
    from lit_fl.config import DataConfig, ModelsConfig
    from lit_fl.data import load_dataset
    from lit_fl.federation.builder import build_federation

    options = {"num_train": 20 * num_clients} if dataset == "synthetic" else {}
    images = load_dataset(dataset, **options)
    start = time.perf_counter()
    data = DataConfig(dataset=dataset, num_clients=num_clients, partition="dirichlet", beta=0.5, options=options)
    fed = build_federation(images, data, ModelsConfig(pool=["cnn_8_16"]), seed=0)
    seconds = time.perf_counter() - start
    assert len(fed.clients) == num_clients
    return {"build_s": seconds, "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def bench_build(clients: list[int], repeats: int) -> None:
    for dataset in DATASETS:
        for n in clients:
            runs = []
            for _ in range(repeats):
                out = subprocess.run(
                    [sys.executable, __file__, "--_build-once", dataset, str(n)],
                    check=True, capture_output=True, text=True,
                )
                runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            build = [r["build_s"] for r in runs]
            rss = [r["peak_rss_mb"] for r in runs]
            print(
                f"build {dataset:>9} {n:>5} clients: {min(build):6.2f} s min, {statistics.median(build):6.2f} s median"
                f" | peak RSS {min(rss):6.0f} MB min, {statistics.median(rss):6.0f} MB median ({repeats} runs)",
                flush=True,
            )


def bench_rounds(num_clients: int, rounds: int) -> None:
    import torch

    from lit_fl.algorithms import DFML, DecentralizedFedAvg
    from lit_fl.config import DataConfig, ModelsConfig
    from lit_fl.data import load_dataset
    from lit_fl.federation.builder import build_federation
    from lit_fl.federation.callbacks import MetricsFile
    from lit_fl.federation.checkpoint import save_checkpoint
    from lit_fl.federation.evaluation import Evaluator
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.loop import RoundLoop
    from lit_fl.steps import StepRunner
    from lit_fl.tracking import MetricsCSV

    torch.manual_seed(0)
    images = load_dataset("mnist5k")
    data = DataConfig(dataset="mnist5k", num_clients=num_clients, partition="dirichlet", beta=0.5)
    algorithms = {
        "dfml": lambda: DFML(sender_fraction=0.5, mutual_epochs=1, period=5, period_increment=5),
        "fedavg": lambda: DecentralizedFedAvg(sender_fraction=0.5),
    }
    for name, make in algorithms.items():
        fed = build_federation(images, data, ModelsConfig(pool=["cnn_8_16"]), seed=0)
        algorithm = make()
        algorithm.setup(fed)
        runner, ledger, evaluator = StepRunner(accelerator="cpu"), CommunicationLedger(), Evaluator()
        fit_s = [0.0]

        def timed(method, _fit_s=fit_s):  # noqa: ANN001, ANN202
            def run(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
                start = time.perf_counter()
                try:
                    return method(*args, **kwargs)
                finally:
                    _fit_s[0] += time.perf_counter() - start

            return run

        runner.run_phase = timed(runner.run_phase)  # type: ignore[method-assign]
        runner.run_server_step = timed(runner.run_server_step)  # type: ignore[method-assign]
        with tempfile.TemporaryDirectory() as tmp:
            csv = MetricsCSV(Path(tmp) / "metrics.csv")
            loop = RoundLoop(fed, algorithm, runner, evaluator, ledger, rounds, callbacks=[MetricsFile(csv)])
            for round_ in range(1, rounds + 1):
                fit_s[0] = 0.0
                start = time.perf_counter()
                row = loop.run_round(round_)
                save_checkpoint(Path(tmp) / "last.ckpt", fed, algorithm, ledger)
                total = time.perf_counter() - start
                assert row is not None
                other = total - fit_s[0] - row["eval_s"]
                print(
                    f"{name} {num_clients} clients, round {round_}: {total:6.2f} s = training steps {fit_s[0]:6.2f} s"
                    f" + evaluation {row['eval_s']:5.2f} s + other {other:5.2f} s ({100 * other / total:4.1f}% of the"
                    f" round; {int(row['num_participants'])} participants)",
                    flush=True,
                )
        print(f"{name} {num_clients} clients: peak RSS so far "
              f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB", flush=True)


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--_build-once":
        print(json.dumps(build_once(sys.argv[2], int(sys.argv[3]))))
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", type=int, nargs="+", default=[100, 1000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the 1,000-client round breakdown")
    parser.add_argument("--round-clients", type=int, default=1000)
    parser.add_argument("--skip-build", action="store_true")
    parser.add_argument("--skip-round", action="store_true")
    args = parser.parse_args()
    if not args.skip_build:
        bench_build(args.clients, args.repeats)
    if not args.skip_round:
        bench_rounds(args.round_clients, args.rounds)


if __name__ == "__main__":
    main()
