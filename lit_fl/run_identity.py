"""What a run *is*, so that ``--resume`` never continues another run's checkpoint.

A run's identity is its algorithm, its seed and a hash of every config section that decides what it computes
(:data:`IDENTITY_KEYS`: the algorithm and its arguments, data, models, topology, faults, seed, eval_every and
differential privacy when it is on;
``rounds``, ``checkpoint_every``, ``trainer`` and ``logger`` may change on resume and are left out). Every checkpoint
carries the identity of the run that wrote it; ``--resume`` refuses a checkpoint whose identity differs from the
run directory's ``config.yaml``, and one whose round is past the rows of the folder's ``metrics.csv``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from typing import Any

#: Config keys that decide what a run computes: they must match between a run directory and the config it is
#: resumed with, and between its checkpoint and its config.
IDENTITY_KEYS = ("seed", "algorithm", "data", "models", "topology", "faults", "eval_every", "privacy", "system")


def identity_sections(config: dict[str, Any]) -> dict[str, Any]:
    """The :data:`IDENTITY_KEYS` sections of ``config``; ``privacy`` only when it is on (``level`` other than
    ``none``) and ``system`` only when its clock runs, so a run without them has the identity it had before lit-fl
    had the sections (its checkpoints and run directories resume as they did)."""
    sections = {key: config.get(key) for key in IDENTITY_KEYS}
    privacy = sections.get("privacy")
    if not isinstance(privacy, dict) or privacy.get("level", "none") == "none":
        del sections["privacy"]
    system = sections.get("system")
    if not isinstance(system, dict) or not system.get("clock", False):
        del sections["system"]
    return sections


@dataclass(frozen=True)
class RunIdentity:
    algorithm: str
    seed: int
    config_hash: str  # sha256 of the canonical JSON of the IDENTITY_KEYS sections, first 16 hex digits

    @classmethod
    def of(cls, config: dict[str, Any]) -> RunIdentity:
        """The identity of a resolved config (what ``config.yaml`` holds)."""
        sections = identity_sections(config)
        canonical = json.dumps(sections, sort_keys=True, default=str, separators=(",", ":"))
        algorithm = config.get("algorithm") or {}
        class_path = algorithm.get("class_path", "") if isinstance(algorithm, dict) else str(algorithm)
        return cls(
            algorithm=str(class_path).rsplit(".", 1)[-1],
            seed=int(config.get("seed") or 0),
            config_hash=hashlib.sha256(canonical.encode()).hexdigest()[:16],
        )

    @classmethod
    def from_dict(cls, raw: Any) -> RunIdentity | None:
        """The identity a checkpoint stored (None for a checkpoint written before identities, or a damaged one)."""
        if not isinstance(raw, dict):
            return None
        try:
            return cls(str(raw["algorithm"]), int(raw["seed"]), str(raw["config_hash"]))
        except (KeyError, TypeError, ValueError):
            return None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return f"{self.algorithm}, seed {self.seed}, config {self.config_hash}"
