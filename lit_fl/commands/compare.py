"""``lit-fl compare RUN_DIR... | SWEEP_DIR``: the dashboard (HTML), figures (PNG) and results table (Markdown,
CSV, LaTeX) of a set of runs, seeds pooled per configuration, the paper's numbers beside ours.

    lit-fl compare runs/sweeps/mnist5k_label_skew --target 0.8
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path

from lit_fl.errors import ConfigError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lit-fl compare",
        description="Compare runs: a self-contained HTML dashboard (curves against round and MB, mean ± std over "
        "seeds), PNG figures and a results table (final/best accuracy, rounds and MB to a target, paper numbers).",
    )
    p.add_argument("paths", nargs="+", type=Path, help="a sweep directory (runs/sweeps/NAME), or run directories")
    p.add_argument("--out", type=Path, default=None, help="output folder (default: SWEEP_DIR/compare or ./compare)")
    p.add_argument("--target", type=float, default=0.8,
                   help="target of --metric for rounds/MB to target (0.8; an accuracy in (0, 1], a loss is reached "
                        "from above)")
    p.add_argument("--metric", default=None, help="table metric (default: the sweep's, else reported_acc)")
    return p


def main(argv: Sequence[str]) -> int:
    args = parser().parse_args(list(argv))
    try:
        return compare(args)
    except ConfigError as err:
        print(f"lit-fl: error: {err}", file=sys.stderr)
        return 2


def compare(args: argparse.Namespace) -> int:
    from lit_fl.constraints import Bounds
    from lit_fl.io import atomic_write_text
    from lit_fl.suite.compare.claims import evaluate_claims
    from lit_fl.suite.compare.dashboard import write_dashboard
    from lit_fl.suite.compare.figures import write_figures
    from lit_fl.suite.compare.results import load_comparison
    from lit_fl.suite.compare.table import (
        claims_html,
        claims_markdown,
        left_out_html,
        left_out_markdown,
        to_csv,
        to_html,
        to_latex,
        to_markdown,
    )
    from lit_fl.suite.manifest import is_sweep_dir
    from lit_fl.tracking.metric_kind import MetricKind
    from lit_fl.validation import check_output_folder

    if not math.isfinite(args.target):
        raise ConfigError(f"--target must be a finite number, got {args.target}")
    out = args.out or (args.paths[0] / "compare" if is_sweep_dir(args.paths[0]) else Path("compare"))
    check_output_folder(out, "--out")  # before anything is read or computed
    comparison = load_comparison(args.paths, args.metric)
    for item in comparison.skipped:
        print(f"lit-fl: compare: skipped {item.name}: {item.reason}", file=sys.stderr)
    if MetricKind(comparison.metric).is_accuracy:
        Bounds(0, 1, low_open=True, note=f"({comparison.metric} is an accuracy)").check("--target", args.target)
    claims = evaluate_claims(comparison)  # the paper's claims, paired by seed (before anything is written)
    out.mkdir(parents=True, exist_ok=True)
    markdown = to_markdown(comparison, args.target) + claims_markdown(claims) + left_out_markdown(comparison)
    atomic_write_text(out / "results.md", markdown)
    atomic_write_text(out / "results.csv", to_csv(comparison, args.target))
    atomic_write_text(out / "results.tex", to_latex(comparison, args.target))
    tables = to_html(comparison, args.target) + claims_html(claims) + left_out_html(comparison)
    write_dashboard(comparison, tables, out / "dashboard.html")
    figures = write_figures(comparison, out / "figures")
    print(f"{comparison.title}: {len(comparison.groups)} configurations, {len(comparison.runs)} runs")
    if comparison.paper is not None:
        print(f"paper numbers: {comparison.paper.source}")
    print(markdown, end="")
    print(f"-> {out / 'dashboard.html'}, {out / 'results.md'} (.csv, .tex), {len(figures)} figures in "
          f"{out / 'figures'}")
    return 0
