"""How close a config's evaluation is to the math: the share of ``eval_s`` spent in the forward passes themselves.

Runs ``lit-fl fit`` in this process with every evaluation forward pass timed (``Evaluator._count``: a model over
the test set and its holders' validation samples) and its floating-point work counted once per architecture with
``torch.utils.flop_counter.FlopCounterMode``. It prints, for the whole run:

* ``eval_s`` (metrics.csv) and the seconds inside forward passes, with their share: what is left is the
  bookkeeping that finds the distinct weights (fingerprints, planning, accuracy arithmetic);
* passes and images evaluated, and the GFLOP/s the passes ran at;
* the rate of a dense convolution on this machine (3x3, 256 -> 256 channels, 16 x 16, batch 64, channels-last,
  no padding: the best case of the same oneDNN kernels), the practical ceiling of that number. FLOPs are
  ``FlopCounterMode``'s nominal count (a padded 5x5 tap counts although it multiplies a zero).

When the share is close to 1 and the passes run near the matmul rate, evaluation cannot get cheaper without
changing its numbers (a lower precision, or skipping models whose accuracy is reported).

    python benchmarks/eval_floor.py [--config experiments/quickstart.yaml] [--rounds 20] [--repeats 3]
"""

from __future__ import annotations

import argparse
import csv
import statistics
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from lit_fl.commands import fit
from lit_fl.federation import evaluation

ROOT = Path(__file__).resolve().parents[1]


class ForwardTimer:
    """Wraps ``Evaluator._count``: seconds, passes, images and FLOPs of the evaluation forward passes."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.passes = self.images = 0
        self.flops = 0.0
        self._per_image: dict[tuple, float] = {}
        self._original = evaluation.Evaluator._count

    def __enter__(self) -> ForwardTimer:
        timer = self

        def timed(evaluator: evaluation.Evaluator, work: evaluation._Pass, fed) -> list[int]:  # noqa: ANN001
            start = time.perf_counter()
            counts = timer._original(evaluator, work, fed)
            timer.seconds += time.perf_counter() - start
            images = (len(fed.data.test_y) if work.test else 0) + sum(len(c.val_idx) for c in work.val_clients)
            timer.passes += 1
            timer.images += images
            timer.flops += images * timer.flops_per_image(work.model, fed.data.test_x[:1])
            return counts

        evaluation.Evaluator._count = timed  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        evaluation.Evaluator._count = self._original  # type: ignore[method-assign]

    def flops_per_image(self, model: torch.nn.Module, one: torch.Tensor) -> float:
        """Forward FLOPs of one image (counted once per architecture, outside the timed pass)."""
        key = (type(model).__qualname__, *[tuple(p.shape) for p in model.parameters()])
        if key not in self._per_image:
            was_training = model.training
            model.eval()
            with torch.inference_mode(), FlopCounterMode(display=False) as counter:
                model(one)
            model.train(was_training)
            self._per_image[key] = float(counter.get_total_flops())
        return self._per_image[key]


@torch.inference_mode()
def dense_conv_gflops(repeats: int = 10) -> float:
    conv = torch.nn.Conv2d(256, 256, 3).eval().to(memory_format=torch.channels_last)
    x = torch.randn(64, 256, 16, 16).contiguous(memory_format=torch.channels_last)
    with FlopCounterMode(display=False) as counter:
        conv(x)
    best = min(_seconds(lambda: conv(x)) for _ in range(repeats))
    return counter.get_total_flops() / best / 1e9


def _seconds(fn) -> float:  # noqa: ANN001
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def one_run(config: Path, rounds: int, workdir: Path) -> tuple[float, ForwardTimer]:
    name = f"floor-{time.time_ns()}"
    with ForwardTimer() as timer:
        code = fit.main(["--config", str(config), "--rounds", str(rounds), "--run_dir", str(workdir), "--name", name,
                         "--logger.wandb", "false", "--logger.progress", "false"])
    if code != 0:
        raise SystemExit(f"lit-fl fit exited {code}")
    with (workdir / name / "metrics.csv").open() as f:
        eval_s = sum(float(row["eval_s"]) for row in csv.DictReader(f))
    return eval_s, timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default="experiments/quickstart.yaml", help="relative to the repository root")
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    shares, rates = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for repeat in range(1, args.repeats + 1):
            eval_s, t = one_run(ROOT / args.config, args.rounds, Path(tmp))
            shares.append(t.seconds / eval_s)
            rates.append(t.flops / t.seconds / 1e9)
            print(f"repeat {repeat}: eval_s {eval_s:6.2f} s, forward passes {t.seconds:6.2f} s "
                  f"(share {shares[-1]:.3f}), {t.passes} passes, {t.images} images, {t.flops / 1e12:.2f} TFLOP, "
                  f"{rates[-1]:6.1f} GFLOP/s", flush=True)
    ceiling = dense_conv_gflops()
    print(f"forward-pass share of eval_s: min {min(shares):.3f}, median {statistics.median(shares):.3f}; "
          f"forward passes at {statistics.median(rates):.1f} GFLOP/s (median) = "
          f"{statistics.median(rates) / ceiling:.0%} of a dense float32 convolution on this machine "
          f"({ceiling:.1f} GFLOP/s, {torch.get_num_threads()} threads)")


if __name__ == "__main__":
    main()
