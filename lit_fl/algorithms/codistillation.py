"""Heterogeneous FL by knowledge codistillation (papers/codistillation.txt; SPEC "Knowledge codistillation").

Two FedAvg pools share knowledge without sharing parameters:

* the **small** model (``small_arch``, the clients' regular model) trains on the whole client pool ``P``;
* the **large** model (``large_arch``, the extra model ``"large"`` of the high-capacity clients ``P_H``)
  trains on ``P_H`` only.

Every round each pool samples ``clients_per_round`` of its clients (independently, paper Algorithm 1 line 3:
"sampling clients from P and P_H, respectively"); a sampled client downloads the pool's current server model,
trains it for ``local_epochs`` (1) of plain SGD with batch 20 (paper C.3) and uploads it. The server forms the
pseudo-gradient ``g = W_server - sum_n d_n W_n / sum_n d_n`` (weighted by train examples) and applies it with
:class:`~lit_fl.algorithms.fedadam.FedAdam` (b1 0.9, b2 0.999, eps 1e-5). Server models live in
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
"""

from __future__ import annotations

import copy
import math
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from itertools import islice
from typing import TYPE_CHECKING, Annotated, Any

import numpy as np

from lit_fl import steps
from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses
from lit_fl.algorithms.fedadam import FedAdam
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.choices import SupervisedLoss
from lit_fl.constraints import Bounds, PositiveFloat, PositiveInt, UnitInterval
from lit_fl.errors import ConfigError
from lit_fl.models import create_model

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from lit_fl.data.dataset import ImageDataset
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

#: ``decay_rounds``: at least one round, or None for a constant rate
DecayRounds = Annotated[int, Bounds(1, note="(or null for a constant rate)")]
SMALL, LARGE = "small", "large"
POOLS = (SMALL, LARGE)
NO_SERVER_DATA = "Codistillation needs unlabeled server data: set data.server_fraction > 0"
OWN_SLICE_ONLY = ("data.proxy.dataset: codistillation distils on the held-out slice of its own train split "
                  "(data.server_fraction; data.proxy.size draws a subset of it), not on another dataset; allowed: null")


class Codistillation(Algorithm):
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

    uses_topology = False  # every sampled client talks to the server
    sequence_tasks = True  # the paper's StackOverflow half: LSTM language models (App. E)

    def check_dataset(self, dataset: ImageDataset) -> None:
        """Both architectures must read the dataset's samples; the flips and mixup of ``distill_augment`` are for
        images."""
        from lit_fl.models.registry import check_model_for_data

        super().check_dataset(dataset)
        check_model_for_data(self.small_arch, "algorithm.small_arch", dataset.is_sequence, dataset.name)
        check_model_for_data(self.large_arch, "algorithm.large_arch", dataset.is_sequence, dataset.name)
        if self.distill_augment and dataset.is_sequence:
            raise ConfigError(f"algorithm.distill_augment: flips and mixup are for images and {dataset.name} holds "
                              "token sequences; allowed: false")
        if self.pool_domains and dataset.domains is None:
            raise ConfigError(f"algorithm.pool_domains: {dataset.name}'s samples have no domains; give the dataset "
                              "its domains (stackoverflow: data.options.domains: type) or set pool_domains: null")
        for pool, domain in self.pool_domains.items():
            dataset.domains.index(domain, f"algorithm.pool_domains.{pool}")

    def __init__(
        self,
        small_arch: str = "codist_small",
        large_arch: str = "codist_large",
        large_clients: float | list[int] = 0.15,
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
        local_epochs: int = 1,
        loss: SupervisedLoss = "ce",
        lr: float = 0.01,
        momentum: float = 0.0,
        weight_decay: float = 0.0,
        batch_size: int = 20,
    ) -> None:
        super().__init__(local_epochs, loss, lr, momentum, weight_decay, batch_size)
        if isinstance(large_clients, (int, float)) and not isinstance(large_clients, bool):
            if not 0.0 < large_clients <= 1.0:
                raise ConfigError(
                    f"algorithm.large_clients: a fraction must be in (0, 1], got {large_clients}; "
                    "or give a list of client ids"
                )
        elif not large_clients:
            raise ConfigError("algorithm.large_clients: the list of high-capacity client ids is empty")
        self.small_arch, self.large_arch = small_arch, large_arch
        self.large_clients = large_clients
        self.clients_per_round = clients_per_round
        self.server_lrs = {SMALL: server_lr, LARGE: large_server_lr or server_lr}
        self.distill_lrs = {SMALL: distill_lr, LARGE: large_distill_lr or distill_lr}
        self.distill_steps, self.distill_batch_size = distill_steps, distill_batch_size
        self.temperature, self.student_reg = float(temperature), float(student_reg)
        self.distill_augment = distill_augment
        self.decay_rounds = decay_rounds
        self.pool_domains = check_pool_domains(pool_domains)
        self.optimizers = {
            pool: FedAdam(self.server_lrs[pool], server_betas, server_eps, server_bias_correction) for pool in POOLS
        }
        self.pool_ids: dict[str, list[int]] = {}
        #: pool -> client id -> the client's train indices in the pool's domain (pools of ``pool_domains`` only)
        self.pool_idx: dict[str, dict[int, Tensor]] = {}
        self.buffers: dict[str, dict[str, Tensor]] = {}  # the round's averaged buffers, until applied

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Check the server split and the pool, pick ``P_H``, create both server models and the clients'
        large models (a resumed run loads their weights afterwards)."""
        import torch

        if federation.proxy_idx is None:
            raise ConfigError(OWN_SLICE_ONLY)
        if len(federation.server_idx) == 0:
            raise ConfigError(NO_SERVER_DATA)
        other = sorted({c.arch for c in federation.clients} - {self.small_arch})
        if other:
            raise ConfigError(
                f"algorithm.small_arch is {self.small_arch!r} but models.pool gives {other}: every client trains "
                f"the small model, set models.pool: [{self.small_arch}]"
            )
        large_ids = resolve_large_clients(self.large_clients, federation.num_clients, federation.seed)
        self.pool_ids = {SMALL: [c.id for c in federation.clients], LARGE: large_ids}
        self.restrict_pools(federation)
        large_ids = self.pool_ids[LARGE]
        first = federation.clients[0].model
        if SMALL not in federation.server:  # the clients' common initialisation
            federation.server[SMALL] = copy.deepcopy(first)
        if LARGE not in federation.server:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(federation.seed * 1_000 + 998)
                large = create_model(self.large_arch, federation.data.input_shape, federation.num_classes)
            param = next(first.parameters())
            federation.server[LARGE] = large.to(param.device, memory_format=_memory_format(first))
        for n in large_ids:
            client = federation.clients[n]
            if LARGE not in client.extras:
                client.extras[LARGE] = copy.deepcopy(federation.server[LARGE])

    def restrict_pools(self, federation: Federation) -> None:
        """Each pool of ``pool_domains``: its clients' train indices in the pool's domain; a client without any
        leaves the pool (one line when none is left)."""
        self.pool_idx = {}
        for pool, domain in self.pool_domains.items():
            key = f"algorithm.pool_domains.{pool}"
            subsets = {n: federation.data.domains.train_subset(federation.clients[n].train_idx, domain, key)
                       for n in self.pool_ids[pool]}
            self.pool_idx[pool] = {n: idx for n, idx in subsets.items() if len(idx) > 0}
            self.pool_ids[pool] = sorted(self.pool_idx[pool])
            if not self.pool_ids[pool]:
                raise ConfigError(f"{key}: no client of the {pool} pool has a train sample of domain {domain!r}; "
                                  "give the pool more clients (data.num_clients, algorithm.large_clients)")

    def train_idx(self, pool: str, client: Client) -> Tensor:
        """What ``client`` trains on in ``pool``: its train split, or its part of it in the pool's domain."""
        if pool in self.pool_idx:
            return self.pool_idx[pool][client.id]
        return client.train_idx

    # -- a round -----------------------------------------------------------------------------------------

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        self.buffers = {}
        downloads: dict[str, list[tuple[Client, nn.Module]]] = {}
        taking_part: set[int] = set()
        for pool in POOLS:
            members = self.pool_ids[pool]
            count = min(self.clients_per_round, len(members))
            chosen = sorted(int(n) for n in federation.rng.selection.choice(members, size=count, replace=False))
            taking_part.update(chosen)
            downloads[pool] = self.download(pool, chosen, federation, ledger)
        works = [self.pool_work(pool, model, client, federation) for pool in POOLS
                 for client, model in downloads[pool]]
        losses = phase_losses(runner.run_phase(works))  # both pools' clients train in one phase
        grads = {pool: self.upload(pool, downloads[pool], federation, ledger) for pool in POOLS}
        extra = self.server_update(round_, federation, runner, grads)
        return RoundResult(
            senders=tuple(sorted(taking_part)),
            alpha=self.round_alpha(),
            train_loss=nanmean(losses),
            num_participants=len(taking_part),
            extra=extra,
        )

    def download(
        self, pool: str, chosen: Sequence[int], federation: Federation, ledger: CommunicationLedger
    ) -> list[tuple[Client, nn.Module]]:
        """Clients ``chosen`` download the pool's server model into their copy of it; returns who got it, with the
        copy (a lost download: the client sits the round out)."""
        server = federation.server[pool]
        start = server.state_dict()
        downloaded = []
        for n in chosen:
            client = federation.clients[n]
            if not ledger.give_back(-1, n, server):
                continue
            ledger.reaches(n, -1)  # whether its upload will go through, drawn in the order of a download-train-upload
            model = pool_model(client, pool)
            steps.load_weights(model, start)
            downloaded.append((client, model))
        return downloaded

    def upload(
        self, pool: str, downloaded: list[tuple[Client, nn.Module]], federation: Federation, ledger: CommunicationLedger
    ) -> dict[str, Tensor] | None:
        """The trained copies go back to the server; returns the pseudo-gradient per parameter (None when no update
        arrived). The clients' average of the floating buffers (BatchNorm statistics) is kept for :meth:`apply`,
        which sets the server's buffers to it."""
        import torch

        server = federation.server[pool]
        states, weights = [], []
        for client, model in downloaded:
            if not ledger.send(client.id, -1, model):  # it fails before uploading and keeps its local model
                continue
            num_train = len(self.train_idx(pool, client))
            if num_train > 0:
                states.append(model.state_dict())
                weights.append(num_train)
        if not states:
            return None
        average = steps.weighted_average(states, weights)
        self.buffers[pool] = {n: average[n] for n, b in server.named_buffers() if torch.is_floating_point(b)}
        return {name: p.detach() - average[name] for name, p in server.named_parameters()}

    def pool_work(self, pool: str, model: nn.Module, client: Client, federation: Federation) -> ClientWork | None:
        """``local_epochs`` of SGD of the client's copy ``model`` of ``pool``'s server model on what it trains on in
        that pool (:meth:`train_idx`)."""
        from lit_fl.data.partition import class_proportions
        from lit_fl.steps.phase import ClientWork

        idx = self.train_idx(pool, client)
        if self.local_epochs == 0 or len(idx) == 0:
            return None
        proportions = client.class_proportions
        if pool in self.pool_idx:
            proportions = class_proportions(federation.data.train_y[idx.to(federation.data.train_y.device)],
                                            federation.num_classes)
        step = steps.LocalTraining(model, proportions, self.loss, self.optimizer)
        return ClientWork(client.id, step, self.batches(federation, idx, self.local_epochs))

    @abstractmethod
    def server_update(
        self, round_: int, federation: Federation, runner: StepRunner, grads: Mapping[str, dict[str, Tensor] | None]
    ) -> dict[str, float]:
        """Update the server models from the pools' pseudo-gradients; returns the round's extra metrics
        (the same keys every round)."""

    def round_alpha(self) -> float:
        return float("nan")

    # -- server side -------------------------------------------------------------------------------------

    def lr_scale(self, round_: int) -> float:
        """Linear decay to zero over ``decay_rounds`` (1 at round 1), or 1."""
        if self.decay_rounds is None:
            return 1.0
        return max(0.0, 1.0 - (round_ - 1) / self.decay_rounds)

    def apply(self, pool: str, update: Mapping[str, Tensor], federation: Federation, round_: int) -> None:
        """One FedAdam step of the pool's server model along ``update``; its floating buffers become the
        clients' average of the round (no Adam step for statistics)."""
        import torch

        server = federation.server[pool]
        self.optimizers[pool].step(server, update, self.server_lrs[pool] * self.lr_scale(round_))
        averages = self.buffers.pop(pool, {})
        with torch.no_grad():
            for name, buffer in server.named_buffers():
                if name in averages:
                    buffer.copy_(averages[name])

    def distill(self, federation: Federation, runner: StepRunner, round_: int) -> tuple[dict[str, nn.Module], float]:
        """Codistillation from the current server models: returns the trained students (copies; the server
        models are untouched) and the mean distillation loss per student and batch."""
        snapshots = [copy.deepcopy(federation.server[pool]) for pool in POOLS]
        students = [copy.deepcopy(federation.server[pool]) for pool in POOLS]
        scale = self.lr_scale(round_)
        step = steps.ServerCodistillation(
            students,
            snapshots,
            [self.distill_lrs[pool] * scale for pool in POOLS],
            temperature=self.temperature,
            student_reg=self.student_reg,
        )
        loss = runner.run_server_step(step, self.distill_batches(federation)) / len(POOLS)
        return dict(zip(POOLS, students)), loss

    def distill_batches(self, federation: Federation) -> Iterator[tuple[Tensor, Tensor]]:
        """``distill_steps`` shuffled batches of the distillation set (the held-out slice, or ``data.proxy.size``
        samples of it; epochs repeat as needed). The labels are carried along but never used."""
        from lit_fl.data.batches import ClientBatches

        data, idx = federation.data, federation.proxy_idx
        assert idx is not None  # setup refuses another dataset's proxy
        per_epoch = -(-len(idx) // self.distill_batch_size)
        batches = ClientBatches(
            data.train_x,
            data.train_y,
            idx,
            self.distill_batch_size,
            federation.rng.data_order,
            epochs=-(-self.distill_steps // per_epoch),
            augment=data.augment,
            black=data.black,
        )
        out = islice(iter(batches), self.distill_steps)
        if self.distill_augment:
            seed = int(federation.rng.algorithm.integers(2**62))
            return _flip_and_mixup(out, seed)
        return out

    # -- state -------------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "large_clients": list(self.pool_ids.get(LARGE, [])),
            "fedadam": {pool: opt.state_dict() for pool, opt in self.optimizers.items()},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["large_clients"]) != list(self.pool_ids.get(LARGE, [])):
            raise ConfigError(
                f"checkpoint: high-capacity clients {state['large_clients']} differ from "
                f"{self.pool_ids.get(LARGE)} of the config"
            )
        for pool, opt in self.optimizers.items():
            opt.load_state_dict(state["fedadam"][pool])


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

    def server_update(
        self, round_: int, federation: Federation, runner: StepRunner, grads: Mapping[str, dict[str, Tensor] | None]
    ) -> dict[str, float]:
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

    def server_update(
        self, round_: int, federation: Federation, runner: StepRunner, grads: Mapping[str, dict[str, Tensor] | None]
    ) -> dict[str, float]:
        import torch

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


# -- helpers ---------------------------------------------------------------------------------------------


def merge_updates(g: Mapping[str, Tensor], delta: Mapping[str, Tensor], alpha: float) -> dict[str, Tensor]:
    """Eq. 2: ``alpha * g + (1 - alpha) * delta * ||g|| / ||delta||`` with L2 norms over all entries
    (``g`` itself for ``alpha = 1``; ``delta`` contributes nothing when its norm is 0)."""
    if alpha == 1.0:
        return dict(g)
    g_norm, d_norm = global_norm(g), global_norm(delta)
    scale = g_norm / d_norm if d_norm > 0 else 0.0
    return {name: alpha * g[name] + ((1.0 - alpha) * scale) * delta[name] for name in g}


def global_norm(tensors: Mapping[str, Tensor]) -> float:
    """L2 norm of all entries together, accumulated in float64."""
    return math.sqrt(sum(float(t.detach().double().pow(2).sum()) for t in tensors.values()))


def check_pool_domains(pool_domains: Mapping[str, str] | None) -> dict[str, str]:
    """``pool_domains`` as a dict (empty for None); one line for a key that is not a pool."""
    out = dict(pool_domains or {})
    for pool, domain in out.items():
        if pool not in POOLS:
            raise ConfigError(f"algorithm.pool_domains: {pool!r} is not a pool; allowed: {', '.join(POOLS)}")
        if not isinstance(domain, str):
            raise ConfigError(f"algorithm.pool_domains.{pool}: {domain!r} is not a domain name; allowed: a domain of "
                              "the data (stackoverflow: question, answer)")
    return out


def resolve_large_clients(spec: float | Sequence[int], num_clients: int, seed: int) -> list[int]:
    """The high-capacity client ids: ``round(f * N)`` (at least 1) drawn once from ``seed``, or a list."""
    if isinstance(spec, (int, float)) and not isinstance(spec, bool):
        count = max(1, min(num_clients, int(math.floor(spec * num_clients + 0.5))))
        rng = np.random.default_rng([seed, 7])
        return sorted(int(n) for n in rng.choice(num_clients, size=count, replace=False))
    ids = [int(n) for n in spec]
    bad = [n for n in ids if not 0 <= n < num_clients]
    if bad:
        raise ConfigError(f"algorithm.large_clients: {bad} are not client ids (allowed: 0..{num_clients - 1})")
    if len(set(ids)) != len(ids):
        raise ConfigError(f"algorithm.large_clients: repeated client ids in {ids}")
    return sorted(ids)


def pool_model(client: Client, pool: str) -> nn.Module:
    return client.model if pool == SMALL else client.extras[LARGE]


def _flip_and_mixup(batches: Iterator[tuple[Tensor, Tensor]], seed: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Paper C.1 on distillation data: random horizontal and vertical flips per sample, then mixup with
    ``lambda ~ Beta(2, 2)`` per batch. Draws on CPU from ``seed`` (identical on every device)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    for x, y in batches:
        n = len(x)
        h = (torch.rand(n, generator=g) < 0.5).to(x.device).view(-1, 1, 1, 1)
        v = (torch.rand(n, generator=g) < 0.5).to(x.device).view(-1, 1, 1, 1)
        x = torch.where(h, x.flip(3), x)
        x = torch.where(v, x.flip(2), x)
        # Beta(2, 2) from the same generator: the 2nd-smallest of 3 uniforms follows Beta(2, 2)
        lam = float(torch.rand(3, generator=g).sort().values[1])
        perm = torch.randperm(n, generator=g).to(x.device)
        yield lam * x + (1.0 - lam) * x[perm], y


def _memory_format(model: nn.Module) -> torch.memory_format:
    """The layout of the federation's models (channels-last when their 4-D weights are)."""
    import torch

    for p in model.parameters():
        if p.dim() == 4:
            channels_last = p.is_contiguous(memory_format=torch.channels_last)
            return torch.channels_last if channels_last else torch.contiguous_format
    return torch.contiguous_format
