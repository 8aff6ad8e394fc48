"""W&B's open-source sweep engine (the ``sweeps`` package) behind one small interface: the schema check, the
expansion of grid and random sweeps exactly as the W&B server and agent do it, and the ``--key=value``
arguments the agent builds for a run (W&B's own ``create_sweep_command_args``).
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from lit_fl.errors import ConfigError
from lit_fl.suite.sweep_file import OFFLINE_METHODS, SweepFile


@contextmanager
def _quiet() -> Iterator[None]:
    """The ``sweeps`` package predates pydantic 2 and numpy 2 and warns about both; its results are the same."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def sweep_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` validated against W&B's sweep-config JSON schema (raises jsonschema's ValidationError)."""
    with _quiet():
        from sweeps.config import SweepConfig

        return dict(SweepConfig(config))


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
        from sweeps import RunState, next_run

        states = np.random.get_state(), random.getstate()
        np.random.seed(seed)  # the engine samples with Python's random (and numpy for some distributions)
        random.seed(seed)
        try:
            runs: list[Any] = []
            while count is None or len(runs) < count:
                run = next_run(sweep.config, runs)
                if run is None:
                    break
                run.state = RunState.finished
                runs.append(run)
        finally:
            np.random.set_state(states[0])
            random.setstate(states[1])
    return [{key: _plain(value["value"]) for key, value in run.config.items()} for run in runs]


def agent_args(params: dict[str, Any]) -> list[str]:
    """The ``${args}`` the W&B agent substitutes for a run with ``params``: ``--key=value`` each."""
    with _quiet():
        from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    return list(create_sweep_command_args({"args": {k: {"value": v} for k, v in params.items()}})["args"])


def _plain(value: Any) -> Any:
    """numpy scalars (random sweeps) as Python numbers, so manifests are plain JSON."""
    return value.item() if isinstance(value, np.generic) else value
