"""What the virtual clock costs a round: 100 clients of ``experiments/mnist5k/serverfedavg.yaml`` (50 selected a
round) with ``system.clock`` on (lognormal speeds and a deadline no client misses: the work log, the round's
charge and the deadline's check all run, the same clients train) against the same rounds without it.

Per side: kernels per round (:mod:`benchmarks.kernels`' counter, the noise-free CPU proxy of a GPU round) and the
round's CPU seconds (``round_s`` of metrics.csv: min and median over the rounds after the first, of ``--repeats``
interleaved runs, one thread). The clock is host-side Python over the round's events; its share is the difference.

    python benchmarks/clock_round.py [--repeats 3] [--rounds 4]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dp_round import round_seconds  # noqa: E402
from kernels import ROOT, count  # noqa: E402

BASE = ["--config", str(ROOT / "experiments/mnist5k/serverfedavg.yaml"), "--data.num_clients", "100",
        "--algorithm.init_args.client_fraction", "0.5", "--eval_every", "1"]
SIDES = {"clock off": [],
         "clock on": ["--system.clock", "true", "--system.speed", "lognormal", "--system.deadline_s", "1000000"]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    seconds: dict[str, list[float]] = {side: [] for side in SIDES}
    for _ in range(args.repeats):  # interleaved: the two sides see the same machine
        for side, extra in SIDES.items():
            seconds[side] += round_seconds([*BASE, *extra], "off", args.rounds)
    print("100 clients, 50 selected a round, CPU, one thread")
    print("| side | kernels per round | round CPU s (min) | round CPU s (median) |")
    print("|---|---|---|---|")
    for side, extra in SIDES.items():
        _, rounds = count([*BASE, *extra, "--rounds", "2"], "off")
        kernels = statistics.fmean(r[0] for r in rounds)
        print(f"| {side} | {kernels:,.0f} | {min(seconds[side]):.3f} | {statistics.median(seconds[side]):.3f} |",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
