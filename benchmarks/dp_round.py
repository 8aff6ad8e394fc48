"""What user-level differential privacy costs a round: DP-FedAvg (``experiments/mnist5k/dp_fedavg.yaml`` at 50
clients) with ``privacy.level user`` against the same round with ``privacy.level none``, fused and unfused.

Per side: kernels and host synchronisations per round (:mod:`benchmarks.kernels`' counter, the noise-free CPU proxy
of a GPU round) and the round's CPU seconds (``round_s`` of metrics.csv: min and median over the rounds after the
first, of ``--repeats`` interleaved runs, one thread).

    python benchmarks/dp_round.py [--repeats 3] [--rounds 6]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from kernels import ROOT, count  # noqa: E402

BASE = ["--config", str(ROOT / "experiments/mnist5k/dp_fedavg.yaml"), "--data.num_clients", "50",
        "--eval_every", "1"]
#: the DP side samples its cohort as the other does (fixed size, the same draws), so the two rounds train the same
#: clients and differ only in the mechanism
SIDES = {"no DP": ["--privacy.level", "none"],
         "user-level DP": ["--privacy.level", "user", "--privacy.client_sampling", "fixed"]}


def round_seconds(argv: list[str], fuse: str, rounds: int) -> list[float]:
    """``round_s`` of every round after the first of one run in this process."""
    import torch

    from lit_fl.cli import main
    from lit_fl.tracking import read_metrics

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        rc = main(["fit", *argv, "--rounds", str(rounds), "--trainer.fuse", fuse, "--trainer.accelerator", "cpu",
                   "--run_dir", tmp, "--name", "t", "--logger.wandb", "false", "--logger.progress", "false"])
        if rc not in (0, None):
            raise SystemExit(f"lit-fl fit exited {rc}")
        return [row["round_s"] for row in read_metrics(Path(tmp) / "t" / "metrics.csv")[1:]]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    print("| fuse | side | kernels per round | host syncs per round | round CPU s (min) | round CPU s (median) |")
    print("|---|---|---|---|---|---|")
    for fuse in ("off", "on"):
        seconds: dict[str, list[float]] = {side: [] for side in SIDES}
        for _ in range(args.repeats):  # interleaved: the two sides see the same machine
            for side, extra in SIDES.items():
                seconds[side] += round_seconds([*BASE, *extra], fuse, args.rounds)
        for side, extra in SIDES.items():
            _, rounds = count([*BASE, *extra, "--rounds", "2"], fuse)
            kernels, syncs = (statistics.fmean(r[i] for r in rounds) for i in (0, 1))
            print(f"| {fuse} | {side} | {kernels:,.0f} | {syncs:,.0f} | {min(seconds[side]):.3f} "
                  f"| {statistics.median(seconds[side]):.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
