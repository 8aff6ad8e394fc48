"""W&B's open-source sweep engine (the ``sweeps`` package) behind one small interface: the schema check, the
expansion of grid and random sweeps exactly as the W&B server and agent do it, and the ``--key=value``
arguments the agent builds for a run (W&B's own ``create_sweep_command_args``).
"""

from __future__ import annotations

import functools
import itertools
import json
import math
import random
from collections.abc import Iterator
from typing import Any

import numpy as np

from lit_fl.errors import ConfigError
from lit_fl.suite.schema import quiet as _quiet
from lit_fl.suite.schema import sweep_config
from lit_fl.suite.sweep_file import OFFLINE_METHODS, SweepFile

__all__ = ["agent_args", "expand", "grid_size", "iter_expand", "sweep_config"]


def expand(sweep: SweepFile, count: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Every run of ``sweep`` as flat ``{parameter: value}`` dicts, in the order W&B's engine proposes them.

    Grid: the full product (``count`` may cap it). Random: ``count`` runs, drawn with Python's and numpy's random
    states seeded by ``seed`` (and restored) so the expansion is reproducible offline. Bayes needs the W&B server.
    """
    return list(iter_expand(sweep, count, seed))


def iter_expand(sweep: SweepFile, count: int | None = None, seed: int = 0) -> Iterator[dict[str, Any]]:
    """The runs of :func:`expand`, one at a time: a grid is walked lazily (its first runs come at once, whatever its
    size); a random sweep draws its ``count`` runs first (the engine's draws share Python's global random state)."""
    if sweep.method not in OFFLINE_METHODS:
        raise ConfigError(
            f"sweep {sweep.path}: method {sweep.method!r} needs the W&B server (run it with --wandb); "
            f"allowed offline: {', '.join(OFFLINE_METHODS)}"
        )
    if sweep.method == "random" and not count:
        raise ConfigError(f"sweep {sweep.path}: method random draws without end; give the number of runs: --count N")
    if sweep.method == "random":
        yield from _random(sweep, count, seed)
        return
    params, discrete, values = _grid(sweep)
    for combination in itertools.islice(itertools.product(*values), count):
        for param, value in zip(discrete, combination):
            param.value = value
        yield {key: _plain(value["value"]) for key, value in params.to_config().items()}


def _random(sweep: SweepFile, count: int, seed: int) -> list[dict[str, Any]]:
    """``count`` runs of W&B's random search, drawn with Python's and numpy's random states seeded by ``seed``."""
    with _quiet():
        from sweeps import next_runs

        states = np.random.get_state(), random.getstate()
        np.random.seed(seed)  # the engine samples with Python's random (and numpy for some distributions)
        random.seed(seed)
        try:
            runs = [run for run in next_runs(sweep.config, [], n=count) if run is not None]
        finally:
            np.random.set_state(states[0])
            random.setstate(states[1])
    return [{key: _plain(value["value"]) for key, value in run.config.items()} for run in runs]


def grid_size(sweep: SweepFile) -> int | None:
    """The number of runs of a grid sweep (the product of its parameters' distinct value counts), None for
    random."""
    if sweep.method != "grid":
        return None
    return math.prod(len(v) for v in _grid(sweep)[2])


def _grid(sweep: SweepFile) -> tuple[Any, list[Any], list[list[Any]]]:
    """W&B's grid (``sweeps.grid_search``) as a lazy product: the parameter set, its categorical parameters and
    each one's distinct values (W&B's engine walks the product of all values and skips a combination it has seen,
    by YAML hash: the product of the first occurrences, in the same order). int_uniform and q_uniform parameters
    become their values, as in the engine (the sweep file's check refuses any other distribution in a grid)."""
    with _quiet():
        from sweeps.grid_search import yaml_hash
        from sweeps.params import HyperParameter, HyperParameterSet

    params = HyperParameterSet.from_config(sweep.parameters)
    for i, param in enumerate(params):
        if param.type == HyperParameter.INT_UNIFORM:
            values = list(range(param.config["min"], param.config["max"] + 1))
        elif param.type == HyperParameter.Q_UNIFORM:
            values = np.arange(param.config["min"], param.config["max"], param.config["q"]).tolist()
        else:  # value, values (the sweep file refuses any other distribution in a grid)
            continue
        params[i] = HyperParameter(param.name, {"distribution": "categorical", "values": values})
    discrete = [p for p in params if p.type == HyperParameter.CATEGORICAL]
    return params, discrete, [_distinct(p.config["values"], yaml_hash) for p in discrete]


def _distinct(values: list[Any], key: Any) -> list[Any]:
    """``values`` without repeats (by ``key``), each at its first place."""
    first: dict[str, Any] = {}
    for value in values:
        first.setdefault(key(value), value)
    return list(first.values())


def agent_args(params: dict[str, Any]) -> list[str]:
    """The ``${args}`` the W&B agent substitutes for a run with ``params``: ``--key=value`` each (W&B's own
    formatting, computed once per distinct parameter value)."""
    return [_agent_arg(key, _hashable(value)) for key, value in params.items()]


@functools.lru_cache(maxsize=65536, typed=True)  # typed: True, 1 and 1.0 are formatted differently
def _agent_arg(key: str, value: Any) -> str:
    with _quiet():
        from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    (arg,) = create_sweep_command_args({"args": {key: {"value": _thawed(value)}}})["args"]
    return str(arg)


class _Frozen(str):
    """A list or dict parameter value as its JSON, hashable for the cache (thawed back before W&B formats it)."""


def _hashable(value: Any) -> Any:
    return _Frozen(json.dumps(value)) if isinstance(value, (list, dict)) else value


def _thawed(value: Any) -> Any:
    return json.loads(value) if isinstance(value, _Frozen) else value


def _plain(value: Any) -> Any:
    """numpy scalars (random sweeps) as Python numbers, so manifests are plain JSON."""
    return value.item() if isinstance(value, np.generic) else value
