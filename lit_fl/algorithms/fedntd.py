"""FedNTD: Federated Not-True Distillation (Lee, Jeong, Shin, Bae, Yun, "Preservation of the Global Knowledge by
Not-True Distillation in Federated Learning", NeurIPS 2022, arXiv 2106.03097), Algorithm 1; docs/baselines.md
"FedNTD".

FedAvg's round (:class:`~lit_fl.algorithms.server_fedavg.ServerFedAvg`: sampling, broadcast, sample-weighted average
of the returned models) with the local objective of Eq. 7:

    ``L = L_CE(q, y) + beta * L_NTD(q~_tau, q~_tau^g)``,
    ``L_NTD = -sum_{c != y} q~_tau^g(c) log(q~_tau(c) / q~_tau^g(c))``   (Eq. 6, a KL divergence)

with ``q~_tau(c) = exp(z_c / tau) / sum_{c' != y} exp(z_c' / tau)`` over the not-true classes only (Eq. 5), ``z`` the
local model's logits and ``z^g`` those of the global model the client received this round (the teacher, frozen:
eval mode, no gradient). :func:`~lit_fl.losses.not_true_kl` computes it; :class:`~lit_fl.steps.NotTrueDistillation`
is the step, which fuses under ``trainer.fuse on`` (students and teachers as two fused slots).

Defaults: FedORION's shared setting (papers/fedorion.txt sec. 4.1, 4.2.1, appendix D Table 3, where FedNTD is the
best homogeneous baseline); ``tau = 1``, ``beta = 1`` from the authors' published configuration
(Lee-Gihun/FedNTD ``config/fedntd.json``: ``{"tau": 1, "beta": 1}``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.server_fedavg import ServerFedAvg
from lit_fl.constraints import NonNegativeFloat, PositiveFloat

if TYPE_CHECKING:
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork


@register_algorithm
class FedNTD(ServerFedAvg):
    """FedAvg with a server whose clients train on CE + ``beta`` x the not-true distillation from the received
    global model (Lee et al. 2022, Eq. 5-7).

    Args:
        tau: temperature of the not-true softmax (the authors' config: 1).
        beta: weight of the not-true distillation loss (the authors' config: 1). ``beta = 0`` is exactly
            :class:`ServerFedAvg`.
    """

    sequence_tasks = False  # not-true distillation per image label, not per token

    sample_level_dp = False  # NotTrueDistillation has no data_loss yet (docs/privacy.md)

    def __init__(self, tau: PositiveFloat = 1.0, beta: NonNegativeFloat = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tau = float(tau)
        self.beta = float(beta)

    def local_work(self, client: Client, federation: Federation) -> ClientWork | None:
        """``local_epochs`` of Eq. 7 over the client's train split; the teacher is the client's model as it is now
        (the global model just received)."""
        step = steps.NotTrueDistillation(client.model, client.class_proportions, self.loss, self.optimizer,
                                         tau=self.tau, beta=self.beta)
        return self.work(client, step, federation, self.local_epochs)
