"""FedORION: aggregation-assisted proxyless distillation (papers/fedorion.txt, Algorithm 1; SPEC "FedORION").

Server based. The server holds one global model (``federation.server["global"]``, evaluated as
``server_acc/global``; default architecture: the smallest of the federation's pool by parameter count, the WRN40
role of the paper). Each round:

1. ``round(client_fraction * N)`` clients are drawn (``federation.rng.selection``) and receive the global model.
2. Client side (sec. 3.1, Eq. 1-2): deep mutual learning between the client's local model ``theta_i`` and its copy
   ``theta_gi`` of the global model on its data, ``local_epochs`` epochs; ``theta_i`` steps at ``eta_i`` (``lr``)
   and ``theta_gi`` at ``eta_g`` (``global_lr``), the two rates of Algorithm 1's client side.
   :class:`DeepMutualLearning`'s ``CE + KL(p_peer || p_own)`` with the peer detached has exactly the gradient of Eq.
   1-2's ``CE + CE(p_peer, p_own)`` (they differ by the peer's entropy, a constant for the model trained), so it is
   used as is. Clients in ``no_dml`` (selective DML, sec. 3.2.1) have the global architecture: the received global
   model becomes their local model and they train only it (CE), so that model is their "copy".
3. Clients send back their copy of the global model and their local model (the teacher of step 5); no-DML clients
   send their one model.
4. Aggregation: ``theta_g`` = average of the received copies (Algorithm 1: ``1/C sum_i theta_gi``; option
   ``aggregation="samples"`` weights by sample count as FedAvg).
5. Proxyless distillation (sec. 3.3, Eq. 3): ``server_epochs`` (T_s) epochs of ``noise_steps`` batches of ``z ~ N(0,
   I)`` (``noise_batch_size`` = 128; Algorithm 1: "for each epoch r_s = 1..T_s: sample a batch of noise", so
   ``noise_steps`` = 1), the received local models as teachers with BatchNorm on the current batch statistics,
   weighted by sample count, SGD lr 0.001 momentum 0.9 (:class:`NoiseDistillation`). ``noise: dead_leaves``
   draws dead-leaves images instead (Table 4 left, "DL"; :mod:`lit_fl.steps.dead_leaves`) from the same stream.

The clients' (local) models are reported as ``global_acc`` / ``local_acc``; the global model as
``server_acc/global``. Steps 1 and 3 are :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round (every transfer
through the ledger to or from ``SERVER``); this class writes the client work of step 2 (:meth:`FedORION.broadcast`),
what step 3 carries (:meth:`FedORION.collect`) and steps 4-5 (:meth:`FedORION.server_update`); the steps' own work,
DML, the no-DML client's training and the noise distillation, is :mod:`lit_fl.algorithms.fedorion_steps`'. A
sampled client without training data does no work and sends nothing.

Paper defaults taken here: CE loss, client lr 0.01 (eta_i) / global-copy and server lr 0.001 (eta_g, sec. 4.1), SGD
momentum 0.9 without weight decay (the paper names none), client batch 32, 10 local epochs, T_s = 5, 30% of the
clients per round (sec. 4.2.1).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl import steps
from lit_fl.algorithms.fedorion_steps import FedORIONSteps
from lit_fl.algorithms.global_model import GlobalModelMethod, initial_global_model
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import NO_FAULTS, ClientIds
from lit_fl.algorithms.server import GLOBAL, ServerAlgorithm, model_state
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import ClientUpdate, average_updates
from lit_fl.choices import BNStats, NoiseKind, StudentRunningStats
from lit_fl.constraints import (
    BatchStatisticsSize,
    Fraction,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
)
from lit_fl.errors import ConfigError
from lit_fl.federation.endpoints import SERVER
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

#: ``no_dml: global_arch`` = every client whose architecture is the global one skips DML (the paper's rule).
GLOBAL_ARCH = "global_arch"
#: the rate a no-DML client trains its one model (the received global model) at: the paper leaves it open (sec. 4.1
#: "learning rates for clients' and server are set to 0.01 and 0.001"; Algorithm 1 trains every global copy at eta_g)
NoDMLRate = Literal["lr", "global_lr"]


@register_algorithm
class FedORION(GlobalModelMethod, FedORIONSteps, ServerAlgorithm):
    """Clients initialise their models independently (``paper_same_init = False``): "We randomly initialize the
    clients' models" (FedORION sec. 4.1).

    Args:
        global_arch: architecture of the global model; None = the smallest of the pool by parameter count.
        client_fraction: share of the clients selected each round, ``round(f * N)`` (at least 1). Paper: 0.3
            (sec. 4.2.1, 30 clients), 10 clients per round (Table 2, N = 30 and 100), 0.5 (CIFAR-100/TinyImageNet).
        no_dml: client ids that skip DML (selective DML; they must have the global architecture), or
            ``global_arch`` for every client of the global architecture (the paper's rule); None = all do DML.
        server_epochs: T_s, epochs of noise distillation per round (paper: 5; 0 = no distillation, ablation).
        noise_steps: noise batches per server epoch (Algorithm 1: one batch per epoch r_s).
        noise_batch_size: noise samples per batch (paper: 128).
        noise: the distillation samples: ``gaussian``, ``z ~ N(0, I)`` (the paper's method, Table 4 left "GN"), or
            ``dead_leaves``, dead-leaves images of random disks (Table 4 left "DL", Baradad Jurjo et al. 2021;
            image datasets only).
        server_lr: the server's SGD learning rate (paper: 0.001).
        server_momentum: the server's SGD momentum (paper: 0.9).
        server_weight_decay: the server's SGD weight decay (paper: none, 0).
        global_lr: eta_g, the rate at which a client trains its copy of the global model (Algorithm 1, client
            side: "theta_gi = theta_gi - eta_g grad L_GMi"; sec. 4.1: 0.001). The local model uses ``lr`` (eta_i).
            No-DML clients train their one model (the received global model) at the rate ``no_dml_lr`` names.
        bn_stats: the teachers' BatchNorm on the ``current`` noise batch statistics (paper) or ``running``.
        student_running_stats: ``keep`` the global model's BatchNorm running statistics (averaged from the
            clients' copies, i.e. real data) during distillation, or ``update`` them on noise.
        aggregation: ``uniform`` (Algorithm 1) or ``samples`` (weighted by the clients' sample counts).
        aggregate: False = the server skips aggregation and distils into its previous global model (ablation,
            Table 3 "w/o Agg").
        kl_weight: weight of the peer term in Eq. 1-2 (1).
        no_dml_lr: the rate of a client that skips DML, which trains the received global model alone: ``lr``
            (eta_i, default: sec. 4.1 "the learning rates for clients' [...] are set to 0.01") or ``global_lr``
            (eta_g, the rate Algorithm 1 trains every copy of the global model at). The paper does not say which;
            docs/reproductions.md runs both.
        global_label_loss: False = a client trains its copy of the global model on the distillation term of
            L_GMi alone, without the labels (ablation, Table 3 "w/o DML": "instead of using the whole global model
            loss on the client side (L_GMi in equation 2) we just rely on distillation part of it").
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), the paper's by default: ``local_epochs`` 10,
            ``lr`` 0.01 (eta_i), ``momentum`` 0.9, no ``weight_decay``, ``batch_size`` 32, ``loss`` ce.
    """

    #: FedORION sec. 4.1: "test set accuracy of the global server model"
    reports = "server_acc/global"

    paper_same_init = False
    client_defaults = FEDORION_CLIENTS  # sec. 4.1, 4.2.1
    requires = (*ServerAlgorithm.requires, NO_FAULTS,
                ClientIds("no-DML clients", key="no_dml", attribute="no_dml_option"))

    def __init__(
        self,
        global_arch: str | None = None,
        client_fraction: Fraction = 0.3,
        no_dml: list[int] | Literal["global_arch"] | None = None,
        server_epochs: NonNegativeInt = 5,
        noise_steps: PositiveInt = 1,
        noise_batch_size: BatchStatisticsSize = 128,
        noise: NoiseKind = "gaussian",
        server_lr: float = 0.001,
        server_momentum: float = 0.9,
        server_weight_decay: float = 0.0,
        global_lr: PositiveFloat = 0.001,
        bn_stats: BNStats = "current",
        student_running_stats: StudentRunningStats = "keep",
        aggregation: Literal["uniform", "samples"] = "uniform",
        aggregate: bool = True,
        kl_weight: NonNegativeFloat = 1.0,
        global_label_loss: bool = True,
        no_dml_lr: NoDMLRate = "lr",
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.global_arch = global_arch
        self.client_fraction = client_fraction
        self.no_dml_option = no_dml if isinstance(no_dml, str) else sorted({int(n) for n in no_dml or []})
        self.no_dml: set[int] = set()
        self.server_epochs = server_epochs
        self.noise_steps = noise_steps
        self.noise_batch_size = noise_batch_size
        self.noise: NoiseKind = noise
        self.global_optimizer = SGDConfig(global_lr, self.optimizer.momentum, self.optimizer.weight_decay,
                                          key="algorithm.global_")
        self.server_optimizer = SGDConfig(server_lr, server_momentum, server_weight_decay, key="algorithm.server_")
        self.bn_stats: BNStats = bn_stats
        self.student_running_stats: StudentRunningStats = student_running_stats
        self.aggregation = aggregation
        self.aggregate = aggregate
        self.kl_weight = kl_weight
        self.global_label_loss = bool(global_label_loss)
        self.no_dml_lr: NoDMLRate = no_dml_lr

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Create the global model (once): the clients' initialisation of its architecture when a client has it (so
        no-DML clients start where the global model starts), else a fresh model from a seed of its own; then the
        no-DML clients, each of the global architecture."""
        arch = self.setup_global_model(federation, lambda fed, arch: initial_global_model(fed, arch, 997))
        if self.no_dml_option == GLOBAL_ARCH:
            self.no_dml = {c.id for c in federation.clients if c.arch == arch}
        else:
            self.no_dml = set(self.no_dml_option)
        other = [n for n in sorted(self.no_dml) if federation.clients[n].arch != arch]
        if other:
            raise ConfigError(f"algorithm.no_dml: client {other[0]} has arch {federation.clients[other[0]].arch}, "
                              f"selective DML needs the global architecture {arch}")

    # -- round -------------------------------------------------------------------------------------------

    def broadcast(self, client: Client, starts: dict[str, dict[str, Any]], federation: Federation,
                  ledger: CommunicationLedger) -> ClientWork | None:
        """Step 1 (faults are refused: the global model arrives) and the client work of step 2: DML with a copy of
        the global model, or (selective DML) the global model trained alone as the client's model."""
        ledger.give_back(SERVER, client.id, federation.server[GLOBAL])
        if client.id in self.no_dml:
            client.set_weights(starts[GLOBAL])
            return self.no_dml_work(client, federation)
        return self.dml_work(client, copy.deepcopy(federation.server[GLOBAL]), federation)

    def collect(self, client: Client, work: ClientWork, federation: Federation,
                ledger: CommunicationLedger) -> ClientUpdate:
        """Step 3: the client's copy of the global model (a no-DML client's one model is that copy) and its local
        model, the teacher of step 5."""
        theirs = client.model if client.id in self.no_dml else work.step.model_b
        if theirs is not client.model:
            ledger.send(client.id, SERVER, theirs)
        ledger.send(client.id, SERVER, client.model)
        weight = float(client.num_train) if self.aggregation == "samples" else 1.0
        return ClientUpdate(client.id, model_state(theirs), weight, extra={"dml": client.id not in self.no_dml})

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Step 4 (with ``aggregate``) and step 5 (``server_epochs > 0``) over the clients that sent."""
        server = federation.server[GLOBAL]
        if updates and self.aggregate:
            steps.load_weights(server, average_updates(updates)[GLOBAL])
        kd_loss = float("nan")
        if updates and self.server_epochs > 0:
            kd_loss = self.distill(server, [federation.clients[u.client] for u in updates], federation, runner)
        return {"kd_loss": kd_loss, "dml_clients": float(sum(bool(u.extra["dml"]) for u in updates))}
