"""FedMD: heterogenous federated learning via model distillation (Li & Wang 2019, arXiv 1910.03581), Algorithm 1;
docs/baselines.md "FedMD".

No server model: every client keeps its own model, of its own architecture, and the method is evaluated on the
clients' models (``global_acc``: each client's model on the common test set, averaged; FedORION sec. 4.1: FedMD
reports "the average of individual accuracy of all the client models"). Each round (Algorithm 1, "Collaborative
training"):

1. ``S``: ``round(client_fraction * N)`` clients drawn from ``federation.rng.selection`` (FedORION sec. 4.2.1: 30%;
   FedMD lets every party take part).
2. Communicate: on this round's public subset ``x_1..x_P`` (``public_size`` samples, all by default) every client
   ``k`` of ``S`` computes its class scores ``f_k(x_j)`` (logits, eval mode: a predict phase) and sends them to the
   server: ledger ``send(k, SERVER, Payload([P x classes]))``.
3. Aggregate (:func:`consensus`): ``f~(x_j) = 1/|S'| sum_{k in S'} f_k(x_j)`` over the clients ``S'`` whose scores
   arrived.
4. Distribute: the server sends the consensus to every client of ``S`` (``give_back(SERVER, k, Payload)``).
5. Digest: each client that received it trains its model to approach the consensus on the public subset,
   ``digest_epochs`` epochs of :class:`~lit_fl.steps.TargetDistillation` with ``digest_loss`` (``l1``: mean
   ``|f_k(x) - f~(x)|`` on logits, the reference code's ``mean_absolute_error`` on the model without its softmax).
6. Revisit: each client of ``S`` trains on its private data for ``local_epochs`` epochs (CE).

Transfer learning (Algorithm 1's first phase: train on the labeled public data, then on the private data) needs
labels of the public data; FedORION's proxy data (CIFAR-100 for CIFAR-10) is unlabeled for the task, so the public
half is skipped; ``warmup_epochs > 0`` runs the private half (every client, before round 1's communication).

Defaults: FedORION's setting (papers/fedorion.txt sec. 4.1, 4.2.1): SGD momentum 0.9, client lr 0.01, batch 32 (for
the digest too: "the batch size on the client side is always kept to 32"), 10 local epochs, 30% of the clients per
round, no weight decay; one digest epoch (FedMD's reference configuration ``N_logits_matching_round = 1``).

The round is :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s without a server model: step 1 is
:meth:`FedMD.participants`, the predict phase of step 2 the client phase (:meth:`FedMD.broadcast`), its upload
:meth:`FedMD.collect_all`, step 3 :meth:`FedMD.server_update`, steps 4-6 :meth:`FedMD.send_back`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl.algorithms.base import RoundResult, nanmean, phase_losses
from lit_fl.algorithms.public_distillation import PublicDistillation
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.constraints import Fraction, NonNegativeInt, PositiveInt

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.algorithms.updates import ClientUpdate
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork, WorkResult
    from lit_fl.steps.predict import PredictWork
    from lit_fl.steps.runner import StepRunner

DigestLoss = Literal["l1", "mse"]


def consensus(scores: Sequence[Tensor]) -> Tensor:
    """FedMD's Aggregate: the uniform mean ``1/m sum_k f_k(x_j)`` of the clients' class scores (each ``P x classes``),
    accumulated in float64 and returned in the first one's dtype."""
    if not scores:
        raise ValueError("consensus needs the scores of at least one client")
    total = sum(s.double() for s in scores)
    return (total / len(scores)).to(scores[0].dtype)


@register_algorithm
class FedMD(PublicDistillation):
    """FedMD (Li & Wang 2019, Algorithm 1) with a sampled share of the clients per round; see the module docstring.

    Args:
        client_fraction: share of the clients sampled each round, ``round(f * N)`` (at least 1). FedORION sec.
            4.2.1: 0.3.
        public_size: public samples per round (a fresh random subset each round, FedMD's "alignment" subset of
            5,000 in its experiments); None = the whole public set every round.
        digest_epochs: epochs over the public subset in the digest (FedMD reference code: 1).
        digest_loss: ``l1`` (FedMD: mean absolute error on the logits) or ``mse``.
        warmup_epochs: epochs of private training of every client before round 1 (the private half of FedMD's
            transfer-learning phase; 0: none, FedORION does not mention one).
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), FedORION's shared setting by default;
            ``local_epochs`` of the revisit, ``lr`` and ``batch_size`` for the digest and the revisit.
    """

    #: FedORION sec. 4.1: FedMD "reports the average of individual accuracy of all the client models"
    reports = "global_acc"

    sequence_tasks = True  # per-token consensus logits; the digest's L1/MSE over positions whose input is not PAD
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)
    #: the round's public subset (set by :meth:`participants`) and consensus (:meth:`server_update`)
    x: Tensor | None = None
    target: Tensor | None = None

    def __init__(
        self,
        client_fraction: Fraction = 0.3,
        public_size: PositiveInt | None = None,
        digest_epochs: NonNegativeInt = 1,
        digest_loss: DigestLoss = "l1",
        warmup_epochs: NonNegativeInt = 0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client_fraction = client_fraction
        self.public_size = public_size
        self.digest_epochs = digest_epochs
        self.digest_loss: DigestLoss = digest_loss
        self.warmup_epochs = warmup_epochs

    def digest_work(self, cid: int, federation: Federation, x: Tensor, target: Tensor) -> ClientWork | None:
        """Client ``cid`` trains its model towards ``target`` (the consensus) on the public inputs ``x``."""
        from lit_fl import steps
        from lit_fl.steps.phase import ClientWork

        if self.digest_epochs == 0:
            return None
        step = steps.TargetDistillation(federation.clients[cid].model, loss=self.digest_loss, target="logits",
                                        optimizer=self.optimizer)
        return ClientWork(cid, step, self.target_batches(federation, x, target, self.batch_size, self.digest_epochs))

    def warmup_work(self, cid: int, federation: Federation) -> ClientWork | None:
        from lit_fl import steps

        client = federation.clients[cid]
        step = steps.LocalTraining(client.model, client.class_proportions, self.loss, self.optimizer)
        return self.work(client, step, federation, self.warmup_epochs)

    # -- the round (ServerAlgorithm's hooks) ---------------------------------------------------------------

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        """The warm-up before round 1 (``warmup_epochs``), then :class:`ServerAlgorithm`'s round."""
        if round_ == 1 and self.warmup_epochs > 0:
            runner.run_phase([self.warmup_work(c.id, federation) for c in federation.clients])
        return super().run_round(round_, federation, runner, ledger)

    def participants(self, federation: Federation) -> list[Client]:
        """Step 1 (``S``), and this round's public subset (step 2's ``x_1..x_P``)."""
        selected = super().participants(federation)
        self.x = self.round_inputs(federation)
        return selected

    def broadcast(self, client: Client, starts: dict[str, dict[str, Any]], federation: Federation,
                  ledger: CommunicationLedger) -> PredictWork:
        """Nothing goes down (the public data is every party's): the client computes its class scores on the
        public subset (the client phase is a predict phase)."""
        from lit_fl.steps.predict import PredictWork

        return PredictWork(client.id, client.model, self.x)

    def collect_all(self, clients: Sequence[Client], works: Sequence[Any], results: Sequence[WorkResult],
                    federation: Federation, runner: StepRunner,
                    ledger: CommunicationLedger) -> list[ClientUpdate | None]:
        """Step 2, Communicate: each client sends its scores (float32 logits) to the server."""
        return [self.upload(client, result.value.float(), ledger) for client, result in zip(clients, results)]

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Step 3, Aggregate: the :func:`consensus` of the scores that arrived (None when none did)."""
        self.target = consensus([u.values["scores"] for u in updates]) if updates else None
        return {}

    def send_back(self, clients: Sequence[Client], updates: Sequence[ClientUpdate], result: RoundResult,
                  federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> RoundResult:
        """Steps 4-6: Distribute the consensus to every client of ``S``, Digest (those that received it), Revisit
        (all of ``S``: the round's ``train_loss``)."""
        got = self.send_targets(clients, self.target, ledger)
        works = [self.digest_work(c.id, federation, self.x, self.target) if g else None for c, g in zip(clients, got)]
        digest = phase_losses(runner.run_phase(works))
        revisit = self.local_phase(clients, federation, runner)
        result.train_loss, result.num_participants = nanmean(revisit), len(clients)
        result.extra = {"digest_loss": nanmean(digest), "public_size": float(len(self.x))}
        return result

    def state_dict(self) -> dict[str, Any]:
        return {}  # nothing carried across rounds but the clients' models (checkpointed by the federation)
