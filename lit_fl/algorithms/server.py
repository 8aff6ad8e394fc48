"""The server round contract (pfl-research's split: the framework owns the cohort loop, a method writes what its
paper adds). Every server method's round is

    select -> broadcast -> client work (one phase, :meth:`StepRunner.run_phase`) -> collect -> update transforms
    -> server update -> send back

:meth:`ServerAlgorithm.run_round` runs it; a method overrides only the hooks its paper changes:

* :meth:`~ServerAlgorithm.select`: the round's cohort (``client_fraction`` of the clients, FedAvg's ``S_t``);
* :meth:`~ServerAlgorithm.participants`: the round's participants, one :class:`~lit_fl.federation.state.Client`
  each (default: the clients of :meth:`select`); a method whose clients train models of several groups in one round
  presents a client once per model (knowledge codistillation's pools);
* :meth:`~ServerAlgorithm.broadcast`: what the server sends client ``k`` through the ledger and the work ``k`` then
  does (default: the server model of the client's group, loaded into the client, then :meth:`local_work`);
* :meth:`~ServerAlgorithm.collect`: what ``k`` sends back, as a :class:`~lit_fl.algorithms.updates.ClientUpdate`
  (default: its model's state, weighted by :meth:`~ServerAlgorithm.update_weight`, its sample count); None when
  nothing arrives;
* :meth:`~ServerAlgorithm.collect_all`: the round's uploads, every participant's (default: :meth:`collect` of each
  participant that worked); a method whose uploads are computed in one more phase over the participants (their
  models' eval-mode outputs on public data: KT-pFL, FDmeta) overrides it;
* :meth:`~ServerAlgorithm.update_transforms`: the chain every collected update passes through (empty by default);
* :meth:`~ServerAlgorithm.server_update`: how the server combines the updates into its models; returns the round's
  extra metrics;
* :meth:`~ServerAlgorithm.send_back`: a second exchange after the server update, what the server sends the
  participants then and their work on it as one phase (default: none); federated distillation's targets and the
  clients' digest of them (KT-pFL, FDmeta); returns more extra metrics.

Every transfer goes through the ledger to or from :data:`~lit_fl.federation.ledger.SERVER`, so faults and traffic
are the same for every server method. A client whose download is lost, or that has nothing to train, does no work
and sends nothing; one whose upload is lost is left out of the server update. On the virtual clock
(:mod:`lit_fl.system`) the round also cuts the works to the deadline before the phase (partial work,
:func:`cut_to_deadline`) and leaves out the updates that did not arrive in time or whose client left, before the
update transforms (:func:`in_time`): a method's hooks see only what arrived.
"""

from __future__ import annotations

import copy
import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar

from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses
from lit_fl.algorithms.requirements import SERVER_BASED
from lit_fl.algorithms.updates import GLOBAL, ClientUpdate, UpdateTransform, apply_transforms
from lit_fl.federation.endpoints import SERVER
from lit_fl.federation.selection import cohort, select_available, select_fraction, select_poisson

if TYPE_CHECKING:
    from collections.abc import Sequence

    from torch import nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork, WorkResult
    from lit_fl.steps.runner import StepRunner

__all__ = ["GLOBAL", "SERVER", "ServerAlgorithm", "check_checkpoint"]


class ServerAlgorithm(Algorithm):
    """Base of the methods with a central server (not registered). Subclasses set ``client_fraction`` in their
    ``__init__`` and override the hooks of the module docstring that their paper changes."""

    #: every sampled client talks to the server, one link each way (a subclass adds what else it needs, e.g.
    #: ``ServerAlgorithm.requires + (ONE_ARCHITECTURE,)``)
    requires = (SERVER_BASED,)
    #: the server's model is the clients' (``"global"``): it reports that model (``server_acc/global``)
    reports: ClassVar[str] = "server_acc/global"
    #: False: nothing goes down at a round's start (:meth:`broadcast`); each client trains its own model
    #: (:meth:`local_work`): the methods whose clients exchange class scores, not weights (KT-pFL, FDmeta, DS-FL)
    sends_model: ClassVar[bool] = True
    client_fraction: float = 1.0
    #: True: the uploads are the clients' models and :meth:`server_update` averages them (weights as given), so
    #: user-level DP (``privacy.level user``) can clip and noise them; others refuse it in one line
    user_level_dp: ClassVar[bool] = False
    #: an upload's ``extra`` entry (a list of tensors) that changes server state beside the model (SCAFFOLD's
    #: ``delta_c``): user-level DP clips it together with the model delta (one norm) and noises its sum
    private_extra: ClassVar[str | None] = None
    #: :meth:`select` draws among the clients there (``system.availability_trace``)
    selects_available: ClassVar[bool] = True
    #: True: the method defines partial work (``system.partial_work``): a client that cannot finish its local work
    #: by the deadline sends what it trained on a prefix of its batches (FedProx's variable local work). Its uploads
    #: are the clients' models and its local work one pass over :class:`~lit_fl.data.batches.ClientBatches`
    partial_work: ClassVar[bool] = False

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Create the server models (:meth:`server_groups`), each from the first client's initialisation of its
        group."""
        for group in self.server_groups(federation):
            if group not in federation.server:
                first = next(c for c in federation.clients if self.group_of(c) == group)
                federation.server[group] = copy.deepcopy(first.regular_model)

    def server_groups(self, federation: Federation) -> list[str]:
        """The names of the server models the clients' updates join (default: one, :data:`GLOBAL`)."""
        return [GLOBAL]

    def group_of(self, client: Client) -> str:
        """The server model that client ``client`` receives and updates (default: :data:`GLOBAL`)."""
        return GLOBAL

    # -- the round ---------------------------------------------------------------------------------------

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        selected = self.participants(federation)
        # the server models' own tensors, not copies: a server model changes only in server_update
        starts = {group: {k: v.detach() for k, v in federation.server[group].state_dict().items()}
                  for group in {self.group_of(c) for c in selected} if group in federation.server}
        works = [self.broadcast(client, starts, federation, ledger) for client in selected]
        works = cut_to_deadline(selected, works, federation, ledger)
        results = runner.run_phase(works)
        works, cut = done_in_time(works)
        collected = self.collect_all(selected, works, results, federation, runner, ledger)
        arrived, time_metrics = in_time([u for u in collected if u is not None], federation, ledger,
                                        self.cohort_size(federation), cut)
        updates = apply_transforms(self.update_transforms(), arrived)
        updates, privacy_metrics = self._private(updates, federation, round_)
        extra = self.server_update(updates, federation, runner)
        result = RoundResult(senders=tuple(u.client for u in updates if u.client != SERVER),
                             train_loss=nanmean(phase_losses(results)),
                             extra={**extra, **privacy_metrics, **time_metrics})
        return self.send_back(selected, updates, result, federation, runner, ledger)

    def select(self, federation: Federation) -> list[int]:
        """``round(client_fraction * N)`` distinct clients (at least one), sorted (``federation.rng.selection``);
        under user-level DP with ``privacy.client_sampling poisson``, each client with probability
        ``client_fraction`` (possibly none), as its accounting assumes."""
        if federation.privacy is not None and federation.privacy.config.client_sampling == "poisson":
            return select_poisson(federation, self.client_fraction)
        system = federation.system_config
        if system is not None and (system.over_selection > 0 or system.availability_trace is not None):
            return select_available(federation, self.client_fraction, system.over_selection)
        return select_fraction(federation, self.client_fraction)

    def cohort_size(self, federation: Federation) -> int:
        """How many updates a round uses at most: ``round(client_fraction * N)`` (over-selection keeps that many)."""
        return cohort(federation.num_clients, self.client_fraction)

    def participants(self, federation: Federation) -> list[Client]:
        """The round's participants, in the order they are broadcast to, trained and collected: the clients of
        :meth:`select`. A method whose clients train models of several groups in one round returns one
        :class:`~lit_fl.federation.state.Client` per model instead: with the client's id (the ledger's endpoint),
        over that model and the samples it trains on, so :meth:`group_of` tells its group; training it trains the
        client's model (knowledge codistillation's pool members,
        :meth:`~lit_fl.algorithms.codist_round.CodistRound.member`)."""
        return [federation.clients[cid] for cid in self.select(federation)]

    def broadcast(self, client: Client, starts: dict[str, dict[str, Any]], federation: Federation,
                  ledger: CommunicationLedger) -> ClientWork | None:
        """The server sends ``client`` its group's model (``starts``: each server model's state at the round's start);
        on arrival the client starts from it and does :meth:`local_work`. None: the download was lost. Without
        :attr:`sends_model`: :meth:`local_work` alone."""
        if not self.sends_model:
            return self.local_work(client, federation)
        group = self.group_of(client)
        if not ledger.give_back(SERVER, client.id, federation.server[group]):
            return None
        client.set_weights(starts[group])
        return self.local_work(client, federation)

    def collect(self, client: Client, work: ClientWork, federation: Federation,
                ledger: CommunicationLedger) -> ClientUpdate | None:
        """``client`` sends its trained model to the server: its state, weighted by its sample count ``n_k``; None
        when the upload fails."""
        if not ledger.send(client.id, SERVER, client.model):
            return None
        return ClientUpdate(client.id, model_state(client.model), self.update_weight(client), self.group_of(client))

    def collect_all(self, clients: Sequence[Client], works: Sequence[ClientWork | None], results: Sequence[WorkResult],
                    federation: Federation, runner: StepRunner,
                    ledger: CommunicationLedger) -> list[ClientUpdate | None]:
        """The round's uploads, in the participants' order (``works``: each one's work of the client phase,
        ``results``: what each reported): by default :meth:`collect` of every participant that worked. Override it
        when the uploads are values the client phase computed (a predict phase's ``result.value``: FedMD) or are
        computed in one more phase over the participants (one :meth:`StepRunner.run_phase`: KT-pFL, DS-FL)."""
        return [self.collect(client, work, federation, ledger)
                for client, work in zip(clients, works) if work is not None]

    def update_weight(self, client: Client) -> float:
        """``client``'s weight in its group's aggregate (default: its sample count ``n_k``, FedAvg's)."""
        return float(client.num_train)

    def update_transforms(self) -> Sequence[UpdateTransform]:
        """The chain of transforms every collected update passes through before :meth:`server_update` (none)."""
        return ()

    def _private(self, updates: list[ClientUpdate], federation: Federation,
                 round_: int) -> tuple[list[ClientUpdate], dict[str, float]]:
        """User-level DP (``privacy.level user``, :mod:`lit_fl.privacy.user_level`): the updates clipped and noised
        against the broadcast model, and the round's privacy metrics; unchanged without it."""
        state = federation.privacy_state
        if federation.privacy is None or state is None:
            return updates, {}
        from lit_fl.privacy.user_level import private_round

        start = {k: v.detach() for k, v in federation.server[GLOBAL].state_dict().items()}
        key = self.private_extra  # SCAFFOLD's control change: clipped with the model, its sum noised
        side = [_indexed(u.extra[key]) for u in updates] if key else []
        side_like = _indexed(self.private_extra_like()) if key else None
        private = private_round(federation.privacy, start, [u.values for u in updates], state.clip_norm, state.noise,
                                round_, side, side_like)
        state.clip_norm = private.clip_norm  # the next round's (adaptive clipping)
        sides = [{key: _listed(s)} for s in private.side] if key else [{}] * max(len(updates), 1)
        if not updates:  # an empty cohort: the noise alone moves the model
            return [ClientUpdate(SERVER, private.values[0], 1.0, GLOBAL, sides[0])], private.metrics
        return [dataclasses.replace(u, values=v, weight=1.0, extra={**u.extra, **e})
                for u, v, e in zip(updates, private.values, sides)], private.metrics

    def private_extra_like(self) -> list[Any]:
        """The shapes (tensors like them) of :attr:`private_extra`'s entry, for the noise of a round without
        clients."""
        raise NotImplementedError(f"{self.name} sets private_extra and must define private_extra_like")

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Combine the round's ``updates`` (possibly none) into the server models; the round's extra metrics."""
        raise NotImplementedError(f"{self.name} must define server_update")

    def send_back(self, clients: Sequence[Client], updates: Sequence[ClientUpdate], result: RoundResult,
                  federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> RoundResult:
        """The round's second exchange, after :meth:`server_update`: what the server sends the participants
        ``clients`` (through the ledger, from :data:`SERVER`) and their work on it, as one phase; returns the round's
        ``result`` with what that adds (``result.with_extra(...)``). Default: none. Federated distillation's targets
        and the clients' digest of them (FedMD, DS-FL, KT-pFL, FDmeta)."""
        return result


def _indexed(tensors: Sequence[Any]) -> dict[str, Any]:
    """A list of tensors as named entries (``"0"``, ``"1"``, ...), the form the DP mechanism clips and noises."""
    return {str(i): t for i, t in enumerate(tensors)}


def _listed(entries: dict[str, Any]) -> list[Any]:
    """:func:`_indexed`'s entries as the list again."""
    return [entries[str(i)] for i in range(len(entries))]


def model_state(model: nn.Module) -> dict[str, Any]:
    """``model``'s state dict, detached (what an upload of the whole model carries)."""
    return {k: v.detach() for k, v in model.state_dict().items()}


def check_checkpoint(what: str, saved: Any, built: Any) -> None:
    """Refuse, in one line, a checkpoint whose ``what`` (``saved``: the server's architecture, a shape, the clients of
    a pool) is not what this config builds (``built``): the run it resumes was another."""
    if saved != built:
        from lit_fl.errors import ConfigError

        raise ConfigError(f"checkpoint: {what} {saved}, this config builds {built}")


def cut_to_deadline(clients: Sequence[Client], works: list[Any], federation: Federation,
                    ledger: CommunicationLedger) -> list[Any]:
    """Partial work (``system.partial_work``, :mod:`lit_fl.system.partial`): each work cut to the batches its client
    can train and upload (its model) by the deadline; unchanged otherwise."""
    system = federation.system_config
    if system is None or not system.partial_work or federation.systems is None or system.deadline_s is None:
        return works
    from lit_fl.federation.ledger import model_megabytes
    from lit_fl.system.partial import within_deadline

    return [within_deadline(work, ledger.events, federation.systems, SERVER, model_megabytes(client.model),
                            system.deadline_s) for client, work in zip(clients, works)]


def done_in_time(works: list[Any]) -> tuple[list[Any], tuple[int, int]]:
    """After the client phase (any works: training or value works): the works whose clients did something (a client
    whose every batch fell past the deadline sends nothing), and how many works partial work cut and how many it left
    empty."""
    from lit_fl.system.partial import cut

    cuts = [cut(work) for work in works]
    kept = [None if empty else work for work, (_, empty) in zip(works, cuts)]
    return kept, (sum(c and not e for c, e in cuts), sum(e for _, e in cuts))


def in_time(updates: list[ClientUpdate], federation: Federation, ledger: CommunicationLedger,
            cohort_size: int, cut: tuple[int, int] = (0, 0)) -> tuple[list[ClientUpdate], dict[str, float]]:
    """The updates a server uses under the virtual clock's policies, in their order: those that arrived by the
    deadline (``system.deadline_s``; ``late_updates``, with the clients partial work left with nothing in time:
    ``cut``'s second count) and the first ``cohort_size`` to arrive (``system.over_selection``). The time the server
    stopped waiting goes to ``ledger.cutoff_s``: the last kept update's under over-selection, else the deadline when
    an update came late. Without policies: all. (A client that left before its upload arrived sent nothing: the
    ledger failed its transfer.)"""
    system = federation.system_config
    if system is None or not system.policies or federation.systems is None:
        return updates, {}
    from lit_fl.system.clock import round_time

    finished = round_time(ledger.events, federation.systems, SERVER).finished
    arrivals = sorted((finished.get(u.client, 0.0), i) for i, u in enumerate(updates))
    deadline = system.deadline_s
    on_time = [(t, i) for t, i in arrivals if deadline is None or t <= deadline]
    kept = on_time[:cohort_size] if system.over_selection > 0 else on_time
    partial, empty = cut
    if len(kept) < len(arrivals) or empty:
        full = system.over_selection > 0 and len(kept) == cohort_size
        ledger.cutoff_s = kept[-1][0] if full else deadline
    metrics = {"late_updates": float(len(arrivals) - len(kept) + empty)}
    if system.partial_work:
        metrics["partial_updates"] = float(partial)
    return [updates[i] for i in sorted(i for _, i in kept)], metrics
