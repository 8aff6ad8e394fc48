"""``lit-fl``: the command line, a thin dispatcher over one module per subcommand.

    lit-fl fit --config experiments/quickstart.yaml [--rounds 5] [--algorithm.alpha_max 0.8]
    lit-fl fit --resume runs/NAME

Only the chosen subcommand's module is imported, so ``lit-fl --help`` is instant and a command that does not
train never imports torch or Lightning.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence
from typing import Any

from lit_fl import stop_signals

#: subcommand -> (module with ``main(argv) -> int``, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "fit": ("lit_fl.commands.fit", "Run an experiment from a config file and write a run directory."),
    "sweep": ("lit_fl.commands.sweep", "Run a W&B sweep file locally (or with W&B: --wandb)."),
    "compare": ("lit_fl.commands.compare", "Dashboard, figures and results table of runs or a sweep."),
    "partition": ("lit_fl.commands.partition", "Plot a config's client x class partition (DFML Fig. 10)."),
    "configs": ("lit_fl.commands.configs", "List the experiment and sweep configs shipped with lit-fl."),
}


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    with stop_signals.handled():  # from the first instruction; blocks with safe points say so (a run, a sweep's runs)
        try:
            return _dispatch(args)
        except stop_signals.Stopped as stop:  # outside a block with safe points: the command ends at once
            return _stopped(args[0] if args else "", stop)
        except KeyboardInterrupt:  # a second signal: abort at once, one line, never a traceback
            print("lit-fl: aborted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `lit-fl ... | head`: the reader has what it wanted
            _silence_stdout()
            return 0


#: commands whose stop before their work began is "interrupted, run it again" (exit 75, what a SLURM requeue
#: recipe checks) rather than the shell's status for the signal
STOPPED_BEFORE_THE_WORK: dict[str, str] = {
    "fit": "stopped by {name} before the run started; nothing was written (run the same command again)",
}


def _stopped(command: str, stop: stop_signals.Stopped) -> int:
    if command in STOPPED_BEFORE_THE_WORK:
        print(f"lit-fl: {STOPPED_BEFORE_THE_WORK[command].format(name=stop.name)}", file=sys.stderr)
        return 75
    print(f"lit-fl: stopped ({stop.name})", file=sys.stderr)
    return stop.status


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(_usage())
        return 0 if argv else 2
    command, rest = argv[0], argv[1:]
    if command not in COMMANDS:
        print(f"lit-fl: error: unknown command {command!r}; allowed: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    from lit_fl.user_code import working_directory_importable

    working_directory_importable()  # a config may name the user's own code (gossip.Gossip), as with python -m
    module = importlib.import_module(COMMANDS[command][0])
    return int(module.main(rest))


def _silence_stdout() -> None:
    """Point stdout at /dev/null so that the interpreter's final flush into the closed pipe stays quiet."""
    import os

    try:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except (OSError, ValueError):  # stdout is not a file (captured in-process): nothing will be flushed to a pipe
        pass


def _usage() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = ["usage: lit-fl COMMAND [ARGS]  (lit-fl COMMAND --help for its options)", "",
             "Decentralized, model-heterogeneous federated learning.", "", "commands:"]
    lines += [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "\n".join(lines)


def __getattr__(name: str) -> Any:
    """``lit_fl.cli.fit_parser`` and friends, for code written against the one-module CLI."""
    if name in ("fit_parser", "ALGORITHMS", "config_keys"):
        return getattr(importlib.import_module("lit_fl.commands.fit"), name)
    raise AttributeError(name)


if __name__ == "__main__":
    sys.exit(main())
