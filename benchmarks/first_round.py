"""Seconds from launching ``lit-fl fit`` to its first round's line, this checkout against another, interleaved.

Issue 38 asks for a start-up a user can pay for: this times the whole path a user waits through (Python, torch,
Lightning, the config, the dataset, building the federation, W&B's start, round 1 with its evaluation), ``--repeats``
interleaved pairs, min and median of each side and the ratio of the medians.

    python benchmarks/first_round.py --baseline /path/to/other/checkout [--repeats 3] [--config FILE]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
LAUNCH = "import sys; sys.argv = ['lit-fl', *sys.argv[1:]]; from lit_fl.cli import main; main()"


def first_round_s(checkout: Path, config: Path, workdir: Path) -> float:
    """Wall seconds until the line of round 1 (the process then runs round 2 and exits; its exit is checked)."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    args = [sys.executable, "-c", LAUNCH, "fit", "--config", str(config), "--rounds", "2", "--run_dir", str(workdir)]
    start = time.perf_counter()
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=workdir)
    assert proc.stdout is not None
    first, lines = None, []
    for line in proc.stdout:
        lines.append(line)
        if first is None and "round 1/" in line:
            first = time.perf_counter() - start
    if proc.wait() != 0 or first is None:
        raise SystemExit(f"{checkout}: lit-fl fit failed\n{''.join(lines[-20:])}")
    return first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another lit-fl checkout (its repository root)")
    parser.add_argument("--config", type=Path, default=HERE / "experiments" / "quickstart.yaml")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    times: dict[str, list[float]] = {"baseline": [], "this": []}
    for _ in range(args.repeats):
        for side, checkout in (("baseline", args.baseline), ("this", HERE)):
            with tempfile.TemporaryDirectory() as tmp:
                times[side].append(first_round_s(checkout.resolve(), args.config.resolve(), Path(tmp)))
    for side, values in times.items():
        print(f"{side:9s} min {min(values):6.2f} s  median {statistics.median(values):6.2f} s  {values}")
    ratio = statistics.median(times["this"]) / statistics.median(times["baseline"])
    print(f"ratio of medians (this / baseline): {ratio:.3f}")


if __name__ == "__main__":
    main()
