"""Seconds per round on one device with 32-true and bf16-mixed: the quickstart and a paper-scale DFML round.

The paper-scale case is experiments/dfml_cifar100.yaml (50 clients, the H2 CNN pool, 25 senders + 1 aggregator,
K = 10 mutual-learning epochs) on ``synthetic`` data of CIFAR-100's shape (50,000 train and 10,000 test images,
3 x 32 x 32, 100 classes), so that it runs where CIFAR-100 cannot be downloaded: the compute per round is the
paper's, the accuracy is meaningless. A round's time is ``round_s + eval_s`` from metrics.csv, median over rounds.

    python benchmarks/precision_rounds.py [--accelerator gpu] [--rounds 3]
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CIFAR100_SHAPE = {"num_classes": 100, "input_shape": [3, 32, 32], "num_train": 50000, "num_test": 10000}
CASES = {
    "quickstart": [str(ROOT / "experiments" / "quickstart.yaml")],
    "dfml_cifar100 (synthetic data)": [str(ROOT / "experiments" / "dfml_cifar100.yaml"), "--data.dataset", "synthetic",
                                       f"--data.options={json.dumps(CIFAR100_SHAPE)}", "--eval_every", "1"],
}


def seconds_per_round(run: Path) -> tuple[float, float]:
    with (run / "metrics.csv").open() as f:
        rows = list(csv.DictReader(f))
    return (statistics.median(float(r["round_s"]) for r in rows), statistics.median(float(r["eval_s"]) for r in rows))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accelerator", default="gpu")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", nargs="+", default=list(CASES))
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        for i, name in enumerate(args.cases):
            for precision in ("32-true", "bf16-mixed"):
                run = f"case{i}-{precision}"
                subprocess.run(
                    [sys.executable, "-m", "lit_fl.cli", "fit", "--config", *CASES[name][:1], *CASES[name][1:],
                     "--rounds", str(args.rounds), "--run_dir", tmp, "--name", run, "--logger.wandb", "false",
                     "--logger.progress", "false", "--trainer.accelerator", args.accelerator,
                     "--trainer.precision", precision, "--checkpoint_every", "0"],
                    check=True,
                )
                train, evaluate = seconds_per_round(Path(tmp) / run)
                print(f"{name:<32} {precision:<10} {train + evaluate:7.2f} s/round (algorithm {train:.2f} s, "
                      f"evaluation {evaluate:.2f} s; median of {args.rounds} rounds)", flush=True)


if __name__ == "__main__":
    main()
