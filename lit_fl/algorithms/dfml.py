"""DFML: Decentralized Federated Mutual Learning (papers/dfml.txt, Algorithm 1)."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any, Literal

from lit_fl import steps
from lit_fl.algorithms.base import RoundResult
from lit_fl.algorithms.decentralized import DecentralizedAlgorithm
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.settings import DFML_CLIENTS
from lit_fl.constraints import BatchStatisticsSize, NonNegativeInt, PositiveFloat, PositiveInt, UnitInterval
from lit_fl.federation.alpha import AlphaSchedule

if TYPE_CHECKING:
    from collections.abc import Sequence

    from lit_fl.algorithms.peer import PeerRound
    from lit_fl.data.dataset import ImageDataset
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner


@register_algorithm
class DFML(DecentralizedAlgorithm):
    """Each round: every participant trains locally (WSM, own beta); senders send their models to the
    aggregator; the aggregator runs ``mutual_epochs`` (K) epochs of multi-student mutual learning on its
    data with ``alpha(t)`` from the cyclic schedule; models go back; peak models follow the peak rule.

    Args:
        mutual_epochs: K, mutual-learning epochs at the aggregator (DFML A.2: 10).
        alpha_max: top of the alpha cycle (from {0.8, 0.9, 1.0}; default 0.9).
        period: rounds of the first alpha cycle (10).
        period_increment: rounds added to the period after each cycle (10).
        alpha_schedule: ``cyclic`` (the method) or ``fixed`` (alpha = alpha_max every round; Fig. 9 ablation).
        peak_updates: peaks are also updated in the k largest alphas of a cycle (A.4.6); 1 = plain rule.
        weighted_kl: weight teachers by parameter count (Eq. 3); False = vanilla average (A.4.7).
        mutual: every participant learns (mutual learning); False = vanilla knowledge transfer, only the
            aggregator's model is updated and nothing is sent back (A.4.8).
        temperature: distillation temperature (1).
        loss: ``wsm`` (default) or ``ce`` (ablation), for local training and mutual learning.
        noise_batches: data-free extension, NOT part of the DFML paper (SPEC; the noise distillation of
            FedORION, papers/fedorion.txt sec. 3.3): after mutual learning every learning participant also
            distils for this many batches of ``z ~ N(0, I)`` from the other participants, teachers weighted
            by parameter count as in Eq. 3 (or uniformly with ``weighted_kl=False``), BatchNorm on the current
            batch statistics, running statistics untouched (:class:`MutualNoiseDistillation`). 0 = off (the
            paper's DFML, unchanged).
        noise_batch_size: noise samples per batch of that extension (128, as FedORION).
    """

    #: DFML sec. 4.1: "the global accuracy of DFML is evaluated by examining the peak models" (global_acc is theirs)
    reports = "global_acc"
    exchange_dp = True  # privacy.level user: the senders' models and the aggregator's returns are releases
    #: privacy.level sample: local training and the aggregator's mutual learning (a peer step with a data_loss: each
    #: of the aggregator's samples clipped over all the models it trains) both run DP-SGD; noise distillation reads
    #: no client data
    sample_level_dp = True

    sequence_tasks = True  # learns from logits alone: runs on token sequences (lit_fl.data.tokens)

    uses_peak_models = True
    client_defaults = DFML_CLIENTS  # WSM (Eq. 2)

    def __init__(
        self,
        mutual_epochs: NonNegativeInt = 10,
        alpha_max: UnitInterval = 0.9,
        period: PositiveInt = 10,
        period_increment: NonNegativeInt = 10,
        alpha_schedule: Literal["cyclic", "fixed"] = "cyclic",
        peak_updates: PositiveInt = 1,
        weighted_kl: bool = True,
        mutual: bool = True,
        temperature: PositiveFloat = 1.0,
        noise_batches: NonNegativeInt = 0,
        noise_batch_size: BatchStatisticsSize = 128,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.mutual_epochs = mutual_epochs
        self.alpha = AlphaSchedule(alpha_max, period, period_increment, alpha_schedule)
        self.peak_updates = peak_updates
        self.weighted_kl = weighted_kl
        self.mutual = mutual
        self.temperature = temperature
        self.noise_batches = noise_batches
        self.noise_batch_size = noise_batch_size

    def check_dataset(self, dataset: ImageDataset) -> None:
        """The noise distillation (``noise_batches``) draws Gaussian images: refused on token sequences."""
        super().check_dataset(dataset)
        if self.noise_batches > 0 and dataset.is_sequence:
            from lit_fl.errors import ConfigError

            raise ConfigError(f"algorithm.noise_batches: the noise distillation draws Gaussian images and "
                              f"{dataset.name} holds token sequences; allowed: 0")

    def setup(self, federation: Federation) -> None:
        """Every client starts with a peak model equal to its initial model and ``alpha_n = 0``."""
        super().setup(federation)
        for client in federation.clients:
            if client.peak is None:
                client.update_peak(0.0)

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """At the aggregator: :meth:`mutual_learning` of the participants that reached it at ``alpha(t)`` (then
        :meth:`noise_distillation`, when on)."""
        clients = [receiver, *arrived]
        alpha = plan.state["alpha"] = self.alpha(plan.round)
        plan.extra["mutual_loss"] = self.mutual_learning(clients, alpha, federation, runner)
        if self.noise_batches > 0:
            plan.extra["noise_kd_loss"] = self.noise_distillation(clients, federation, runner)

    def send_back(self, receiver: Client, plan: PeerRound, federation: Federation,
                  ledger: CommunicationLedger) -> None:
        """The models go back (only with ``mutual``); the aggregator's and the returned models' peaks follow the
        peak rule."""
        updated: list[Client] = [receiver]
        if self.mutual:
            if federation.exchange_privacy is not None:
                release_returns(receiver, plan.arrived[receiver.id], plan.state["sent"], federation)
            updated += self.give_back(federation, ledger, receiver, plan.arrived[receiver.id], plan.state["before"])
        self.settle(receiver, plan, federation, updated[1:])
        self.update_peaks(updated, plan.round, plan.state["alpha"])

    def round_result(self, plan: PeerRound, federation: Federation) -> RoundResult:
        """The round's alpha(t) (that of the schedule in a round nobody was there for)."""
        return replace(super().round_result(plan, federation), alpha=plan.state.get("alpha", self.alpha(plan.round)))

    def update_peaks(self, clients: list, round_: int, alpha: float) -> None:
        """The last lines of Algorithm 1: ``if alpha(t) >= alpha_n: peak_n = W_n+, alpha_n = alpha(t)``.

        With ``peak_updates = k > 1`` (A.4.6: "we allow multiple updates instead of updating the models solely
        at the maximum alpha") a participant's peak is also updated in the k largest alphas of a cycle. Such an
        update below ``alpha_n`` keeps ``alpha_n`` (``alpha_n = max(alpha_n, alpha(t))``): ``alpha_n`` never
        decreases, so a later round outside the top-k window cannot pass ``alpha(t) >= alpha_n`` with an alpha
        lower than a peak the client already holds.
        """
        top_k = self.peak_updates > 1 and self.alpha.in_top_k(round_, self.peak_updates)
        for client in clients:
            if alpha >= client.alpha_peak or top_k:
                client.update_peak(max(alpha, client.alpha_peak))

    def mutual_learning(self, clients: list, alpha: float, federation: Federation, runner: StepRunner) -> float:
        """K epochs of :class:`MutualLearning` over the aggregator's (``clients[0]``) train split: the aggregator's
        peer work (``owners``: every participant's model is computed on its own client's process)."""
        from lit_fl.steps.phase import ClientWork

        aggregator = clients[0]
        if self.mutual_epochs == 0 or aggregator.num_train == 0 or len(clients) < 2:
            return float("nan")
        step = steps.MutualLearning(
            [c.model for c in clients],
            aggregator.class_proportions,
            alpha,
            [c.num_params for c in clients],
            trainable=[True] * len(clients) if self.mutual else [True] + [False] * (len(clients) - 1),
            weighted_kl=self.weighted_kl,
            loss=self.loss,
            temperature=self.temperature,
            optimizer=self.optimizer,
        )
        batches = self.batches(federation, aggregator.train_idx, self.mutual_epochs)
        return runner.run_phase([ClientWork(aggregator.id, step, batches, owners=tuple(c.id for c in clients))])[0].loss

    def noise_distillation(self, clients: list, federation: Federation, runner: StepRunner) -> float:
        """The data-free extension (``noise_batches``): participants distil from each other on Gaussian noise, the
        aggregator's (``clients[0]``) peer work, as its mutual learning."""
        import torch

        from lit_fl.steps.phase import ClientWork

        if len(clients) < 2:
            return float("nan")
        step = steps.MutualNoiseDistillation(
            [c.model for c in clients],
            [c.num_params for c in clients],
            trainable=[True] * len(clients) if self.mutual else [True] + [False] * (len(clients) - 1),
            weighted=self.weighted_kl,
            bn_stats="current",
            temperature=self.temperature,
            optimizer=self.optimizer,
            num_classes=federation.num_classes,
        )
        x = federation.data.train_x
        noise = steps.NoiseBatches(
            federation.data.input_shape,
            self.noise_batch_size,
            self.noise_batches,
            federation.rng.data_order,
            runner.device,
            channels_last=x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last),
        )
        return runner.run_phase([ClientWork(clients[0].id, step, noise, owners=tuple(c.id for c in clients))])[0].loss



def release_returns(aggregator: Client, senders: Sequence[Client], sent: dict[int, Any],
                    federation: Federation) -> None:
    """Under DP on the exchanges: the models the aggregator's mutual learning trained (on its own data) go back as
    one release of the aggregator, each against the model its sender released (:func:`~lit_fl.privacy.exchange.
    released_jointly`), in place."""
    from lit_fl.privacy.exchange import released_jointly

    assert federation.exchange_privacy is not None and federation.privacy_state is not None
    returns = released_jointly(federation.exchange_privacy, federation.privacy_state, aggregator.id,
                               [s.model.state_dict() for s in senders], [sent[s.id] for s in senders])
    for sender, weights in zip(senders, returns):
        sender.set_weights(weights)
