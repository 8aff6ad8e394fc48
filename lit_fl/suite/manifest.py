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
from dataclasses import asdict, field
from pathlib import Path
from typing import Any, Literal, get_args

from pydantic import ConfigDict
from pydantic.dataclasses import dataclass

from lit_fl.file_schema import FileSchema
from lit_fl.io import atomic_write_text
from lit_fl.suite.document_schema import read_as

MANIFEST = "manifest.json"
#: a sweep folder's manifest.json, as a file (its content: :class:`Manifest`)
MANIFEST_FILE = FileSchema("a sweep's manifest.json", written=True, remedy="run the sweep again into another --run_dir")
Status = Literal["pending", "running", "completed", "interrupted", "failed"]
STATUSES = get_args(Status)
#: the manifest's JSON as written: nothing more (a key it does not know means another program's file)
_STRICT = ConfigDict(extra="forbid", strict=True)


@dataclass(config=_STRICT)
class SweepRun:
    name: str
    params: dict[str, Any]
    command: list[str]
    status: Status = "pending"
    run_dir: str = ""  # relative to the sweep directory

    @property
    def configuration(self) -> dict[str, Any]:
        return {k: v for k, v in self.params.items() if k != "seed"}


@dataclass(config=_STRICT)
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
        """The saved manifest; a damaged one is a :class:`ConfigError` line naming it and the key."""
        path = Path(sweep_dir) / MANIFEST
        return read_as(cls, MANIFEST_FILE.read_bytes(path, may_be_absent=True), f"{path}: damaged", json=True,
                       hint="run the sweep again into another --run_dir")


def is_sweep_dir(path: Path) -> bool:
    return (Path(path) / MANIFEST).is_file()
