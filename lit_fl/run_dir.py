"""``RunDir``: the one place that knows a run directory's layout (../shared/DESIGN.md, "Run directory contract"):
``config.yaml`` (the fully resolved config), ``metrics.csv`` (a row per evaluated round), ``summary.json`` (final and
best values, status, wall time), ``checkpoints/last.ckpt`` (the whole federation) and ``wandb/`` when W&B is on.
``fit`` writes it, ``sweep`` reads its status, ``compare`` reads its config and metrics; all through this class."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: the names a run writes first, before its first checkpoint (a folder holding only these started here)
FIRST_WRITES = frozenset({"config.yaml", "checkpoints", "metrics.csv", "wandb"})


@dataclass(frozen=True)
class RunDir:
    path: Path

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def config(self) -> Path:
        return self.path / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.path / "metrics.csv"

    @property
    def summary(self) -> Path:
        return self.path / "summary.json"

    @property
    def checkpoints(self) -> Path:
        return self.path / "checkpoints"

    @property
    def checkpoint(self) -> Path:
        """The last checkpoint, which ``--resume`` continues from."""
        return self.checkpoints / "last.ckpt"

    @property
    def wandb(self) -> Path:
        return self.path / "wandb"

    def has_checkpoint(self) -> bool:
        return self.checkpoint.is_file()

    def has_metrics(self) -> bool:
        return self.metrics.is_file()

    def started_here(self) -> bool:
        """A run directory killed before its first checkpoint: it holds nothing but what a run writes first (and
        the temporary file of an atomic config write)."""
        names = {p.name for p in self.path.iterdir()}
        return all(n in FIRST_WRITES or n.startswith(".config.yaml.") for n in names)

    def read_config(self) -> dict[str, Any]:
        """The stored config (empty when there is none)."""
        import yaml

        return (yaml.safe_load(self.config.read_text()) or {}) if self.config.is_file() else {}

    def read_summary(self) -> dict[str, Any] | None:
        """The summary, or None when it is missing or unreadable."""
        try:
            summary = json.loads(self.summary.read_text())
        except (OSError, ValueError):
            return None
        return summary if isinstance(summary, dict) else None

    def status(self) -> str | None:
        """The summary's status (completed, interrupted, failed), None without a readable summary."""
        summary = self.read_summary()
        return summary.get("status") if summary is not None else None
