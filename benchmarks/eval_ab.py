"""Evaluation time of a config at two git revisions: the checked-out tree against ``--before``, interleaved.

Each repeat runs ``lit-fl fit --config CONFIG`` once with the ``--before`` revision (a temporary git worktree)
and once with this tree, in fresh processes, W&B off. It prints the total ``eval_s`` and ``round_s`` of each run
(metrics.csv), min and median per side, the before/now ratio, and whether every accuracy column of metrics.csv
is identical on both sides (evaluation changes must not change the numbers).

    python benchmarks/eval_ab.py --before 32a7719 [--config experiments/quickstart.yaml] [--repeats 3]

32a7719 is the last commit before issue 10's evaluation work (about 15 minutes for 3 quickstart repeats).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(tree: Path, config: str, run_dir: Path) -> list[dict[str, str]]:
    """One run with the lit_fl package of ``tree``; returns its metrics.csv rows."""
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_MODE": "disabled"}
    subprocess.run([sys.executable, "-m", "lit_fl.cli", "fit", "--config", str(tree / config), "--run_dir",
                    str(run_dir), "--name", "ab", "--logger.wandb", "false", "--logger.progress", "false"],
                   env=env, check=True, capture_output=True, cwd=run_dir)
    with (run_dir / "ab" / "metrics.csv").open() as f:
        return list(csv.DictReader(f))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", required=True, help="a git revision")
    parser.add_argument("--config", default="experiments/quickstart.yaml", help="relative to the repository root")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    eval_s: dict[str, list[float]] = {"before": [], "now": []}
    accuracies: dict[str, dict[str, list[str]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        old = Path(tmp) / "before"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(old), args.before], check=True)
        try:
            for repeat in range(1, args.repeats + 1):
                for side, tree in (("before", old), ("now", ROOT)):
                    run_dir = Path(tmp) / f"{side}-{repeat}"
                    run_dir.mkdir()
                    rows = run(tree, args.config, run_dir)
                    eval_s[side].append(sum(float(r["eval_s"]) for r in rows))
                    accuracies[side] = {k: [r[k] for r in rows] for k in rows[0] if "acc" in k}
                    print(f"repeat {repeat} {side:>6}: eval_s {eval_s[side][-1]:7.2f} s, round_s "
                          f"{sum(float(r['round_s']) for r in rows):7.2f} s ({len(rows)} rounds)", flush=True)
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(old)], check=False)
    for side, seconds in eval_s.items():
        print(f"{side:>6}: eval_s {min(seconds):.2f} s min, {statistics.median(seconds):.2f} s median")
    ratios = [b / n for b, n in zip(eval_s["before"], eval_s["now"])]
    print(f"before / now: {min(ratios):.2f}x min, {statistics.median(ratios):.2f}x median; accuracy columns "
          f"identical: {accuracies['before'] == accuracies['now']}")


if __name__ == "__main__":
    main()
