"""PeriodicCodist: knowledge codistillation's Algorithm 1 (papers/codistillation.txt; the method's overview:
:mod:`lit_fl.algorithms.codistillation`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.codist_pools import POOLS
from lit_fl.algorithms.codistillation import Codistillation
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.constraints import PositiveInt

if TYPE_CHECKING:
    from lit_fl.algorithms.updates import ClientUpdate
    from lit_fl.federation.state import Federation
    from lit_fl.steps.runner import StepRunner


@register_algorithm
class PeriodicCodist(Codistillation):
    """PeriodicCodist (paper Algorithm 1): FedAvg/FedAdam on both pools every round; after every ``period``-th
    round, ``distill_steps`` of codistillation both ways from snapshots, the students replace the server
    models and (``reset_moments``) both FedAdam states start afresh (paper C.4).

    Args:
        period: ``p``, rounds between codistillation phases (paper: 200).
        distill_steps: ``s`` (paper: 200).
        reset_moments: reset the FedAdam moments and step counts after distilling (paper: yes).
        **kwargs: see :class:`Codistillation`.
    """

    def __init__(
        self, period: PositiveInt = 200, distill_steps: int = 200, reset_moments: bool = True, **kwargs: Any
    ) -> None:
        super().__init__(distill_steps=distill_steps, **kwargs)
        self.period = period
        self.reset_moments = reset_moments

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """A FedAdam step per pool that received updates; every ``period``-th round, the codistillation whose
        students replace the server models."""
        round_ = self.current_round
        grads = self.pseudo_gradients(updates, federation)
        for pool in POOLS:
            if grads[pool] is not None:
                self.apply(pool, grads[pool], federation, round_)
        if round_ % self.period != 0:
            return {"distilled": 0.0, "distill_loss": float("nan")}
        students, loss = self.distill(federation, runner, round_)
        for pool in POOLS:
            federation.server[pool].load_state_dict(students[pool].state_dict())
            if self.reset_moments:
                self.optimizers[pool].reset()
        return {"distilled": 1.0, "distill_loss": loss}
