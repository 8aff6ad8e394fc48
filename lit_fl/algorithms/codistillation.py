"""Heterogeneous FL by knowledge codistillation (papers/codistillation.txt; SPEC "Knowledge codistillation").

Two FedAvg pools share knowledge without sharing parameters:

* the **small** model (``small_arch``, the clients' regular model) trains on the whole client pool ``P``;
* the **large** model (``large_arch``, the extra model ``"large"`` of the high-capacity clients ``P_H``)
  trains on ``P_H`` only.

Every round each pool samples ``clients_per_round`` of its clients (independently, paper Algorithm 1 line 3:
"sampling clients from P and P_H, respectively"); a sampled client downloads the pool's current server model,
trains it for ``local_epochs`` (1) of plain SGD with batch 20 (paper C.3) and uploads it. The server forms the
pseudo-gradient ``g = W_server - sum_n d_n W_n / sum_n d_n`` (weighted by train examples) and applies it with
:class:`~lit_fl.algorithms.server_optimizers.FedAdam` (b1 0.9, b2 0.999, eps 1e-5). Server models live in
``federation.server["small"]`` / ``["large"]`` and are evaluated as ``server_acc/small`` / ``server_acc/large``
(``global_acc`` is the mean over clients of their last local small model, ``global_acc_large`` likewise).

Codistillation runs on the server on the unlabeled held-out split ``federation.server_idx``
(``data.server_fraction > 0``), or on ``data.proxy.size`` samples of it drawn by the seed
(``federation.proxy_idx``; the distillation-set sizes of the paper's Fig. 4, App. D.2), with
:class:`~lit_fl.steps.distillation.ServerCodistillation`: both server models are students, each distilled from a
snapshot of the other (teacher temperature ``T``) with the student regularisation ``b`` towards its own start, by
Adam, for ``distill_steps`` batches.

* :class:`PeriodicCodist` (Algorithm 1): every ``period`` rounds (200), after that round's FedAvg step, the
  students replace the server models and the FedAdam states are reset (paper C.4).
* :class:`MergedCodist` (Algorithm 2): every round, ``distill_steps`` (32) from the round's starting server
  models; ``delta = W_start - W_student`` and the update fed to FedAdam is
  ``alpha * g + (1 - alpha) * delta * ||g|| / ||delta||`` (Eq. 2, norms over the whole model).

Domain-shifted pools (paper sec. 3.3, Table 2): ``pool_domains`` restricts a pool to the train samples of one domain of
the data (:mod:`lit_fl.data.domains`; StackOverflow with ``data.options.domains: type``: ``{small: answer, large:
question}``). A client of that pool trains on, and is weighted by, its samples of the domain only, and a client without
any is not in the pool; the distillation data stays the mixed held-out split and the server models are also evaluated
on each domain's test samples (``server_acc/small/question``, ...).

Choices the paper leaves open (documented defaults): the distillation batch size (64); a fresh Adam per
distillation phase; one temperature for both teachers; ``decay_rounds`` switches on the paper's linear decay
(to zero) of the server and distillation learning rates; ``distill_augment`` adds the paper's extra random
horizontal/vertical flips and mixup (Beta(2, 2)) on the distillation data (C.1). A pool none of whose
sampled clients returned an update (faults) skips its server step that round. MergedCodist with
``merge_alpha = 1`` is FedAvg on both pools and skips the distillation (paper sec. 4).

The round is :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s with one group per pool
(:mod:`~lit_fl.algorithms.codist_round`): the participants are the pools' sampled members, a client sampled by both
pools trains both models in the round's one client phase; the server update is the subclass's
(:mod:`~lit_fl.algorithms.periodic_codist`, :mod:`~lit_fl.algorithms.merged_codist`).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Annotated, Any

from lit_fl.algorithms.codist_pools import (
    LARGE,
    POOL_RULES,
    POOLS,
    SMALL,
    large_server_model,
    resolve_large_clients,
)
from lit_fl.algorithms.codist_round import CodistRound
from lit_fl.algorithms.requirements import HELD_OUT_DATA, SERVER_BASED
from lit_fl.algorithms.server import check_checkpoint
from lit_fl.algorithms.server_optimizers import FedAdam
from lit_fl.algorithms.settings import ClientSGD
from lit_fl.constraints import Bounds, Fraction, PositiveFloat, PositiveInt, UnitInterval

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.data.dataset import ImageDataset
    from lit_fl.federation.state import Client, Federation

__all__ = ["LARGE", "POOLS", "SMALL", "Codistillation"]

#: ``decay_rounds``: at least one round, or None for a constant rate
DecayRounds = Annotated[int, Bounds(1, note="(or null for a constant rate)")]


class Codistillation(CodistRound):
    """Base of :class:`PeriodicCodist` and :class:`MergedCodist`: the two FedAvg pools, FedAdam and the
    server distillation; subclasses decide how the distillation meets the FedAvg updates.

    Args:
        small_arch: architecture of the small model; every client's regular model (``models.pool`` must
            give exactly this architecture).
        large_arch: architecture of the large model, held by the high-capacity clients as extra ``"large"``.
        large_clients: the high-capacity pool ``P_H``: a fraction of the clients (drawn once from the seed)
            or a list of client ids. Paper Table 1: 31, 47 or 63 of 315 clients.
        clients_per_round: clients sampled per pool and round (paper C.3: 20), at most the pool's size.
        server_lr: FedAdam learning rate of the small model (both models unless ``large_server_lr``).
        large_server_lr: FedAdam learning rate of the large model; None = ``server_lr``.
        server_betas: FedAdam ``(b1, b2)`` (paper C.3: 0.9, 0.999).
        server_eps: FedAdam epsilon (paper C.3: 1e-5).
        server_bias_correction: bias-corrected Adam moments (optax/FedJax, the paper's framework).
        distill_steps: distillation batches per codistillation phase.
        distill_batch_size: batch size on the server data (not given by the paper).
        distill_lr: Adam learning rate of the small student (both unless ``large_distill_lr``).
        large_distill_lr: Adam learning rate of the large student; None = ``distill_lr``.
        temperature: teacher softmax temperature ``T`` (paper F: tuned in (0.1, 10)).
        student_reg: ``b``, weight of the student's own starting prediction in the target (paper F:
            tuned in (0.001, 0.5)).
        distill_augment: random horizontal and vertical flips and mixup Beta(2, 2) on the distillation
            batches (paper C.1), on top of the dataset's own augmentation.
        decay_rounds: decay the server and distillation learning rates linearly to zero over this many
            rounds (paper C.3/C.4: over the whole run); None = constant.
        pool_domains: pool (``small``, ``large``) -> the domain of the data its clients train on (paper Table 2:
            ``{small: answer, large: question}``); a pool not named trains on all its clients' samples. None: no
            domain shift (Table 1).
        local_epochs, loss, lr, momentum, weight_decay, batch_size: client SGD (paper C.3: plain SGD with a
            constant learning rate, batch 20, one epoch; cross-entropy).
    """

    #: codistillation sec. 3 (Tables 1-2) reports both server models; the large one, the capacity the method
    #: exists to use (sec. 1), is reported_acc (server_acc/small beside it)
    reports = "server_acc/large"
    #: every sampled client talks to the server, which distils on held-out data of the clients' own train split
    requires = (SERVER_BASED, HELD_OUT_DATA, *POOL_RULES)
    sequence_tasks = True  # the paper's StackOverflow half: LSTM language models (App. E)
    client_defaults = ClientSGD(local_epochs=1, lr=0.01, momentum=0.0, weight_decay=0.0, batch_size=20)  # paper C.3

    def check_dataset(self, dataset: ImageDataset) -> None:
        """Both architectures must read the dataset's samples, which have the domains of ``pool_domains``."""
        from lit_fl.models.registry import check_model_for_data

        super().check_dataset(dataset)
        check_model_for_data(self.small_arch, "algorithm.small_arch", dataset.is_sequence, dataset.name)
        check_model_for_data(self.large_arch, "algorithm.large_arch", dataset.is_sequence, dataset.name)
        for pool, domain in self.pool_domains.items():
            dataset.domains.index(domain, f"algorithm.pool_domains.{pool}")

    def __init__(
        self,
        small_arch: str = "codist_small",
        large_arch: str = "codist_large",
        large_clients: Fraction | list[int] = 0.15,
        clients_per_round: PositiveInt = 20,
        server_lr: PositiveFloat = 0.001,
        large_server_lr: PositiveFloat | None = None,
        server_betas: tuple[float, float] = (0.9, 0.999),
        server_eps: float = 1e-5,
        server_bias_correction: bool = True,
        distill_steps: PositiveInt = 200,
        distill_batch_size: PositiveInt = 64,
        distill_lr: PositiveFloat = 0.001,
        large_distill_lr: PositiveFloat | None = None,
        temperature: PositiveFloat = 1.0,
        student_reg: UnitInterval = 0.1,
        distill_augment: bool = False,
        decay_rounds: DecayRounds | None = None,
        pool_domains: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.small_arch, self.large_arch = small_arch, large_arch
        self.large_clients = large_clients
        self.clients_per_round = clients_per_round
        self.server_lrs = {SMALL: server_lr, LARGE: large_server_lr or server_lr}
        self.distill_lrs = {SMALL: distill_lr, LARGE: large_distill_lr or distill_lr}
        self.distill_steps, self.distill_batch_size = distill_steps, distill_batch_size
        self.temperature, self.student_reg = float(temperature), float(student_reg)
        self.distill_augment = distill_augment
        self.decay_rounds = decay_rounds
        self.pool_domains = dict(pool_domains or {})
        self.optimizers = {
            pool: FedAdam(self.server_lrs[pool], server_betas, server_eps, server_bias_correction,
                          key="algorithm.server_") for pool in POOLS
        }
        self.pool_ids: dict[str, list[int]] = {}
        #: pool -> client id -> the client's train indices in the pool's domain (pools of ``pool_domains`` only)
        self.pool_idx: dict[str, dict[int, Tensor]] = {}
        self.buffers: dict[str, dict[str, Tensor]] = {}  # the round's averaged buffers, until applied
        self.members: dict[str, dict[int, Client]] = {}

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Pick ``P_H``, create both server models, the clients' large models (a resumed run loads their weights
        afterwards) and each pool's members (every client has ``small_arch``: :data:`POOL_RULES`)."""
        large_ids = resolve_large_clients(self.large_clients, federation.num_clients, federation.seed)
        self.pool_ids = {SMALL: [c.id for c in federation.clients], LARGE: large_ids}
        self.restrict_pools(federation)
        if SMALL not in federation.server:  # the clients' common initialisation
            federation.server[SMALL] = copy.deepcopy(federation.clients[0].model)
        if LARGE not in federation.server:
            federation.server[LARGE] = large_server_model(self.large_arch, federation)
        for n in self.pool_ids[LARGE]:
            client = federation.clients[n]
            if LARGE not in client.extras:
                client.extras[LARGE] = copy.deepcopy(federation.server[LARGE])
        self.members = {pool: {n: self.member(pool, federation.clients[n], federation) for n in self.pool_ids[pool]}
                        for pool in POOLS}

    # -- state -------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "large_clients": list(self.pool_ids.get(LARGE, [])),
            "fedadam": {pool: opt.state_dict() for pool, opt in self.optimizers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_checkpoint("the high-capacity clients are", list(state["large_clients"]),
                         list(self.pool_ids.get(LARGE, [])))
        for pool, opt in self.optimizers.items():
            opt.load_state_dict(state["fedadam"][pool])
