"""FedAvg with a central server (McMahan, Moore, Ramage, Hampson, Agüera y Arcas, AISTATS 2017, arXiv 1602.05629),
Algorithm 1 (FederatedAveraging); docs/baselines.md "ServerFedAvg". lit-fl's ``DecentralizedFedAvg`` is DFML's
serverless variant; this is the paper's.

The server holds the model ``w`` (``federation.server["global"]``, evaluated as ``server_acc/global``). Each round
(Algorithm 1, server side):

1. ``S_t``: ``m = round(client_fraction * K)`` clients (at least 1) drawn from ``federation.rng.selection``.
2. The server sends ``w_t`` to every client of ``S_t`` (through the ledger, from ``SERVER``).
3. ClientUpdate(k, w_t): ``w <- w_t``; ``local_epochs`` epochs (E) of mini-batch SGD (batch B = ``batch_size``,
   step ``lr``, SGD momentum and weight decay as configured) on the client's data, :class:`~lit_fl.steps.
   LocalTraining` through ``runner.run_phase`` (it fuses under ``trainer.fuse on``).
4. The client sends ``w^k_{t+1}`` back (ledger, to ``SERVER``).
5. ``w_{t+1} = sum_{k in S_t} n_k / m_t w^k_{t+1}``, ``m_t = sum_{k in S_t} n_k`` (the weighted average of
   Algorithm 1 over the clients whose models arrived), buffers included (BatchNorm running statistics averaged the
   same way; integer counters from the first client, :func:`~lit_fl.steps.weighted_average`). That is the server
   optimizer slot's default (``server_optimizer: sgd``, ``server_lr 1``, ``server_momentum 0``); the slot's other
   optimizers take one step from ``w_t`` on the pseudo-gradient ``w_t - average`` instead (FedAvgM, FedAdam,
   FedYogi, FedAdagrad: :mod:`lit_fl.algorithms.server_optimizers`, Reddi et al. 2021).

Steps 1-4 are :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round; this class writes step 5.

A client whose model is lost on the way down or up (``faults.*``), or without training data, sends nothing and is
left out of the average; the clients not sampled keep their models.

Defaults: FedORION's shared setting (papers/fedorion.txt sec. 4.1 and appendix D, Table 3, where FedAvg is a
homogeneous baseline): SGD momentum 0.9, no weight decay, client lr 0.01, batch 32, 10 local epochs, 30% of the
clients per round (sec. 4.2.1).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.algorithms.server import GLOBAL, ServerAlgorithm
from lit_fl.algorithms.server_optimizers import ServerOptimizerName, build_server_optimizer
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import average_updates
from lit_fl.constraints import Fraction, Momentum, PositiveFloat

if TYPE_CHECKING:
    from lit_fl.algorithms.updates import ClientUpdate
    from lit_fl.federation.state import Federation
    from lit_fl.steps.runner import StepRunner

__all__ = ["GLOBAL", "ServerFedAvg"]


@register_algorithm
class ServerFedAvg(ServerAlgorithm):
    """FedAvg (McMahan et al. 2017, Algorithm 1) with a central server; every client of the one architecture starts
    from the same initialisation, and the server model from it too.

    Args:
        client_fraction: C, the share of the clients sampled each round, ``m = round(C * K)`` (at least 1).
            FedORION's shared setting: 0.3 (sec. 4.2.1).
        server_optimizer: the server's step towards the average (Reddi et al. 2021): ``sgd`` (with ``server_lr 1``
            and ``server_momentum 0``: FedAvg itself, the average; momentum > 0: FedAvgM), ``adam`` (FedAdam),
            ``yogi`` (FedYogi), ``adagrad`` (FedAdagrad).
        server_lr: eta, the server learning rate (FedAvg: 1).
        server_momentum: ``sgd``'s momentum (FedAvgM, Hsu et al. 2019; FedAvg: 0).
        server_betas: ``(b1, b2)`` of the adaptive optimizers (Reddi et al.: 0.9, 0.99).
        server_eps: tau of the adaptive optimizers, their adaptivity (Reddi et al.'s grid 1e-1 .. 1e-5: 1e-3).
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), FedORION's shared setting by default (sec.
            4.1, 4.2.1): E = ``local_epochs`` 10, ``lr`` 0.01, ``momentum`` 0.9 (the paper's ClientUpdate is plain
            SGD), no ``weight_decay`` (FedORION names none), B = ``batch_size`` 32, ``loss`` ce.
    """

    #: FedORION App. D (Table 3) and DFML App. A.4.1 (Fig. 12): the server's global model on the test set
    reports = "server_acc/global"
    client_defaults = FEDORION_CLIENTS
    requires = (*ServerAlgorithm.requires, ONE_ARCHITECTURE)

    sequence_tasks = True  # learns from logits alone: runs on token sequences (lit_fl.data.tokens)
    user_level_dp = True  # the uploads are models and step 5 averages them: DP-FedAvg (McMahan et al. 2018)
    sample_level_dp = True  # its one client phase is LocalTraining: DP-SGD can take it

    def __init__(
        self,
        client_fraction: Fraction = 0.3,
        server_optimizer: ServerOptimizerName = "sgd",
        server_lr: PositiveFloat = 1.0,
        server_momentum: Momentum = 0.0,
        server_betas: tuple[Momentum, Momentum] = (0.9, 0.99),
        server_eps: PositiveFloat = 1e-3,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client_fraction = client_fraction
        self.server_optimizer = build_server_optimizer(server_optimizer, server_lr, server_momentum, server_betas,
                                                       server_eps, key="algorithm.server_")

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Step 5: the server model moves to the sample-weighted average of the arrived models (the slot's step)."""
        for group, average in average_updates(updates).items():
            self.server_optimizer.apply(federation.server[group], average)
        return {}

    def state_dict(self) -> dict[str, Any]:
        return {"server_optimizer": self.server_optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.server_optimizer.load_state_dict(state.get("server_optimizer", {}))
