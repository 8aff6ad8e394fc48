"""``lit-fl sweep SWEEP.yaml``: run a W&B sweep file with no W&B server, or hand it to W&B (``--wandb``).

    lit-fl sweep sweeps/mnist5k_label_skew.yaml --jobs 2          # every run, two at a time
    lit-fl sweep sweeps/mnist5k_label_skew.yaml --dry-run         # the runs and their command lines
    lit-fl sweep mnist5k_label_skew.yaml --rounds 5               # an override for every run
    lit-fl compare runs/sweeps/mnist5k_label_skew                  # then: dashboard, figures, table
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from lit_fl import stop_signals
from lit_fl.errors import ConfigError


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="lit-fl sweep",
        description="Run every run of a W&B sweep file locally (grid or random), under runs/sweeps/NAME/, "
        "skipping completed runs and resuming interrupted ones; --wandb registers it with W&B and starts an "
        "agent instead. Any further --key value is an override for every run (e.g. --rounds 5).",
    )
    p.add_argument("sweep", help="sweep file (a path, or the name of a shipped sweep: lit-fl configs sweeps)")
    p.add_argument("--dry-run", action="store_true", help="list the runs and their commands; run nothing")
    p.add_argument("--jobs", type=int, default=1, help="runs at once, each its own process (default 1)")
    p.add_argument("--count", type=int, default=None, help="number of runs of a random sweep (or cap a grid)")
    p.add_argument("--seed", type=int, default=0, help="seed of a random sweep's draws (default 0)")
    p.add_argument("--run_dir", default="runs", help="root of run directories (default runs)")
    p.add_argument("--wandb", action="store_true", help="register the sweep with W&B and run an agent")
    p.add_argument("--project", default="lit-fl", help="W&B project for --wandb (default lit-fl)")
    p.add_argument("--entity", default=None, help="W&B entity for --wandb")
    return p


def main(argv: Sequence[str]) -> int:
    args, rest = parser().parse_known_args(list(argv))
    try:
        return sweep(args, rest)
    except ConfigError as err:
        print(f"lit-fl: error: {err}", file=sys.stderr)
        return 2


def sweep(args: argparse.Namespace, rest: list[str]) -> int:
    from lit_fl.constraints import PositiveInt, bounds_of
    from lit_fl.suite.manifest import Manifest, is_sweep_dir
    from lit_fl.suite.plan import check_commands, check_paper, normalise_overrides, plan_sweep
    from lit_fl.suite.sweep_file import load_sweep_file
    from lit_fl.validation import check_output_folder

    for option, value in (("--jobs", args.jobs), ("--count", args.count)):
        bounds_of(PositiveInt).check(option, value)  # type: ignore[union-attr]
    check_output_folder(Path(args.run_dir), "--run_dir")
    overrides = normalise_overrides(rest)
    sweep_file = load_sweep_file(args.sweep)
    if args.wandb:
        return run_wandb_agent(sweep_file.config, overrides, args.project, args.entity, args.count)
    sweep_dir = Path(args.run_dir) / "sweeps" / sweep_file.name
    if args.dry_run:
        return dry_run(sweep_file, sweep_dir, overrides, args.count, args.seed)
    manifest = plan_sweep(sweep_file, sweep_dir, overrides, args.count, args.seed)
    check_commands(manifest)
    check_paper(sweep_file, manifest)
    if is_sweep_dir(sweep_dir):
        manifest = _continue(Manifest.load(sweep_dir), manifest, sweep_dir)
    from lit_fl.run_dir import writer_lock
    from lit_fl.suite.runner import run_sweep

    with writer_lock(sweep_dir, "sweep", "give another --run_dir"):  # one `lit-fl sweep` per sweep folder
        _write_sweep_dir(sweep_dir, sweep_file, manifest)
        with stop_signals.safe_points():  # planning stops at once; running runs finish their round
            rc = run_sweep(sweep_dir, manifest, args.jobs)
    completed = sum(run.status == "completed" for run in manifest.runs)
    print(f"sweep {manifest.sweep}: {completed}/{len(manifest.runs)} runs completed -> {sweep_dir}")
    if rc == 0:
        print(f"compare them: lit-fl compare {sweep_dir}")
    elif rc == 75:
        print(f"continue it: lit-fl sweep {args.sweep} {' '.join(rest)}".rstrip())
    return rc


def dry_run(sweep_file, sweep_dir: Path, overrides: list[str], count: int | None, seed: int) -> int:  # noqa: ANN001
    """``--dry-run``: the number of runs at once, then each run's command line as it is planned and checked (a grid
    of 10^6 runs prints its first lines within seconds); the paper's numbers are checked against the runs at the
    end. A sweep folder that exists already lists its saved runs, when they are the ones planned."""
    from lit_fl.suite.engine import grid_size
    from lit_fl.suite.manifest import Manifest, is_sweep_dir
    from lit_fl.suite.plan import check_commands, check_paper, checked_runs, plan_sweep, planned_runs

    size = grid_size(sweep_file)
    size = min(size, count) if size is not None and count else (size or count)
    if size:
        print(f"planning {size:,} runs of {sweep_file.name} ({sweep_file.method}) ...", file=sys.stderr, flush=True)
    if is_sweep_dir(sweep_dir):
        manifest = plan_sweep(sweep_file, sweep_dir, overrides, count, seed)
        check_commands(manifest)
        check_paper(sweep_file, manifest)
        runs = iter(_continue(Manifest.load(sweep_dir), manifest, sweep_dir).runs)
    else:
        runs = checked_runs(planned_runs(sweep_file, sweep_dir, overrides, count, seed), str(sweep_file.path))
    kept: list = []  # the runs, kept only where paper numbers must be checked against them
    keep = sweep_file.paper_path.is_file()
    planned = 0
    write = sys.stdout.write
    for run in runs:  # streamed, a line at a time
        write(f"{run.name}: {' '.join(run.command)}\n")
        planned += 1
        if keep:
            kept.append(run)
    if keep:
        check_paper(sweep_file, Manifest(sweep_file.name, sweep_file.method, sweep_file.metric, str(sweep_file.path),
                                         list(overrides), kept))
    print(f"{planned} runs ({sweep_file.method}) -> {sweep_dir}")
    return 0


def _continue(saved, planned, sweep_dir: Path):  # noqa: ANN001, ANN202
    """The saved manifest when it holds the same runs (run again: skip and resume), else a one-line refusal."""
    same = saved.overrides == planned.overrides and [r.params for r in saved.runs] == [r.params for r in planned.runs]
    if not same:
        raise ConfigError(
            f"sweep: {sweep_dir} holds a sweep with other runs or overrides; give another --run_dir or remove it"
        )
    return saved


def _write_sweep_dir(sweep_dir: Path, sweep_file, manifest) -> None:  # noqa: ANN001
    from lit_fl.io import atomic_write_text
    from lit_fl.strict_yaml import YAML_FILE

    sweep_dir.mkdir(parents=True, exist_ok=True)
    atomic_write_text(sweep_dir / "sweep.yaml", YAML_FILE.read_text(sweep_file.path))
    if sweep_file.paper_path.is_file():
        atomic_write_text(sweep_dir / "paper.yaml", YAML_FILE.read_text(sweep_file.paper_path))
    manifest.save(sweep_dir)


def run_wandb_agent(config: dict, overrides: list[str], project: str, entity: str | None, count: int | None) -> int:
    """Register the sweep with W&B (``wandb.sweep``) and run an agent in this process (``wandb.agent``); the
    agent builds each run's command from the file's ``command`` plus the overrides."""
    import wandb

    from lit_fl.suite.sweep_file import COMMAND

    config = dict(config)
    config["command"] = [*(config.get("command") or COMMAND), *overrides]
    sweep_id = wandb.sweep(config, project=project, entity=entity)
    wandb.agent(sweep_id, project=project, entity=entity, count=count)
    return 0
