"""FedProx with a central server (Li, Sahu, Zaheer, Sanjabi, Talwalkar, Smith, MLSys 2020, arXiv 1812.06127),
Algorithm 2; docs/baselines.md "ServerFedProx". lit-fl's ``DecentralizedFedProx`` is DFML's serverless variant.

FedAvg's round (:class:`~lit_fl.algorithms.server_fedavg.ServerFedAvg`: sampling, broadcast, weighted average) with
the local objective of Eq. 2:

    ``min_w h_k(w; w^t) = F_k(w) + mu/2 ||w - w^t||^2``

``w^t`` the global model the client received this round (the parameters; buffers carry no term). The term is
lit-fl's ``prox_mu`` machinery of :class:`~lit_fl.steps.LocalTraining` (``W_start`` = the weights at the step's
construction, which is the received ``w^t``), so the local phase fuses as FedAvg's does. The paper solves the
subproblem inexactly (gamma-inexact) with a fixed number of local epochs of SGD, as here; its systems-heterogeneity
experiments (sec. 5.2) let a straggler solve it with less work instead of dropping it: on the virtual clock,
``system.deadline_s`` with ``system.partial_work`` does that (a client trains on the batches it can finish and upload
by the deadline, :mod:`lit_fl.system.partial`; ``mu = 0`` is FedAvg with partial work).

Defaults: FedORION's shared setting (sec. 4.1, 4.2.1, appendix D), and ``mu = 1``: the FedProx paper's best value
for MNIST in its grid {0.001, 0.01, 0.1, 0.5, 1} (sec. 5.3 / appendix, as recalled) and the authors' FedNTD code's
FedProx config on CIFAR-10 (``config/fedprox.json``: mu 1.0); FedORION gives no mu.
"""

from __future__ import annotations

from typing import Any, ClassVar

from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.server_fedavg import ServerFedAvg
from lit_fl.constraints import NonNegativeFloat


@register_algorithm
class ServerFedProx(ServerFedAvg):
    """FedAvg with a server whose local training adds FedProx's ``mu/2 ||w - w^t||^2`` (Li et al. 2020, Eq. 2),
    ``w^t`` the received global model.

    Args:
        mu: weight of the proximal term (FedProx's MNIST choice from its grid {0.001, 0.01, 0.1, 0.5, 1}: 1).
            ``mu = 0`` is exactly :class:`ServerFedAvg`.
    """

    #: FedProx's variable local work (sec. 3, 5.2): ``system.partial_work``
    partial_work: ClassVar[bool] = True

    def __init__(self, mu: NonNegativeFloat = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mu = float(mu)
        self.prox_mu = self.mu  # the local phase's proximal weight (LocalTraining)
