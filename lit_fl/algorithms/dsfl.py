"""DS-FL: distillation-based semi-supervised federated learning (Itahara, Nishio, Koda, Morikura, Yamamoto, IEEE
TMC 2023, arXiv 2008.06180), with entropy reduction aggregation (ERA); docs/baselines.md "DS-FL".

The clients exchange no weights: only their outputs on an unlabeled open (public) dataset. Each round:

1. ``S``: ``round(client_fraction * N)`` clients drawn from ``federation.rng.selection`` (FedORION sec. 4.2.1: 30%).
2. Update: each client of ``S`` trains on its private data, ``local_epochs`` epochs (CE).
3. Prediction and upload: on this round's open subset ``x_1..x_P`` (``public_size`` samples, all by default)
   client ``k`` computes its local logits ``p_k(x_j) = softmax(f_k(x_j))`` (DS-FL's "logits" are the softmax
   outputs; eval mode, a predict phase: :meth:`~lit_fl.algorithms.public_distillation.PublicDistillation.
   public_scores`) and sends them: ledger ``send(k, SERVER, Payload([P x classes]))``.
4. Aggregation (:func:`era`): ``t(x_j) = softmax((1/|S'|) sum_k p_k(x_j) / T)`` over the clients ``S'`` whose
   outputs arrived: ERA sharpens the average with ``T < 1`` (0.1: DS-FL's value); ``aggregation: sa`` is the simple
   average ``(1/|S'|) sum_k p_k`` (DS-FL's baseline aggregation).
5. Server distillation: the global model (``federation.server["global"]``, evaluated as ``server_acc/global``) is
   trained on ``(x_j, t(x_j))`` for ``server_epochs`` epochs, ``KL(t || softmax(f_g))`` with SGD (``server_lr``,
   ``server_momentum``, batches of ``server_batch_size``).
6. Broadcast and distillation: the server sends ``t`` to every client of ``S`` (``give_back(SERVER, k, Payload)``);
   each client that received it trains its model on ``(x_j, t(x_j))`` for ``distill_epochs`` epochs with the
   same KL (= the cross-entropy with soft labels up to a constant), at the clients' SGD settings.

FedORION (sec. 4.1) reports a server model for DS-FL ("test set accuracy of the global server model", WRN40, the
smallest of its pool); DS-FL trains a global model on the open data and the global logits as well. Here: the
smallest architecture of the pool by default (``global_arch``), started from the initialisation of a client of that
architecture. The clients' models are evaluated too (``global_acc``).

Defaults: FedORION's setting (papers/fedorion.txt sec. 4.1, 4.2): clients SGD momentum 0.9, lr 0.01, batch 32, 10
local epochs, 30% of the clients per round; server SGD lr 0.001 momentum 0.9, batch 128 ("for the baselines [...]
we use a batch size of 128"), 5 server epochs per round ("10 local epochs for clients and 5 epochs for the
server"); ERA temperature 0.1 (DS-FL); 2 client distillation epochs (AIJack's DS-FL ``epoch_local_distillation``;
not given by FedORION).

The round is :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s: step 2 is the client phase (``sends_model =
False``: the client trains its own model), step 3 :meth:`DSFL.collect_all` (a predict phase after it), steps 4-5
:meth:`DSFL.server_update`, step 6 :meth:`DSFL.send_back`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl.algorithms.base import RoundResult, nanmean, phase_losses
from lit_fl.algorithms.public_distillation import PublicDistillation
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import GLOBAL
from lit_fl.constraints import Fraction, Momentum, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.algorithms.updates import ClientUpdate
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork, WorkResult
    from lit_fl.steps.runner import StepRunner
Aggregation = Literal["era", "sa"]


def mean_probabilities(probs: Sequence[Tensor]) -> Tensor:
    """``(1/K) sum_k p_k``: the clients' softmax outputs averaged (DS-FL's simple aggregation, SA), in float64."""
    if not probs:
        raise ValueError("the aggregation needs the outputs of at least one client")
    return sum(p.double() for p in probs) / len(probs)


def era(probs: Sequence[Tensor], temperature: float) -> Tensor:
    """DS-FL's entropy reduction aggregation: ``softmax(((1/K) sum_k p_k) / T)`` over the class axis, computed in
    float64 and returned in the first output's dtype."""
    import torch

    if temperature <= 0:
        raise ValueError(f"the ERA temperature must be > 0, got {temperature}")
    return torch.softmax(mean_probabilities(probs) / temperature, dim=-1).to(probs[0].dtype)


@register_algorithm
class DSFL(PublicDistillation):
    """DS-FL (Itahara et al., IEEE TMC 2023) with ERA and a server (global) model; see the module docstring.

    Args:
        global_arch: architecture of the server's global model; None = the smallest of the pool by parameter
            count (FedORION's WRN40 role).
        client_fraction: share of the clients sampled each round, ``round(f * N)`` (at least 1; FedORION: 0.3).
        public_size: open-data samples per round (a fresh random subset each round); None = all of them.
        aggregation: ``era`` (entropy reduction aggregation, DS-FL) or ``sa`` (simple average).
        temperature: ERA's temperature T (DS-FL: 0.1).
        distill_epochs: the clients' epochs over the open subset per round (AIJack's DS-FL default: 2).
        server_epochs: the global model's epochs over the open subset per round (FedORION sec. 4.2: 5; 0: the
            global model is not trained).
        server_lr: the global model's SGD learning rate (FedORION sec. 4.1: 0.001).
        server_momentum: the global model's SGD momentum (FedORION sec. 4.1: 0.9).
        server_weight_decay: the global model's SGD weight decay (none named: 0).
        server_batch_size: the global model's batch size (FedORION sec. 4.1: 128).
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), FedORION's shared setting by default;
            ``local_epochs`` on the private data, ``lr`` and ``batch_size`` for the update and the distillation.
    """

    #: FedORION sec. 4.1: "test set accuracy of the global server model"
    reports = "server_acc/global"

    sequence_tasks = True  # per-token soft labels (ERA per position); the KL over positions whose input is not PAD
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)
    sends_model = False  # nothing goes down before the update: step 2, the client trains on its private data
    #: the round's open subset (set by :meth:`uploads`), its global soft labels and the global model's distillation
    #: loss (:meth:`server_update`)
    x: Tensor | None = None
    target: Tensor | None = None
    server_loss: float = float("nan")

    def __init__(
        self,
        global_arch: str | None = None,
        client_fraction: Fraction = 0.3,
        public_size: PositiveInt | None = None,
        aggregation: Aggregation = "era",
        temperature: PositiveFloat = 0.1,
        distill_epochs: NonNegativeInt = 2,
        server_epochs: NonNegativeInt = 5,
        server_lr: PositiveFloat = 0.001,
        server_momentum: Momentum = 0.9,
        server_weight_decay: NonNegativeFloat = 0.0,
        server_batch_size: PositiveInt = 128,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.global_arch = global_arch
        self.client_fraction = client_fraction
        self.public_size = public_size
        self.aggregation: Aggregation = aggregation
        self.temperature = float(temperature)
        self.distill_epochs = distill_epochs
        self.server_epochs = server_epochs
        self.server_optimizer = SGDConfig(server_lr, server_momentum, server_weight_decay, key="algorithm.server_")
        self.server_batch_size = server_batch_size

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Check the public data and create the global model (once): a copy of the initialisation of the first
        client of ``global_arch``, else a fresh model of its own seed."""
        from lit_fl.algorithms.global_model import initial_global_model, smallest_architecture

        super().setup(federation)
        self.global_arch = self.global_arch or smallest_architecture(federation)
        if GLOBAL not in federation.server:
            federation.server[GLOBAL] = initial_global_model(federation, self.global_arch, 996)

    # -- round -------------------------------------------------------------------------------------------

    def aggregate(self, probs: Sequence[Tensor]) -> Tensor:
        """The global soft labels: :func:`era` (``aggregation: era``) or the simple average (``sa``)."""
        if self.aggregation == "era":
            return era(probs, self.temperature)
        return mean_probabilities(probs).to(probs[0].dtype)

    def distill_work(self, cid: int, federation: Federation, x: Tensor, target: Tensor) -> ClientWork | None:
        """Client ``cid`` distils the global soft labels ``target`` on the open inputs ``x``."""
        from lit_fl import steps
        from lit_fl.steps.phase import ClientWork

        if self.distill_epochs == 0:
            return None
        step = steps.TargetDistillation(federation.clients[cid].model, loss="kl", target="probabilities",
                                        optimizer=self.optimizer)
        return ClientWork(cid, step, self.target_batches(federation, x, target, self.batch_size,
                                                         self.distill_epochs))

    def collect_all(self, clients: Sequence[Client], works: Sequence[Any], results: Sequence[WorkResult],
                    federation: Federation, runner: StepRunner,
                    ledger: CommunicationLedger) -> list[ClientUpdate | None]:
        """Step 3, after the update: every client of ``S`` predicts on this round's open subset (one predict phase)
        and sends its softmax outputs."""
        import torch

        self.x = self.round_inputs(federation)
        scores = self.public_scores(federation, runner, [c.id for c in clients], self.x)
        return [self.upload(c, torch.softmax(s, dim=-1), ledger) for c, s in zip(clients, scores)]

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Steps 4-5: the global soft labels (:meth:`aggregate`; None when no output arrived) and the global model's
        distillation of them."""
        from lit_fl import steps

        self.target = self.aggregate([u.values["scores"] for u in updates]) if updates else None
        self.server_loss = float("nan")
        if self.target is not None and self.server_epochs > 0:
            step = steps.TargetDistillation(federation.server[GLOBAL], loss="kl", target="probabilities",
                                            optimizer=self.server_optimizer)
            self.server_loss = runner.run_server_step(step, self.target_batches(
                federation, self.x, self.target, self.server_batch_size, self.server_epochs))
        return {}

    def send_back(self, clients: Sequence[Client], updates: Sequence[ClientUpdate], result: RoundResult,
                  federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> RoundResult:
        """Step 6: the server sends the soft labels to every client of ``S``; those that received them distil."""
        got = self.send_targets(clients, self.target, ledger)
        works = [self.distill_work(c.id, federation, self.x, self.target) if g else None for c, g in zip(clients, got)]
        distill = phase_losses(runner.run_phase(works))
        result.num_participants = len(clients)
        result.extra = {"distill_loss": nanmean(distill), "server_distill_loss": self.server_loss,
                        "public_size": float(len(self.x))}
        return result

    def state_dict(self) -> dict[str, Any]:
        return {}  # the global model lives in federation.server (checkpointed); nothing else crosses rounds
