"""Decentralized FedProx (papers/dfml.txt A.3.2, Algorithm 2; Li et al. 2020)."""

from __future__ import annotations

from typing import Any

from lit_fl.algorithms.fedavg import DecentralizedFedAvg
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.constraints import NonNegativeFloat


@register_algorithm
class DecentralizedFedProx(DecentralizedFedAvg):
    """Decentralized FedAvg whose local training adds the proximal term ``mu/2 ||W~_n - W_n||^2``
    (A.3.2, Algorithm 2), with ``W~_n`` the client's own model before local training: in a decentralized
    network there is no single global model, so every participant treats its current model as the global
    one. Selection, aggregation (Eq. 5) and transport are FedAvg's, unchanged.

    Args:
        mu: weight of the proximal term (A.3.2 grid {0.5, 1, 2}; default 1). ``mu = 0`` is exactly FedAvg.
    """

    #: DFML sec. 4.4.2 (Table 3): decentralized FedProx's global accuracy, its clients' models
    reports = "global_acc"

    def __init__(self, mu: NonNegativeFloat = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.mu = float(mu)
        self.prox_mu = self.mu  # the local phase's proximal weight
