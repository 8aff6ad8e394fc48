"""``lit-fl fit``: run one experiment from a config.

    lit-fl fit --config experiments/quickstart.yaml [--rounds 5] [--algorithm.alpha_max 0.8]
    lit-fl fit --resume runs/NAME [--rounds 40]

Configs follow jsonargparse/LightningCLI conventions: nested keys (``data.beta``), ``class_path`` /
``init_args`` for the algorithm, ``--print_config`` to see the fully resolved config. A bad key, type or
value exits with status 2 and one line naming the key and what is allowed, before anything is written.
"""

from __future__ import annotations

import errno
import math
import sys
import traceback
from argparse import ArgumentError
from collections.abc import Sequence
from typing import Any

from jsonargparse import ArgumentParser, Namespace

from lit_fl import stop_signals
from lit_fl.algorithms.registry import algorithm_class_paths
from lit_fl.cli_errors import one_line
from lit_fl.errors import ConfigError, DatasetNotFoundError
from lit_fl.experiment import Experiment
from lit_fl.fit_config import (  # the config's parsing (importable from here too, as before)
    config_keys,
    fit_parser,
    prepare,
    resolve_config_files,
    with_run_config,
)


def __getattr__(name: str) -> Any:
    """``ALGORITHMS``: every registered algorithm's class path, as registered now."""
    if name == "ALGORITHMS":
        return algorithm_class_paths()
    raise AttributeError(name)


#: exit codes of ``lit-fl fit``
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_INTERRUPTED, EXIT_ABORTED = 0, 1, 2, 75, 130
#: a write that failed for want of room (full disk, quota): one line naming the file, not a traceback
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)


def fit(cfg: Namespace, parser: ArgumentParser) -> dict[str, Any]:
    experiment, resolved, resume = prepare(cfg, parser)
    return experiment.fit(resolved, resume=resume)


def main(argv: Sequence[str]) -> int:
    """``lit-fl fit ARGV``. Exit status: 0 completed, 75 interrupted (Ctrl-C, SIGTERM, SIGUSR1: resume it), 1 failed
    (a crash: the traceback is printed, summary.json says failed, the last checkpoint stays), 2 bad input (one
    line, nothing written), 130 aborted (a second Ctrl-C)."""
    from lit_fl.user_code import failed_user_import

    parser = fit_parser()  # a stop signal before the run: at once, exit 75 (lit_fl.cli.STOPPED_BEFORE_THE_WORK)
    try:
        cfg = parser.parse_args(with_run_config(resolve_config_files(argv)))
        experiment, resolved, resume = prepare(cfg, parser)
    except (ArgumentError, ValueError, TypeError, DatasetNotFoundError) as err:  # the config, by construction
        return _bad_input(err)
    except Exception as err:  # a user's module named by algorithm.class_path raised while being imported
        if (cause := failed_user_import(err)) is None:
            raise
        print(f"lit-fl: error: algorithm.class_path: cannot load it: {cause}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        with stop_signals.safe_points():  # the run stops after its running round, with a checkpoint
            summary = experiment.fit(resolved, resume=resume)
    except (ConfigError, DatasetNotFoundError) as err:  # refused while building, before anything was written
        return _bad_input(err)
    except KeyboardInterrupt:
        print(f"lit-fl: aborted; {_what_stays(experiment)}", file=sys.stderr)
        return EXIT_ABORTED
    except OSError as err:
        if err.errno not in DISK_FULL or err.filename is None:
            raise
        print(f"lit-fl: error: the run failed: {err.strerror}: {err.filename}; {_what_stays(experiment)}",
              file=sys.stderr)
        return EXIT_FAILED
    except Exception as err:  # noqa: BLE001 - a bug or a runtime failure: full evidence, never a config error
        traceback.print_exc()
        print(f"lit-fl: error: the run failed ({type(err).__name__}); {_what_stays(experiment)}", file=sys.stderr)
        return EXIT_FAILED
    if "rank" in summary:  # processes other than rank 0 print nothing and exit 0 once their rounds are done: a
        return EXIT_OK  # launcher kills the whole group when one process exits non-zero, rank 0 mid-write included
    _print_summary(summary)
    return {"completed": EXIT_OK, "interrupted": EXIT_INTERRUPTED}.get(summary["status"], EXIT_FAILED)


def _what_stays(experiment: Experiment) -> str:
    """What a failed or aborted run left, as it is on disk (never a checkpoint or summary that was not written)."""
    from lit_fl.run_dir import RunDir

    if experiment.run_path is None or not experiment.run_path.exists():
        return "nothing was written"
    run = RunDir(experiment.run_path)
    said = ["summary.json records it"] if run.status() in ("failed", "interrupted") else []
    if run.has_checkpoint():
        said.append(f"the last checkpoint stays: continue with lit-fl fit --resume {run.path}")
    else:
        again = "lit-fl fit" if run.config.is_file() else "the same command with"  # config.yaml: its own config
        again = f"{again} --resume {run.path}"
        said.append(f"no checkpoint was written yet: {again} starts it again from round 1")
    return "; ".join(said)


def _bad_input(err: BaseException) -> int:
    print(f"lit-fl: error: {one_line(err, config_keys(), algorithm_class_paths())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def megabytes(mb: float) -> str:
    """Megabytes for a person: three significant digits (``0.042``, ``1.23``, ``45.6``), whole megabytes from 100
    on (``1,234``), ``0`` for nothing sent."""
    if mb == 0 or not math.isfinite(mb):
        return f"{mb:g}"
    if abs(mb) >= 100:
        return f"{mb:,.0f}"
    return f"{mb:.3g}" if abs(mb) >= 1e-4 else f"{mb:.2e}"


def _number(value: Any) -> float:
    """A summary value as a float (NaN for none: summary.json writes NaN as null)."""
    return float("nan") if value is None else float(value)


def _print_summary(summary: dict[str, Any]) -> None:
    final = summary.get("final", {})
    best = summary.get("best", {})
    reports = summary.get("reports", "global_acc")
    if final:
        last = "" if final.get("round") == summary["rounds_completed"] else f" at round {final.get('round')}"
        accuracy = (f"reported_acc {_number(final.get('reported_acc')):.4f}{last} (best "
                    f"{_number(best.get('reported_acc')):.4f} at round {best.get('round', '-')}; {reports})")
    else:  # eval_every above the rounds run: no round was evaluated
        accuracy = "not evaluated (no round was a multiple of eval_every)"
    print(
        f"{summary['status']}: {summary['rounds_completed']}/{summary['rounds']} rounds, {accuracy}, "
        f"{megabytes(summary['comm_mb'])} MB sent, {summary['wall_s']:.1f}s -> {summary['run_dir']}"
    )
    if summary["status"] == "interrupted":
        stop = summary.get("stop_signal", "a stop request")
        print(f"lit-fl: stopped by {stop} after round {summary['rounds_completed']} with a checkpoint; continue it: "
              f"lit-fl fit --resume {summary['run_dir']}", file=sys.stderr)
