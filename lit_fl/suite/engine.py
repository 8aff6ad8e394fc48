"""W&B's open-source sweep engine (the ``sweeps`` package) behind one small interface: the schema check, the
expansion of grid and random sweeps exactly as the W&B server and agent do it, and the ``--key=value``
arguments the agent builds for a run (W&B's own ``create_sweep_command_args``).
"""

from __future__ import annotations

import functools
import json
import random
import sys
from typing import Any

import numpy as np

from lit_fl.errors import ConfigError
from lit_fl.suite.schema import quiet as _quiet
from lit_fl.suite.schema import sweep_config
from lit_fl.suite.sweep_file import OFFLINE_METHODS, SweepFile

__all__ = ["agent_args", "expand", "grid_size", "sweep_config"]


def expand(sweep: SweepFile, count: int | None = None, seed: int = 0) -> list[dict[str, Any]]:
    """Every run of ``sweep`` as flat ``{parameter: value}`` dicts, in the order W&B's engine proposes them.

    Grid: the full product (``count`` may cap it). Random: ``count`` runs, drawn with Python's and numpy's random
    states seeded by ``seed`` (and restored) so the expansion is reproducible offline. Bayes needs the W&B server.
    """
    if sweep.method not in OFFLINE_METHODS:
        raise ConfigError(
            f"sweep {sweep.path}: method {sweep.method!r} needs the W&B server (run it with --wandb); "
            f"allowed offline: {', '.join(OFFLINE_METHODS)}"
        )
    if sweep.method == "random" and not count:
        raise ConfigError(f"sweep {sweep.path}: method random draws without end; give the number of runs: --count N")
    with _quiet():
        from sweeps import next_runs

        states = np.random.get_state(), random.getstate()
        np.random.seed(seed)  # the engine samples with Python's random (and numpy for some distributions)
        random.seed(seed)
        try:  # all at once: the engine's grid skips the runs it is given, so one at a time would be quadratic
            runs = [run for run in next_runs(sweep.config, [], n=count or sys.maxsize) if run is not None]
        finally:
            np.random.set_state(states[0])
            random.setstate(states[1])
    return [{key: _plain(value["value"]) for key, value in run.config.items()} for run in runs]


def grid_size(sweep: SweepFile) -> int | None:
    """The number of runs of a grid sweep (the product of its parameters' value counts), None for random."""
    if sweep.method != "grid":
        return None
    size = 1
    for spec in sweep.parameters.values():
        spec = spec if isinstance(spec, dict) else {}
        if "values" in spec:
            size *= max(1, len(spec["values"]))
        elif {"min", "max"} <= set(spec) and "q" in spec:
            size *= max(1, len(np.arange(spec["min"], spec["max"], spec["q"])))
        elif {"min", "max"} <= set(spec):
            size *= max(1, int(spec["max"]) - int(spec["min"]) + 1)
    return size


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
