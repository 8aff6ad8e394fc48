"""What user-level differential privacy carries from one round to the next: the clip norm (adaptive clipping moves
it) and the noise stream. Part of the federation's state only in a private run, so it is checkpointed with it and a
resumed run draws the same noise."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class PrivacyState:
    """The clip norm of the next round and the generator every noise draw comes from (on the CPU)."""

    clip_norm: float
    noise: torch.Generator

    @classmethod
    def start(cls, clip_norm: float, seed: int) -> PrivacyState:
        """A run's first state: the configured clip norm, the noise stream seeded from the run's seed."""
        return cls(float(clip_norm), torch.Generator().manual_seed(seed * 1_000_003 + 6))

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norm": self.clip_norm, "noise": self.noise.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip_norm = float(state["clip_norm"])
        self.noise.set_state(state["noise"])
