"""What the virtual clock costs a round: 100 clients of ``experiments/mnist5k/serverfedavg.yaml`` (50 selected a
round) with ``system.clock`` on (lognormal speeds and a deadline no client misses: the work log, the round's
charge and the deadline's check all run, the same clients train) against the same rounds without it.

Per side: kernels per round (:mod:`benchmarks.kernels`' counter, the noise-free CPU proxy of a GPU round) and the
round's CPU seconds (``round_s`` of metrics.csv: min and median over the rounds after the first, of ``--repeats``
interleaved runs, one thread). The clock is host-side Python over the round's events; its share is the difference.

Then partial work stays fused: ServerFedProx on the same 100 clients, fused (``trainer.fuse on``), kernels per round
with a deadline every client meets against one that cuts most clients' local epochs short (``system.partial_work``):
cut clients train fewer steps inside the same batched step, so the round launches no more kernels, not one step per
client (the unfused count beside them).

    python benchmarks/clock_round.py [--repeats 3] [--rounds 4]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from dp_round import round_seconds  # noqa: E402
from kernels import ROOT, count  # noqa: E402

BASE = ["--config", str(ROOT / "experiments/mnist5k/serverfedavg.yaml"), "--data.num_clients", "100",
        "--algorithm.init_args.client_fraction", "0.5", "--eval_every", "1"]
#: every client there all the time (the departure checks of every transfer run, nobody leaves)
TRACE = Path(tempfile.gettempdir()) / "lit_fl_clock_round_trace.json"
SIDES = {"clock off": [],
         "clock on": ["--system.clock", "true", "--system.speed", "lognormal", "--system.deadline_s", "1000000"],
         "clock on, availability": ["--system.clock", "true", "--system.speed", "lognormal", "--system.deadline_s",
                                    "1000000", "--system.availability_trace", str(TRACE)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    TRACE.write_text(json.dumps({str(k): {"active": [0], "inactive": [1e12], "finish_time": 1e12} for k in range(100)}))
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
    partial_work()
    return 0


#: ServerFedProx on the clock: lognormal speeds, a deadline no client misses, or one that cuts most clients' work
PROX = ["--config", str(ROOT / "experiments/mnist5k/serverfedprox.yaml"), "--data.num_clients", "100",
        "--algorithm.init_args.client_fraction", "0.5", "--eval_every", "1", "--system.clock", "true",
        "--system.speed", "lognormal", "--system.speed_scale", "20"]
DEADLINES = {"whole work": ["--system.deadline_s", "1000000"],
             "partial work": ["--system.deadline_s", "0.25", "--system.partial_work", "true"]}


def partial_work() -> None:
    """Kernels per round of ServerFedProx, fused and unfused, with and without partial work."""
    print("\nServerFedProx, 100 clients, 50 a round: kernels per round (round 2 of 2)")
    print("| work | fused | unfused | updates cut (round 2) |")
    print("|---|---|---|---|")
    for label, extra in DEADLINES.items():
        kernels = {fuse: count([*PROX, *extra, "--rounds", "2"], fuse)[1][-1][0] for fuse in ("on", "off")}
        cut = _cut_updates([*PROX, *extra, "--rounds", "2"])
        print(f"| {label} | {kernels['on']:,} | {kernels['off']:,} | {cut} |", flush=True)


def _cut_updates(argv: list[str]) -> str:
    """``partial_updates`` of the last round of one run (``-`` without partial work)."""
    from lit_fl.cli import main
    from lit_fl.tracking import read_metrics

    with tempfile.TemporaryDirectory() as folder:
        if main(["fit", *argv, "--run_dir", folder, "--name", "run", "--logger.wandb", "false"]) != 0:
            raise RuntimeError("the run failed")
        last = read_metrics(Path(folder) / "run" / "metrics.csv")[-1]
    return f"{last['partial_updates']:.0f} of 50" if "partial_updates" in last else "-"


if __name__ == "__main__":
    sys.exit(main())
