"""W&B's sweep-config schema (the ``sweeps`` package), imported quietly: the check a sweep file and the engine share."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def quiet() -> Iterator[None]:
    """The ``sweeps`` package predates pydantic 2 and numpy 2 and warns about both; its results are the same."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def sweep_config(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` validated against W&B's sweep-config JSON schema (raises jsonschema's ValidationError)."""
    with quiet():
        from sweeps.config import SweepConfig

        return dict(SweepConfig(config))


def schema_errors(config: dict[str, Any]) -> list[Any]:
    """Every violation of W&B's sweep-config JSON schema, each with the path of the key it is about (``SweepConfig``
    joins them into one message without it)."""
    with quiet():
        from sweeps.config.schema import validator

        return list(validator.iter_errors(config))


def schema_keys() -> set[str]:
    """The top-level keys W&B's sweep schema knows."""
    with quiet():
        from sweeps.config.schema import sweep_config_jsonschema

    return set(sweep_config_jsonschema["properties"])


def not_enumerable(parameters: dict[str, Any]) -> list[str]:
    """The parameters a grid cannot enumerate: distributions other than int_uniform and q_uniform (W&B's engine
    classifies each parameter from its keys)."""
    with quiet():
        from sweeps.params import HyperParameter, HyperParameterSet

    grid = (HyperParameter.CATEGORICAL, HyperParameter.CONSTANT, HyperParameter.INT_UNIFORM, HyperParameter.Q_UNIFORM)
    return [param.name for param in HyperParameterSet.from_config(parameters) if param.type not in grid]
