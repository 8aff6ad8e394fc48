"""Plan a local sweep: expand the sweep file into runs with their ``lit-fl fit`` command lines, check every
command line with ``lit-fl fit``'s own parser before anything is written."""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError, DatasetNotFoundError
from lit_fl.suite.controlled import check_controlled
from lit_fl.suite.engine import agent_args, iter_expand
from lit_fl.suite.manifest import Manifest, SweepRun
from lit_fl.suite.paper import Paper, check_matches, load_paper
from lit_fl.suite.sweep_file import SweepFile


def plan_sweep(
    sweep: SweepFile, sweep_dir: Path, overrides: list[str], count: int | None = None, seed: int = 0
) -> Manifest:
    """The manifest of a fresh sweep: one :class:`SweepRun` per expanded parameter set, every run writing its
    run directory to ``sweep_dir/runs/NAME`` in the W&B group named after the sweep."""
    runs = list(planned_runs(sweep, sweep_dir, overrides, count, seed))
    return Manifest(sweep.name, sweep.method, sweep.metric, str(sweep.path), list(overrides), runs)


def planned_runs(
    sweep: SweepFile, sweep_dir: Path, overrides: list[str], count: int | None = None, seed: int = 0
) -> Iterator[SweepRun]:
    """The runs of :func:`plan_sweep` one at a time, as the grid is walked (a dry run streams them)."""
    for i, params in enumerate(iter_expand(sweep, count, seed)):
        name = run_name(i, params)
        command = [
            "lit-fl",
            "fit",
            *agent_args(params),
            *overrides,
            f"--run_dir={sweep_dir / 'runs'}",
            f"--name={name}",
            f"--logger.group={sweep.name}",
        ]
        yield SweepRun(name=name, params=params, command=command, run_dir=f"runs/{name}")


def check_commands(manifest: Manifest) -> None:
    """Parse the runs' command lines as ``lit-fl fit`` would (:func:`checked_runs`)."""
    for _ in checked_runs(manifest.runs, manifest.file):
        pass


def checked_runs(runs: Iterable[SweepRun], file: str) -> Iterator[SweepRun]:
    """Each run once its command line passes ``lit-fl fit``'s checks (those that need no data); the first bad one is a
    :class:`ConfigError` naming the sweep ``file``, the run and the key. Linear in the runs: a run is parsed only
    when it brings a parameter value not yet checked in its context (its config files and class paths, which decide
    what the other keys may be), so a grid of 10^5 runs parses about as many command lines as it has distinct
    values."""
    from lit_fl.algorithms.registry import algorithm_class_paths
    from lit_fl.cli_errors import one_line
    from lit_fl.fit_config import config_keys, fit_parser, prepare, resolve_config_files

    parser = fit_parser()
    checked: set[tuple[Any, str, str]] = set()
    for run in runs:
        signature = _check_signature(run.params)
        if not signature <= checked:
            try:  # every check of lit-fl fit that needs no data: what a run would refuse, the plan refuses
                prepare(parser.parse_args(resolve_config_files(run.command[2:])), parser)
            except DatasetNotFoundError:  # planned on a machine without the data (a login node): each run checks it
                pass
            except Exception as err:  # lit-fl's ConfigError, or jsonargparse's own exceptions for bad keys and values
                message = str(err) if isinstance(err, ConfigError) else one_line(err, config_keys(),
                                                                                 algorithm_class_paths())
                raise ConfigError(f"sweep {file}: run {run.name}: {message}") from None
            checked |= signature
        yield run


def _check_signature(params: dict[str, Any]) -> set[tuple[Any, str, str]]:
    """``(context, key, value)`` for each parameter; the context is the run's config files and class paths."""
    context = tuple(repr(v) for k, v in params.items() if k == "config" or k.endswith("class_path"))
    return {(context, key, repr(value)) for key, value in params.items()}


def check_paper(sweep: SweepFile, manifest: Manifest) -> Paper | None:
    """The sweep's paper numbers, each row and claim matching at least one run, each claim comparing configurations
    that differ only in what it is about (:func:`lit_fl.suite.controlled.check_controlled`)."""
    if not sweep.paper_path.is_file():
        return None
    paper = load_paper(sweep.paper_path)
    check_matches(paper, sweep.paper_path, [run.params for run in manifest.runs])
    check_controlled(paper, sweep.paper_path, manifest)
    return paper


def normalise_overrides(argv: list[str]) -> list[str]:
    """``--rounds 5 --data.beta=0.1`` -> ``["--rounds=5", "--data.beta=0.1"]``. ``--resume`` and ``--name`` belong
    to the sweep, not to its runs (each run has its own folder, and a stopped sweep resumes its runs itself): refused
    in one line (``--run_dir`` is the sweep's own option)."""
    out, i = [], 0
    while i < len(argv):
        arg, option = argv[i], argv[i].split("=", 1)[0]
        value_next = "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--")
        if not arg.startswith("--"):
            problem = f"expected --key value overrides after the sweep file, got {arg!r}"
        elif option in ("--resume", "--name"):
            problem = (f"{option} is not passed to a sweep's runs: every run has its own folder, and running the "
                       "sweep again continues its stopped runs")
        elif "=" not in arg and not value_next:
            problem = f"override {arg} needs a value"
        else:
            out.append(arg if "=" in arg else f"{arg}={argv[i + 1]}")
            i += 1 if "=" in arg else 2
            continue
        raise ConfigError(f"sweep: {problem}")
    return out


def run_name(index: int, params: dict[str, Any]) -> str:
    """``003-dfml-0.1-s2``: the run's index, then its parameter values in short (file stems, no paths)."""
    slug = "-".join(_name_part(key, repr(value), value) for key, value in params.items()).strip("_")
    return f"{index:03d}-{slug}"[:100]


_UNSAFE = re.compile(r"[^A-Za-z0-9_.+-]+")
_parts: dict[tuple[str, str], str] = {}


def _name_part(key: str, shown: str, value: Any) -> str:
    """One parameter's part of a run name (computed once per distinct value: a grid repeats them)."""
    part = _parts.get((key, shown))
    if part is None:
        part = _UNSAFE.sub("_", f"s{value}" if key == "seed" else short_value(value))
        if len(_parts) < 100_000:
            _parts[(key, shown)] = part
    return part


def short_value(value: Any) -> str:
    """A parameter value in short: a config file by its stem, a section by its values (``dirichlet-0.1``)."""
    if isinstance(value, dict):
        return "-".join(short_value(v) for v in value.values())
    if isinstance(value, str) and value.endswith((".yaml", ".yml")):
        return Path(value).stem
    return str(value)
