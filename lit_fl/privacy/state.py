"""What differential privacy carries from one round to the next: the clip norm (adaptive clipping moves it), the
noise stream and, under DP-SGD, every client's steps. Part of the federation's state only in a private run, so it is
checkpointed with it and a resumed run draws the same noise and spends the same epsilon."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class PrivacyState:
    """The clip norm of the next round and the generator every noise draw comes from (on the CPU); under DP-SGD
    (``privacy.level sample``) the generator draws each phase's noise seeds, and ``sample_steps`` is every client's
    history, ``client -> {(expected batch, train samples): steps}`` (its accountant); under DP on decentralized
    exchanges, every client's public reference and release count (:mod:`lit_fl.privacy.exchange`)."""

    clip_norm: float
    noise: torch.Generator
    sample_steps: dict[int, dict[tuple[int, int], int]] = field(default_factory=dict)
    #: DP on decentralized exchanges: every client's public reference (the weights its next release is clipped
    #: against) and how many releases it made (its accountant)
    references: dict[int, dict[str, torch.Tensor]] = field(default_factory=dict)
    releases: dict[int, int] = field(default_factory=dict)

    @classmethod
    def start(cls, clip_norm: float, seed: int) -> PrivacyState:
        """A run's first state: the configured clip norm, the noise stream seeded from the run's seed."""
        return cls(float(clip_norm), torch.Generator().manual_seed(seed * 1_000_003 + 6))

    def state_dict(self) -> dict[str, Any]:
        return {"clip_norm": self.clip_norm, "noise": self.noise.get_state(),
                "sample_steps": [[k, b, n, steps] for k, history in sorted(self.sample_steps.items())
                                 for (b, n), steps in sorted(history.items())],
                "references": self.references, "releases": dict(self.releases)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.clip_norm = float(state["clip_norm"])
        self.noise.set_state(state["noise"])
        self.sample_steps = {}
        for k, b, n, steps in state.get("sample_steps", []):
            self.sample_steps.setdefault(int(k), {})[(int(b), int(n))] = int(steps)
        self.references = {int(k): dict(v) for k, v in state.get("references", {}).items()}
        self.releases = {int(k): int(v) for k, v in state.get("releases", {}).items()}
