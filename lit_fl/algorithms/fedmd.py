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
   server: ledger ``send(k, -1, Payload([P x classes]))``.
3. Aggregate (:func:`consensus`): ``f~(x_j) = 1/|S'| sum_{k in S'} f_k(x_j)`` over the clients ``S'`` whose scores
   arrived.
4. Distribute: the server sends the consensus to every client of ``S`` (``give_back(-1, k, Payload)``).
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

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Federation
    from lit_fl.steps.phase import ClientWork
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
        local_epochs: epochs of the revisit on the private data (FedORION sec. 4.2.1: 10).
        loss: the clients' supervised loss (``ce``).
        lr: the clients' SGD learning rate, digest and revisit (FedORION sec. 4.1: 0.01).
        momentum: the clients' SGD momentum (FedORION sec. 4.1: 0.9).
        weight_decay: the clients' SGD weight decay (FedORION names none: 0).
        batch_size: the clients' batch size, digest and revisit (FedORION sec. 4.1: 32).
    """

    #: FedORION sec. 4.1: FedMD "reports the average of individual accuracy of all the client models"
    reports = "global_acc"

    sequence_tasks = True  # per-token consensus logits; the digest's L1/MSE over positions whose input is not PAD
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)

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

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        from lit_fl.federation.ledger import Payload

        if round_ == 1 and self.warmup_epochs > 0:
            runner.run_phase([self.warmup_work(c.id, federation) for c in federation.clients])
        selected = self.select(federation)
        public = self.public_inputs(federation)
        x = public[self.round_subset(federation, len(public)).to(public.device)]

        arrived, scores = [], []
        for cid, score in zip(selected, self.public_scores(federation, runner, selected, x)):  # Communicate
            if ledger.send(cid, -1, Payload([score])):
                arrived.append(cid)
                scores.append(score)
        target = consensus(scores) if scores else None  # Aggregate
        works: list[ClientWork | None] = []
        for cid in selected:  # Distribute, Digest
            got = target is not None and ledger.give_back(-1, cid, Payload([target]))
            works.append(self.digest_work(cid, federation, x, target) if got else None)
        digest = phase_losses(runner.run_phase(works))
        revisit = self.local_phase([federation.clients[cid] for cid in selected], federation, runner)  # Revisit
        return RoundResult(
            senders=tuple(arrived),
            train_loss=nanmean(revisit),
            num_participants=len(selected),
            extra={"digest_loss": nanmean(digest), "public_size": float(len(x))},
        )

    def state_dict(self) -> dict[str, Any]:
        return {}  # nothing carried across rounds but the clients' models (checkpointed by the federation)
