"""What the mechanisms with an accountant per client share (DP-SGD, DP on decentralized exchanges): the noise and
delta they resolved to, and a round's privacy columns from every client's epsilon."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lit_fl.privacy.config import PrivacyConfig

if TYPE_CHECKING:
    from lit_fl.privacy.state import PrivacyState


@dataclass(frozen=True)
class PerClientPlan(ABC):
    """A resolved ``privacy`` section whose every client spends epsilon on its own."""

    config: PrivacyConfig
    noise_multiplier: float
    delta: float

    @property
    def clip_norm(self) -> float:
        return self.config.clip_norm

    @abstractmethod
    def epsilons(self, state: PrivacyState, num_clients: int) -> list[float]:
        """Every client's epsilon(delta) so far (0 for one that has spent nothing)."""

    def metrics(self, state: PrivacyState, num_clients: int) -> dict[str, float]:
        """A round's privacy columns: ``epsilon`` (the largest client's) and ``epsilon_client_<k>``."""
        spent = self.epsilons(state, num_clients)
        return {"epsilon": max(spent), **{f"epsilon_client_{k}": e for k, e in enumerate(spent)}}
