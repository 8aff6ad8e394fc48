"""A W&B sweep file (``sweeps/NAME.yaml``), loaded and checked before anything runs.

The file is a standard W&B sweep config, so ``wandb sweep sweeps/NAME.yaml`` takes it unchanged::

    program: lit-fl
    name: mnist5k_label_skew
    method: grid                      # or random (lit-fl sweep --count N); bayes needs the W&B server
    metric: {name: global_acc, goal: maximize}   # default: reported_acc, what each method's paper reports
    parameters:                       # flat dotted keys of ``lit-fl fit``
      config: {values: [experiments/mnist5k/dfml.yaml, experiments/mnist5k/fedavg.yaml]}
      seed: {values: [0, 1, 2]}
    command: [${env}, lit-fl, fit, ${args}]

The paper's numbers for the configurations it reproduces live beside it in ``NAME.paper.yaml``
(:mod:`lit_fl.suite.paper`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import field_validator, model_validator

from lit_fl.configs import resolve_config
from lit_fl.strict_yaml import load_yaml
from lit_fl.suite.document_schema import FileModel, read_as, refuse

COMMAND = ["${env}", "lit-fl", "fit", "${args}"]
OFFLINE_METHODS = ("grid", "random")


class SweepSpec(FileModel):
    """A sweep file's keys: W&B's (its ``sweeps`` package's JSON schema checks their values) with lit-fl's rules on
    ``program``, ``name`` and ``command``."""

    program: Literal["lit-fl"]
    name: Any = None  # the sweep's folder under run_dir/sweeps: one folder name, never a path
    method: Any = None
    metric: Any = None
    parameters: Any = None
    command: list[Any] | None = None
    apiVersion: Any = None  # noqa: N815 - W&B's key
    controller: Any = None
    description: Any = None
    early_terminate: Any = None
    entity: Any = None
    kind: Any = None
    project: Any = None

    @field_validator("command")
    @classmethod
    def _passes_args(cls, command: list[Any] | None) -> list[Any] | None:
        if command is not None and "${args}" not in command:
            raise ValueError(f"must pass ${{args}} to lit-fl fit, e.g. {COMMAND}, got {command}")
        return command

    @model_validator(mode="after")
    def _wandb_schema(self) -> SweepSpec:
        """W&B's own schema check (the ``sweeps`` package, W&B's open-source sweep engine), the first violation by
        its key; then the checks ``SweepConfig`` adds to the schema (min <= max, probabilities); a grid's parameters
        are ones it can enumerate; the name is a folder's."""
        from jsonschema import ValidationError

        from lit_fl.suite.schema import not_enumerable, schema_errors, sweep_config
        from lit_fl.validation import check_folder_name

        config = self.model_dump(exclude_unset=True)
        for error in schema_errors(config)[:1]:
            where = list(error.absolute_path)
            if error.validator == "anyOf" and where[:1] == ["parameters"]:
                raise refuse(where, f"{repr(error.instance)[:100]} is not a parameter W&B knows: expected value, "
                                    "values (a list), min and max, or a distribution with its keys")
            raise refuse(where, error.message.splitlines()[0][:300])
        try:
            sweep_config(config)
        except ValidationError as err:
            raise refuse([], err.message.splitlines()[0][:300]) from None
        except (ValueError, TypeError) as err:
            raise refuse([], str(err).splitlines()[0]) from None
        for name in not_enumerable(self.parameters)[:1] if self.method == "grid" else []:
            raise refuse(["parameters", name], "a grid takes value, values, int_uniform or q_uniform parameters; "
                                               "another distribution needs method random")
        if self.name is not None:
            check_folder_name(str(self.name), "name")
        return self


@dataclass(frozen=True)
class SweepFile:
    """One sweep file: its path, name and the W&B sweep config it holds."""

    path: Path
    config: dict[str, Any]

    @property
    def name(self) -> str:
        return str(self.config.get("name") or self.path.stem)

    @property
    def method(self) -> str:
        return str(self.config["method"])

    @property
    def metric(self) -> dict[str, Any]:
        return dict(self.config.get("metric") or {"name": "reported_acc", "goal": "maximize"})

    @property
    def parameters(self) -> dict[str, Any]:
        return dict(self.config["parameters"])

    @property
    def paper_path(self) -> Path:
        """``NAME.paper.yaml`` beside the sweep file (it may not exist)."""
        return self.path.with_name(self.path.name.removesuffix(".yaml") + ".paper.yaml")


def load_sweep_file(name: str | Path) -> SweepFile:
    """Read and check a sweep file (a path, or the name of a shipped sweep); one :class:`ConfigError` line
    naming the file and the problem otherwise."""
    path = resolve_config(name, kind="sweeps", key="sweep")
    config = load_yaml(path, f"sweep {path}")
    read_as(SweepSpec, config, f"sweep {path}")
    return SweepFile(path, config)
