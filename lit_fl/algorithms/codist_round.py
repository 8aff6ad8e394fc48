"""Knowledge codistillation's round on the server round contract (papers/codistillation.txt Algorithms 1-2;
:mod:`lit_fl.algorithms.server`): each pool is a group, its sampled members the participants, its uploads a
pseudo-gradient for FedAdam, and the distillation of both server models runs on the server."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.codist_distill import distill_batches
from lit_fl.algorithms.codist_pools import LARGE, POOLS, SMALL, pool_member
from lit_fl.algorithms.server import SERVER, ServerAlgorithm
from lit_fl.algorithms.updates import average_updates
from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.algorithms.base import RoundResult
    from lit_fl.algorithms.server_optimizers import FedAdam
    from lit_fl.algorithms.updates import ClientUpdate
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner


class CodistRound(ServerAlgorithm):
    """The round of :class:`~lit_fl.algorithms.codistillation.Codistillation` (not registered; that class's
    ``__init__`` and ``setup`` set the attributes below): :class:`ServerAlgorithm`'s round with the two pools as
    groups; a subclass writes :meth:`server_update` from :meth:`pseudo_gradients`, :meth:`apply` and
    :meth:`distill`."""

    #: each pool samples its members (:meth:`participants`), whoever is there
    selects_available = False
    small_arch: str
    large_arch: str
    clients_per_round: int
    #: pool -> its FedAdam, its server learning rate, its distillation learning rate
    optimizers: dict[str, FedAdam]
    server_lrs: dict[str, float]
    distill_lrs: dict[str, float]
    distill_steps: int
    distill_batch_size: int
    temperature: float
    student_reg: float
    distill_augment: bool
    decay_rounds: int | None
    pool_domains: dict[str, str]
    #: pool -> its client ids (``P``, ``P_H``)
    pool_ids: dict[str, list[int]]
    #: pool -> client id -> the client's train indices in the pool's domain (pools of ``pool_domains`` only)
    pool_idx: dict[str, dict[int, Tensor]]
    #: pool -> client id -> the client as a member of the pool (:meth:`member`), the round's participants
    members: dict[str, dict[int, Client]]
    buffers: dict[str, dict[str, Tensor]]  # the round's averaged buffers, until applied
    #: the round being run (:meth:`run_round`), whose number the server update reads
    current_round: int = 0

    # -- pools and their members -------------------------------------------------------------------------

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

    def member(self, pool: str, client: Client, federation: Federation) -> Client:
        """``client`` as a member of ``pool`` (:func:`~lit_fl.algorithms.codist_pools.pool_member`): over its model of
        that pool (its own small model, its extra ``large``), training on :meth:`train_idx`."""
        from lit_fl.data.partition import class_proportions

        idx = self.train_idx(pool, client)
        proportions = client.class_proportions
        if pool in self.pool_idx:
            proportions = class_proportions(federation.data.train_y[idx.to(federation.data.train_y.device)],
                                            federation.num_classes)
        if pool == SMALL:
            return pool_member(client, self.small_arch, client.regular_model, idx, proportions)
        return pool_member(client, self.large_arch, client.extras[LARGE], idx, proportions)

    def server_groups(self, federation: Federation) -> list[str]:
        return list(POOLS)

    def group_of(self, client: Client) -> str:
        """The pool of a member (a federation's client: the small pool's)."""
        return LARGE if self.members.get(LARGE, {}).get(client.id) is client else SMALL

    # -- the round ---------------------------------------------------------------------------------------

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        """:class:`ServerAlgorithm`'s round; its number is the server update's (the rates' decay, the period),
        its alpha :meth:`round_alpha`."""
        self.current_round = round_
        result = super().run_round(round_, federation, runner, ledger)
        result.alpha = self.round_alpha()
        return result

    def participants(self, federation: Federation) -> list[Client]:
        """Each pool samples ``clients_per_round`` of its members (at most all), small pool first and independently
        (paper Algorithm 1 line 3); a client sampled by both takes part once per pool."""
        chosen: list[Client] = []
        for pool in POOLS:
            members = self.pool_ids[pool]
            count = min(self.clients_per_round, len(members))
            picked = sorted(int(n) for n in federation.rng.selection.choice(members, size=count, replace=False))
            chosen += [self.members[pool][n] for n in picked]
        return chosen

    def broadcast(self, client: Client, starts: dict[str, dict[str, Any]], federation: Federation,
                  ledger: CommunicationLedger) -> ClientWork | None:
        """The contract's download of the member's pool model and its ``local_epochs`` of SGD; a member whose
        download arrived draws right away whether its upload will go through (faults in the order of a
        download-train-upload)."""
        work = super().broadcast(client, starts, federation, ledger)
        if ledger.returns(SERVER, client.id):  # recalled, not drawn: whether the download arrived
            ledger.reaches(client.id, SERVER)
        return work

    def round_alpha(self) -> float:
        return float("nan")

    # -- server side -------------------------------------------------------------------------------------

    def pseudo_gradients(self, updates: Sequence[ClientUpdate],
                         federation: Federation) -> dict[str, dict[str, Tensor] | None]:
        """Per pool, ``g = W_server - sum_n d_n W_n / sum_n d_n`` over its arrived updates, per parameter (None
        when none arrived). The average's floating buffers (BatchNorm statistics) are kept for :meth:`apply`,
        which sets the server's buffers to them."""
        import torch

        averages = average_updates(updates)
        self.buffers = {}
        grads: dict[str, dict[str, Tensor] | None] = {}
        for pool in POOLS:
            average, server = averages.get(pool), federation.server[pool]
            if average is None:
                grads[pool] = None
                continue
            self.buffers[pool] = {n: average[n] for n, b in server.named_buffers() if torch.is_floating_point(b)}
            grads[pool] = {name: p.detach() - average[name] for name, p in server.named_parameters()}
        return grads

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
        """``distill_steps`` batches of ``distill_batch_size`` of the distillation set
        (:func:`~lit_fl.algorithms.codist_distill.distill_batches`)."""
        return distill_batches(federation, self.distill_steps, self.distill_batch_size, self.distill_augment)
