"""Runs to compare, read from run directories or a sweep directory, grouped into configurations.

A configuration is a run's sweep parameters without ``seed`` (a sweep directory) or, for plain run directories,
the config keys in which the runs differ, again without ``seed``.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError
from lit_fl.run_dir import RunDir, printable
from lit_fl.suite.document_schema import Seed, read_as
from lit_fl.suite.manifest import Manifest, is_sweep_dir
from lit_fl.suite.paper import Paper, load_paper, paper_row
from lit_fl.suite.plan import short_value
from lit_fl.tracking import BASE_COLUMNS, read_metrics
from lit_fl.tracking.metric_kind import MetricKind

#: config keys that never define a configuration
IGNORED = ("seed", "name", "run_dir", "resume", "logger", "trainer", "checkpoint_every")


@dataclass
class RunResult:
    """One run: its name, directory, parameters that define its configuration, seed and metric rows; ``complete``
    is False for a run whose summary says it stopped early (interrupted, failed) or that has none yet (running, or
    killed)."""

    name: str
    path: Path
    params: dict[str, Any]
    seed: int
    rows: list[dict[str, float]]
    complete: bool = True
    algorithm: str = ""  # the method's class name (from config.yaml), for figure titles

    def column(self, key: str) -> list[float]:
        return [row.get(key, math.nan) for row in self.rows]

    def at_target(self, metric: str, target: float, column: str) -> float:
        """``column`` (``round``, ``comm_mb``, ``virtual_s``) at the first row whose ``metric`` reached ``target``
        (``>=``; ``<=`` for a loss); NaN when none did, or the row has no such column."""
        kind = MetricKind(metric)
        for row in self.rows:
            if kind.reaches(row.get(metric, math.nan), target):
                return float(row.get(column, math.nan))
        return math.nan


@dataclass
class Group:
    """The runs of one configuration (one per seed)."""

    label: str
    params: dict[str, Any]
    runs: list[RunResult] = field(default_factory=list)

    @property
    def counted(self) -> list[RunResult]:
        """The runs its statistics and curves are of: the completed ones (all of them when none completed, which the
        table and the dashboard then say)."""
        return [run for run in self.runs if run.complete] or list(self.runs)

    @property
    def unfinished(self) -> list[RunResult]:
        return [run for run in self.runs if not run.complete]


@dataclass(frozen=True)
class LeftOut:
    """A run folder that is not in the comparison, and why."""

    name: str
    reason: str


@dataclass
class Comparison:
    title: str
    groups: list[Group]
    paper: Paper | None
    metric: str
    source: Path
    left_out: list[LeftOut] = field(default_factory=list)
    #: links in a folder of runs that were not followed (a loop, a link leaving the folder), also in ``left_out``
    skipped: list[LeftOut] = field(default_factory=list)

    @property
    def runs(self) -> list[RunResult]:
        return [run for group in self.groups for run in group.runs]

    @property
    def private(self) -> bool:
        """Whether a run is differentially private (its metrics.csv has ``epsilon``): the tables then show the
        epsilon spent beside the accuracy and the figures draw accuracy against it."""
        return any("epsilon" in row for run in self.runs for row in run.rows[-1:])

    @property
    def timed(self) -> bool:
        """Whether a run is on the virtual clock (its metrics.csv has ``virtual_s``): the figures then draw every
        metric against virtual time too."""
        return any("virtual_s" in row for run in self.runs for row in run.rows[-1:])


def load_comparison(paths: list[Path], metric: str | None = None) -> Comparison:
    """Everything to compare under ``paths`` (one sweep directory, or run directories and folders of them); a
    :class:`ConfigError` line when there is nothing to compare or a file is damaged. Folders that hold no run yet
    are left out and named (:attr:`Comparison.left_out`)."""
    sweep = len(paths) == 1 and is_sweep_dir(paths[0])
    comparison = _from_sweep(paths[0], metric) if sweep else _from_run_dirs(paths, metric)
    if not comparison.runs:
        first = " (run the sweep first: lit-fl sweep ...)" if sweep else ""
        raise ConfigError(f"compare: no runs with metrics in {', '.join(map(str, paths))}{first}")
    _check_metric(comparison)
    return comparison


def _from_run_dirs(paths: list[Path], metric: str | None) -> Comparison:
    runs: list[RunResult] = []
    left_out: list[LeftOut] = []
    skipped: list[LeftOut] = []
    given: dict[str, Path] = {}
    for path in paths:  # a folder given twice, or by a link and by name, is read once
        given.setdefault(os.path.realpath(path), path)
    for path in given.values():
        if not path.is_dir():
            what = "is not a folder (give run directories or a sweep directory)" if path.exists() else "does not exist"
            raise ConfigError(f"compare: {path} {what}")
        candidates = [path] if RunDir(path).has_metrics() else _run_folders(path, skipped)
        if not candidates:  # a folder given by name is never dropped without a word
            left_out.append(LeftOut(printable(path), "no metrics.csv and no run folders in it"))
        for candidate in candidates:
            if not RunDir(candidate).has_metrics():
                left_out.append(LeftOut(printable(candidate), "no metrics.csv (not a run, or not one evaluated round)"))
                continue
            run = _plain_run(candidate)
            if run.rows:
                runs.append(run)
            else:
                left_out.append(LeftOut(printable(candidate), "no evaluated round in metrics.csv yet"))
    _keep_differing(runs)
    title = ", ".join(printable(p.name) for p in paths)
    return Comparison(title, _group(runs), None, metric or "reported_acc", paths[0], skipped + left_out, skipped)


def _run_folders(path: Path, skipped: list[LeftOut]) -> list[Path]:
    """The folders in ``path`` by real path: a link to a folder inside ``path`` (``latest``) is that folder, counted
    once under its own name; a link that cannot be followed (a loop, a broken link) or that leaves ``path`` (to
    ``/proc``) is added to ``skipped`` with why."""
    home = Path(os.path.realpath(path))
    found: dict[Path, Path] = {}
    for entry in sorted(path.iterdir(), key=lambda p: (p.is_symlink(), p.name)):  # a folder before a link to it
        try:
            real = Path(os.path.realpath(entry, strict=True))
        except OSError as err:  # ELOOP, or a broken link (a plain entry that vanished meanwhile: nothing to say)
            if entry.is_symlink():
                skipped.append(LeftOut(printable(entry), f"a link that cannot be followed ({err.strerror})"))
            continue
        if entry.is_symlink() and home not in real.parents:
            skipped.append(LeftOut(printable(entry), f"a link leaving {printable(path)} (to {printable(real)})"))
        elif real.is_dir():
            found.setdefault(real, entry)
    return sorted(found.values())


def _from_sweep(sweep_dir: Path, metric: str | None) -> Comparison:
    manifest = Manifest.load(sweep_dir)
    paper = load_paper(sweep_dir / "paper.yaml") if (sweep_dir / "paper.yaml").is_file() else None
    runs, left_out = [], []
    for entry in manifest.runs:
        run_dir = RunDir(sweep_dir / entry.run_dir)
        rows = read_metrics(run_dir.metrics) if run_dir.has_metrics() else []
        if not rows:
            left_out.append(LeftOut(entry.name, f"{entry.status}: no evaluated round yet"))
            continue
        seed = read_as(Seed, entry.params.get("seed", 0), f"{sweep_dir / 'manifest.json'}: run {entry.name}: seed")
        runs.append(RunResult(entry.name, run_dir.path, dict(entry.configuration), seed, rows,
                              run_dir.status() == "completed", algorithm_of(run_dir.read_config())))
    name = metric or (paper.metric if paper else manifest.metric.get("name", "reported_acc"))
    return Comparison(manifest.sweep, _group(runs), paper, name, sweep_dir, left_out)


def _check_metric(comparison: Comparison) -> None:
    """The table's metric is a column of the runs (a misspelt ``--metric`` is refused, not shown as empty), and of
    every one of them when every run writes it (a column of ``BASE_COLUMNS``: a run whose ``metrics.csv`` lacks it
    is damaged, and named). A metric only some methods report (``server_acc/global``: FedMD has no server model)
    shows "-" for the others, which a claim reads on their own column (``worse_metric``)."""
    columns = sorted({key for run in comparison.runs for key in run.rows[0]})
    older = "; a run written before lit-fl wrote reported_acc: name a column with --metric" \
        if comparison.metric == "reported_acc" else ""
    if comparison.metric not in columns:
        raise ConfigError(f"--metric: {comparison.metric!r} is not a column of these runs{older}; allowed: "
                          f"{', '.join(c for c in columns if c != 'round')}")
    for run in comparison.runs:
        if comparison.metric in BASE_COLUMNS and comparison.metric not in run.rows[0]:
            raise ConfigError(f"{run.path / 'metrics.csv'}: no {comparison.metric} column, the metric compared{older}; "
                              f"it has {', '.join(run.rows[0])}")


def _plain_run(path: Path) -> RunResult:
    run_dir = RunDir(path)
    config = run_dir.read_config()
    flat = {k: v for k, v in _flatten(config).items() if k.split(".")[0] not in IGNORED}
    seed = read_as(Seed, config.get("seed", 0), f"{run_dir.config}: seed")
    return RunResult(printable(path.name), path, flat, seed, read_metrics(run_dir.metrics),
                     run_dir.status() == "completed", algorithm_of(config))


def algorithm_of(config: dict[str, Any]) -> str:
    """The class name of a run's algorithm (``DFML``), empty when its config does not say."""
    algorithm = config.get("algorithm")
    class_path = algorithm.get("class_path", "") if isinstance(algorithm, dict) else ""
    return str(class_path).rsplit(".", 1)[-1]


def _keep_differing(runs: list[RunResult]) -> None:
    keys = sorted({k for r in runs for k in r.params})
    differing = [k for k in keys if len({json.dumps(r.params.get(k), sort_keys=True, default=str) for r in runs}) > 1]
    for run in runs:
        run.params = {k: run.params.get(k) for k in differing}


def _group(runs: list[RunResult]) -> list[Group]:
    """The runs by configuration, each group labelled by what sets it apart from the others (:func:`labels`)."""
    groups: dict[str, Group] = {}
    for run in runs:
        key = json.dumps(run.params, sort_keys=True, default=str)
        if key not in groups:
            groups[key] = Group(run.name, dict(run.params))
        groups[key].runs.append(run)
    for group, text in zip(groups.values(), labels([g.params for g in groups.values()])):
        group.label = text or group.label
    return list(groups.values())


#: key names too generic to stand alone in a label (``topology.name=ring``, not ``name=ring``)
GENERIC_NAMES = frozenset({"name", "type", "kind", "mode", "dataset", "root", "options"})


def labels(configurations: list[dict[str, Any]]) -> list[str]:
    """One short label per configuration: ``key=value`` of only the settings in which the configurations differ
    (a section's settings one by one: ``partition=dirichlet, beta=0.1``, never its bare values). A setting only
    some configurations have (a method's own argument) sets apart only those that have it with different values;
    where that leaves two configurations alike, the settings they have or lack tell them apart too."""
    leaves = [_leaves(c) for c in configurations]
    keys = list(dict.fromkeys(k for leaf in leaves for k in leaf))

    def differing(with_unset: bool) -> list[str]:
        out = []
        for key in keys:
            values = [json.dumps(leaf.get(key), sort_keys=True, default=str) for leaf in leaves
                      if with_unset or leaf.get(key) is not None]
            if len(set(values)) > 1:
                out.append(key)
        return out

    shown = differing(with_unset=False)
    texts = [label({k: leaf.get(k) for k in shown}) for leaf in leaves]
    if len(set(texts)) < len(texts):
        shown = differing(with_unset=True)
        texts = [label({k: leaf.get(k) for k in shown}) for leaf in leaves]
    return texts


def label(params: dict[str, Any]) -> str:
    """``dfml, partition=dirichlet, beta=0.1, alpha_max=0.8``: a configuration in short (config files by stem, class
    paths by class name, every other setting as ``name=value`` by its last name, or its last two where the last is
    generic or shared; a section's settings one by one; a key one configuration leaves unset, ``None``, is left out:
    the others' values tell them apart)."""
    parts = []
    params = _leaves(params)
    last_names = [k.split(".")[-1] for k in params]
    for key, value in params.items():
        if value is None:
            continue
        name = key.split(".")[-1]
        if name in GENERIC_NAMES or last_names.count(name) > 1:
            name = ".".join(key.split(".")[-2:])
        if key == "config" or (isinstance(value, str) and value.endswith((".yaml", ".yml"))):
            parts.append(short_value(value))
        elif name == "class_path" and isinstance(value, str):
            parts.append(value.rsplit(".", 1)[-1])
        elif isinstance(value, str) and value.startswith("lit_fl.algorithms."):
            parts.append(value.rsplit(".", 1)[-1])
        else:
            parts.append(f"{name}={short_value(value)}")
    return ", ".join(parts)


def _leaves(params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with every section (a mapping value) spread into dotted keys, ``init_args`` left out of them (a
    sweep's ``data: {partition: iid}`` is ``data.partition``, its ``algorithm: {class_path, init_args: {lr}}``
    ``algorithm.class_path`` and ``algorithm.lr``)."""
    out: dict[str, Any] = {}
    for key, value in params.items():
        if isinstance(value, dict) and value:
            out.update(_leaves({f"{key}.{k}".replace(".init_args", ""): v for k, v in value.items()}))
        else:
            out[key] = value
    return out


def paper_value_of(comparison: Comparison, group: Group) -> float | None:
    row = paper_row(comparison.paper, group.params, comparison.metric)
    return None if row is None else row.value


def _flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in d.items():
        name = f"{prefix}{key}".replace(".init_args", "")
        if isinstance(value, dict) and value and key != "options":
            out.update(_flatten(value, f"{name}."))
        else:
            out[name] = value
    return out
