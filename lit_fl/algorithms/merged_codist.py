"""MergedCodist: knowledge codistillation's Algorithm 2 and its merged update, Eq. 2 (papers/codistillation.txt;
the method's overview: :mod:`lit_fl.algorithms.codistillation`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.codist_pools import POOLS
from lit_fl.algorithms.codistillation import Codistillation
from lit_fl.algorithms.norms import l2_norms
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.constraints import UnitInterval

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.algorithms.updates import ClientUpdate
    from lit_fl.federation.state import Federation
    from lit_fl.steps.runner import StepRunner


@register_algorithm
class MergedCodist(Codistillation):
    """MergedCodist (paper Algorithm 2): every round, codistillation from the round's starting server models
    gives ``delta = W_start - W_student`` per model; FedAdam gets
    ``alpha * g + (1 - alpha) * delta * ||g|| / ||delta||`` (Eq. 2). ``merge_alpha = 1`` is FedAvg (the
    distillation is skipped); a ``delta`` of norm 0 contributes nothing.

    Args:
        merge_alpha: ``alpha`` in [0, 1] (paper F: tuned in (0.05, 0.95)).
        distill_steps: ``s`` per round (paper: 32).
        **kwargs: see :class:`Codistillation`.
    """

    def __init__(self, merge_alpha: UnitInterval = 0.5, distill_steps: int = 32, **kwargs: Any) -> None:
        super().__init__(distill_steps=distill_steps, **kwargs)
        self.merge_alpha = float(merge_alpha)

    def round_alpha(self) -> float:
        return self.merge_alpha

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Per pool that received updates, one FedAdam step along Eq. 2's merge of its pseudo-gradient and the
        distillation's ``delta`` (both from the round's starting server models)."""
        import torch

        round_ = self.current_round
        grads = self.pseudo_gradients(updates, federation)
        if self.merge_alpha == 1.0:
            students, loss = {}, float("nan")
        else:
            students, loss = self.distill(federation, runner, round_)
        for pool in POOLS:
            g = grads[pool]
            if g is None:
                continue
            update = g
            if students:
                student = dict(students[pool].named_parameters())
                with torch.no_grad():
                    delta = {n: p.detach() - student[n].detach() for n, p in federation.server[pool].named_parameters()}
                update = merge_updates(g, delta, self.merge_alpha)
            self.apply(pool, update, federation, round_)
        return {"distilled": 0.0 if not students else 1.0, "distill_loss": loss}


def merge_updates(g: Mapping[str, Tensor], delta: Mapping[str, Tensor], alpha: float) -> dict[str, Tensor]:
    """Eq. 2: ``alpha * g + (1 - alpha) * delta * ||g|| / ||delta||`` with L2 norms over all entries
    (``g`` itself for ``alpha = 1``; ``delta`` contributes nothing when its norm is 0)."""
    if alpha == 1.0:
        return dict(g)
    g_norm, d_norm = l2_norms([g.values(), delta.values()])
    scale = g_norm / d_norm if d_norm > 0 else 0.0
    return {name: alpha * g[name] + ((1.0 - alpha) * scale) * delta[name] for name in g}


def global_norm(tensors: Mapping[str, Tensor]) -> float:
    """L2 norm of all entries together, accumulated in float64."""
    return l2_norms([tensors.values()])[0]
