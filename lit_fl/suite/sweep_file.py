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
from typing import Any

from lit_fl.configs import resolve_config
from lit_fl.errors import ConfigError
from lit_fl.strict_yaml import load_yaml

COMMAND = ["${env}", "lit-fl", "fit", "${args}"]
OFFLINE_METHODS = ("grid", "random")


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
    if not isinstance(config, dict):
        raise ConfigError(f"sweep {path}: expected a mapping of W&B sweep keys, got {type(config).__name__}")
    check_schema(path, config)
    if config.get("program") != "lit-fl":
        raise ConfigError(f"sweep {path}: program must be lit-fl, got {config.get('program')!r}")
    if config.get("name") is not None:  # the sweep's folder under run_dir/sweeps: never a path
        from lit_fl.validation import check_folder_name

        check_folder_name(str(config["name"]), f"sweep {path}: name")
    command = config.get("command")
    if command is not None and "${args}" not in command:
        raise ConfigError(f"sweep {path}: command must pass ${{args}} to lit-fl fit, e.g. {COMMAND}")
    return SweepFile(path, config)


def check_schema(path: Path, config: dict[str, Any]) -> None:
    """W&B's own schema check (the ``sweeps`` package, W&B's open-source sweep engine)."""
    from jsonschema import ValidationError

    from lit_fl.suite.schema import schema_errors, schema_keys, sweep_config

    known = schema_keys()
    for key in config:
        if key not in known:
            raise ConfigError(f"sweep {path}: unknown key {key!r}; allowed: {', '.join(sorted(map(str, known)))}")
    for error in schema_errors(config)[:1]:
        where = ".".join(str(p) for p in error.absolute_path) or "top level"
        if error.validator == "anyOf" and list(error.absolute_path)[:1] == ["parameters"]:
            shown = repr(error.instance)[:100]
            raise ConfigError(f"sweep {path}: {where}: {shown} is not a parameter W&B knows: expected value, values "
                              "(a list), min and max, or a distribution with its keys")
        raise ConfigError(f"sweep {path}: {where}: {error.message.splitlines()[0][:300]}")
    try:
        sweep_config(config)
    except ValidationError as err:  # the checks SweepConfig adds to the schema (min <= max, probabilities), by key
        raise ConfigError(f"sweep {path}: {err.message.splitlines()[0][:300]}") from None
    except (ValueError, TypeError) as err:
        raise ConfigError(f"sweep {path}: {str(err).splitlines()[0]}") from None
