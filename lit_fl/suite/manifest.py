"""``runs/sweeps/NAME/manifest.json``: every run of a local sweep, its parameters, command and status.

Layout of a sweep directory::

    runs/sweeps/NAME/sweep.yaml          the sweep file as run
    runs/sweeps/NAME/paper.yaml          the paper's numbers (when the sweep has them)
    runs/sweeps/NAME/manifest.json       this file
    runs/sweeps/NAME/runs/RUN/           one standard run directory per run
    runs/sweeps/NAME/logs/RUN.log        what the run printed

A run's *configuration* is its parameters without ``seed``: mean and std are taken over its seeds.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lit_fl.errors import ConfigError
from lit_fl.io import atomic_write_text

MANIFEST = "manifest.json"
STATUSES = ("pending", "running", "completed", "interrupted", "failed")


@dataclass
class SweepRun:
    name: str
    params: dict[str, Any]
    command: list[str]
    status: str = "pending"
    run_dir: str = ""  # relative to the sweep directory

    @property
    def configuration(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k != "seed"}


@dataclass
class Manifest:
    sweep: str
    method: str
    metric: dict[str, Any]
    file: str
    overrides: list[str] = field(default_factory=list)
    runs: list[SweepRun] = field(default_factory=list)

    def save(self, sweep_dir: Path) -> None:
        atomic_write_text(Path(sweep_dir) / MANIFEST, json.dumps(asdict(self), indent=2, allow_nan=False) + "\n")

    @classmethod
    def load(cls, sweep_dir: Path) -> Manifest:
        """The saved manifest; a damaged one is a :class:`ConfigError` line naming it."""
        path = Path(sweep_dir) / MANIFEST
        try:
            raw = json.loads(path.read_text())
            runs = [SweepRun(**run) for run in raw.pop("runs")]
            manifest = cls(**raw, runs=runs)
        except (ValueError, TypeError, KeyError, AttributeError) as err:  # JSON, keys, types: all mean damaged
            reason = str(err).splitlines()[0][:120] if str(err) else type(err).__name__
            raise ConfigError(f"{path}: damaged ({reason}); run the sweep again into another --run_dir") from None
        if not all(isinstance(run.params, dict) and isinstance(run.command, list) for run in manifest.runs):
            raise ConfigError(f"{path}: damaged (a run without params or command); run the sweep again into another "
                              "--run_dir")
        return manifest


def is_sweep_dir(path: Path) -> bool:
    return (Path(path) / MANIFEST).is_file()
