"""The rule of a fair claim: the configurations a claim compares differ only in what the claim is about.

A claim of ``NAME.paper.yaml`` (:mod:`lit_fl.suite.paper`) compares configurations of a sweep. Everything else
that decides the numbers must be equal on both sides: data, initialisation (``models.same_init``, resolved to the
method's default where it is left out), rounds, evaluation points, models, budgets. This module resolves each
compared configuration the way ``lit-fl fit`` does (config files, the sweep's parameters, every default) and
reports every key outside the claim's subject whose value differs, unless the claim names it under ``differs``
with the reason the paper makes them differ.

The claim's subject is its ``about`` key prefixes; without one, the sweep parameters its ``better`` and ``worse``
matches name, where ``config`` (a whole experiment file, i.e. a method in its paper's setting) stands for
``algorithm`` (the method: its class and every one of its arguments). So "UA-PDFL above FedPer" may differ in the
algorithm and its training setup, never in the data or the initialisation.

Keys that never decide the numbers are not compared: where the run is written and logged, its name, the resume
folder, the checkpoint interval, the config file names themselves, the seed (a claim pairs runs by seed) and the
trainer's placement choices (accelerator, devices, nodes, strategy, fusion give the same numbers; precision is
compared).
"""

from __future__ import annotations

import functools
import importlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError
from lit_fl.suite.manifest import Manifest, SweepRun
from lit_fl.suite.paper import Claim, Paper, matches

#: keys (prefixes) that do not decide a run's numbers
NOT_COMPARED = (
    "config", "resume", "seed", "run_dir", "name", "logger", "checkpoint_every", "data.root", "data.download",
    "trainer.accelerator", "trainer.devices", "trainer.num_nodes", "trainer.strategy", "trainer.fuse",
)


@dataclass(frozen=True)
class Difference:
    """Claim ``number``'s configurations ``better`` and ``worse`` (run names) differ in ``key``: ``values``."""

    number: int
    better: str
    worse: str
    key: str
    values: tuple[Any, Any]

    def __str__(self) -> str:
        ours, theirs = (json.dumps(v, default=str) for v in self.values)
        return f"claim {self.number} ({self.better} vs {self.worse}) differs in {self.key}: {ours} vs {theirs}"


def subject(claim: Claim) -> tuple[str, ...]:
    """The key prefixes a claim is about: its ``about``, else the sweep parameters its matches name (``config``
    standing for ``algorithm``)."""
    if claim.about:
        return claim.about
    return tuple(sorted({"algorithm" if key == "config" else key for key in claim.keys}))


def under(key: str, prefixes: Iterable[str]) -> bool:
    """Whether the dotted ``key`` is one of ``prefixes`` or inside one (``algorithm.init_args.lr`` is under
    ``algorithm``)."""
    return any(key == p or key.startswith(p + ".") for p in prefixes)


def uncontrolled(paper: Paper, manifest: Manifest) -> list[Difference]:
    """Every key outside a claim's subject (and not under its ``differs``) in which two configurations the claim
    compares differ, for every claim of ``paper`` over the runs of ``manifest``."""
    resolved: dict[str, dict[str, Any]] = {}  # one resolution per configuration (its parameters but the seed)
    out: list[Difference] = []
    configurations = _configurations(manifest.runs)
    for number, claim in enumerate(paper.claims, start=1):
        allowed = (*subject(claim), *claim.differs, *NOT_COMPARED)
        for better, worse in claim_configurations(claim, configurations):
            sides = [_resolved(run, resolved) for run in (better, worse)]
            out += [Difference(number, better.name, worse.name, key, (sides[0].get(key), sides[1].get(key)))
                    for key in sorted(set(sides[0]) | set(sides[1]))
                    if not under(key, allowed) and sides[0].get(key) != sides[1].get(key)]
    return out


def check_controlled(paper: Paper | None, path: str | Path, manifest: Manifest) -> None:
    """A :class:`ConfigError` line for the first claim that compares configurations differing outside its
    subject without a note (``differs``)."""
    if paper is None or not paper.claims:
        return
    found = uncontrolled(paper, manifest)
    if found:
        first = found[0]
        claim = paper.claims[first.number - 1]
        raise ConfigError(
            f"paper numbers {path}: {first}, outside what the claim is about ({', '.join(subject(claim))}); make "
            f"them equal, or give the paper's reason under the claim's differs: {{{first.key}: why}}"
        )


def claim_configurations(claim: Claim, runs: list[SweepRun]) -> Iterator[tuple[SweepRun, SweepRun]]:
    """``(better, worse)`` for every configuration (one run each) matching ``better`` and every other matching a
    ``worse`` match with the same value of every sweep parameter the claim's matches do not name (the pairs of
    :func:`lit_fl.suite.compare.claims.claim_pairs`)."""
    keys = claim.keys
    for better in (r for r in runs if matches(claim.better, r.params)):
        for match in claim.worse:
            yield from ((better, worse) for worse in runs
                        if worse is not better and matches(match, worse.params)
                        and _context(worse.params, keys) == _context(better.params, keys))


def _configurations(runs: list[SweepRun]) -> list[SweepRun]:
    """The first run of every configuration (its sweep parameters but the seed)."""
    first: dict[str, SweepRun] = {}
    for run in runs:
        first.setdefault(_context(run.params, {"seed"}), run)
    return list(first.values())


def _context(params: dict[str, Any], keys: set[str]) -> str:
    return json.dumps({k: v for k, v in params.items() if k not in keys and k != "seed"}, sort_keys=True, default=str)


def _resolved(run: SweepRun, cache: dict[str, dict[str, Any]]) -> dict[str, Any]:
    key = _context(run.params, {"seed"})
    if key not in cache:
        cache[key] = effective_config(run.command[2:])
    return cache[key]


def effective_config(argv: list[str]) -> dict[str, Any]:
    """The flat ``{dotted key: value}`` of everything ``lit-fl fit argv`` would run with: the config files, the
    arguments and every default, and ``models.same_init`` resolved to the method's paper default where unset."""
    from lit_fl.fit_config import resolve_config_files

    config = _parser().parse_args(resolve_config_files(argv)).as_dict()
    flat = dict(_flatten(config))
    if flat.get("models.same_init") is None:
        flat["models.same_init"] = _algorithm_class(str(flat["algorithm.class_path"])).paper_same_init
    return flat


@functools.cache
def _parser() -> Any:
    from lit_fl.fit_config import fit_parser

    return fit_parser()


def _flatten(tree: dict[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    for key, value in tree.items():
        if isinstance(value, dict) and value:
            yield from _flatten(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def _algorithm_class(class_path: str) -> Any:
    module, _, name = class_path.rpartition(".")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as err:
        raise ConfigError(f"algorithm.class_path: cannot load {class_path!r} ({err})") from None
