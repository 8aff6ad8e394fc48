"""What every algorithm shares: the round contract with the round loop, and the client phases."""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from typing import TYPE_CHECKING, Any, ClassVar

from lit_fl import steps
from lit_fl.algorithms.settings import PREFIX, ClientSGD, declare_init
from lit_fl.choices import SupervisedLoss
from lit_fl.federation.round import RoundResult
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from collections.abc import Sequence

    import lightning as L
    import torch

    from lit_fl.algorithms.requirements import Requirement
    from lit_fl.data.batches import ClientBatches
    from lit_fl.data.dataset import ImageDataset
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork, WorkResult
    from lit_fl.steps.runner import StepRunner


__all__ = ["Algorithm", "RoundResult", "nanmean", "phase_losses"]


class Algorithm(ABC):
    """One federated method (the round contract, :class:`~lit_fl.federation.round.RoundAlgorithm`). It decides who
    trains, who sends what to whom and which step runs.

    An algorithm never builds a Trainer: it hands steps to the :class:`StepRunner` and moves weights in the
    :class:`Federation`, recording every transfer in the :class:`CommunicationLedger`.

    Args:
        local_epochs: epochs over the client's own train split in each local phase (0: no local training).
        loss: the supervised loss of client training: ``ce`` (cross-entropy, the default of a new method) or
            ``wsm`` (DFML Eq. 2, re-weighted by the client's class proportions; DFML and its baselines).
        lr: SGD learning rate of client training.
        momentum: SGD momentum.
        weight_decay: SGD weight decay.
        batch_size: client mini-batch size.
    """

    #: The ``metrics.csv`` column the method's paper reports, written again as ``reported_acc`` (metrics.csv,
    #: summary.json, W&B, the final line; ``compare``'s default table). Default ``global_acc``: the clients' models
    #: on the global test set (docs/metrics.md); a method declares its own with the paper's section.
    reports: ClassVar[str] = "global_acc"
    #: This method's defaults of the six settings above, its paper's (:mod:`lit_fl.algorithms.settings`): what
    #: ``--help`` shows and what a key left out takes, from a config or from Python.
    client_defaults: ClassVar[ClientSGD] = ClientSGD()
    #: Whether clients keep a peak model (then global accuracy is reported on peak models).
    uses_peak_models: bool = False
    #: What the method needs from the rest of the config (a server, one architecture, proxy data, ...), checked
    #: once before anything is built (:mod:`lit_fl.algorithms.requirements`).
    requires: ClassVar[tuple[Requirement, ...]] = ()
    #: FedProx's ``mu`` of the local phase (``mu/2 ||W - W_start||^2``); 0 = plain local training.
    prox_mu: float = 0.0
    #: The default of ``models.same_init``: whether the method's paper starts every client of an architecture
    #: from the same initial weights (DFML Algorithm 2, Def-KT "all clients are initialized with the same model").
    paper_same_init: bool = True
    #: Whether the method learns from logits alone, so that it runs on token sequences (next-token prediction,
    #: :mod:`lit_fl.data.tokens`) as on images; one that needs images (noise images, class-score tables, sliced
    #: widths) refuses a sequence dataset in one line (the requirement ``IMAGES``).
    sequence_tasks: bool = False
    #: Whether every client training phase of the method can run DP-SGD (``privacy.level sample``): its steps
    #: define ``data_loss`` (docs/extending.md) and no phase trains on a client's data in a step without it.
    sample_level_dp: ClassVar[bool] = False
    #: Whether :meth:`select` (a server's) or :meth:`plan` (a peer method's) draws among the clients there on the
    #: virtual clock (``system.availability_trace``); a method that draws otherwise refuses an availability trace
    selects_available: ClassVar[bool] = False
    #: Whether the method's updates arrive across rounds on the virtual clock (FedAsync, FedBuff), which then times
    #: its clients itself: no round deadline, and departures are its own (the ledger's are per round)
    asynchronous: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        declare_init(cls)

    def __init__(self, **settings: Any) -> None:  # the six of ClientSGD, with the class's client_defaults
        sgd = ClientSGD(**settings)
        self.local_epochs = sgd.local_epochs
        self.loss: SupervisedLoss = sgd.loss
        self.optimizer = SGDConfig(lr=sgd.lr, momentum=sgd.momentum, weight_decay=sgd.weight_decay, key=PREFIX)
        self.batch_size = sgd.batch_size

    @property
    def name(self) -> str:
        return type(self).__name__

    def check_dataset(self, dataset: ImageDataset) -> None:
        """Refuse, in one line, a dataset the method cannot learn from for a reason of its own keys (before the
        federation is built; what it needs in general is its :attr:`requires`)."""

    def setup(self, federation: Federation) -> None:
        """Called once on a fresh federation before round 1 (and before a checkpoint is loaded)."""

    @abstractmethod
    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        """Run communication round ``round_`` (counted from 1), updating ``federation`` in place."""

    def state_dict(self) -> dict[str, Any]:
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""

    # -- shared client phases ---------------------------------------------------------------------------

    def batches(self, federation: Federation, indices: torch.Tensor, epochs: int = 1) -> ClientBatches:
        from lit_fl.data.batches import ClientBatches

        data = federation.data
        return ClientBatches(
            data.train_x,
            data.train_y,
            indices,
            self.batch_size,
            federation.rng.data_order,
            epochs=epochs,
            augment=data.augment,
            black=data.black,
        )

    def work(self, client: Client, step: L.LightningModule, federation: Federation, epochs: int) -> ClientWork | None:
        """``step`` for ``epochs`` over ``client``'s train split, as a :class:`~lit_fl.steps.phase.ClientWork` (None
        when there is nothing to train: no epochs or no train sample)."""
        from lit_fl.steps.phase import ClientWork

        if epochs == 0 or client.num_train == 0:
            return None
        return ClientWork(client.id, step, self.batches(federation, client.train_idx, epochs))

    def local_work(self, client: Client, federation: Federation) -> ClientWork | None:
        """The hook of the local phase: what ``client`` does in it. Default: ``local_epochs`` of WSM/CE (plus
        :attr:`prox_mu`'s term) on its own train split. Override it to change local training; the phase runner
        batches, fuses and places the works whatever they are."""
        step = steps.LocalTraining(client.model, client.class_proportions, self.loss, self.optimizer, self.prox_mu)
        return self.work(client, step, federation, self.local_epochs)

    def local_phase(self, clients: Sequence[Client], federation: Federation, runner: StepRunner) -> list[float]:
        """Every client's :meth:`local_work` as one phase (:meth:`StepRunner.run_phase`); their mean losses (NaN
        for a client without work)."""
        return phase_losses(runner.run_phase([self.local_work(c, federation) for c in clients]))


declare_init(Algorithm, root=True)  # subclasses: __init_subclass__


def nanmean(values: list[float]) -> float:
    """Mean of the values that are not NaN (NaN when none is)."""
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept) if kept else float("nan")


def phase_losses(results: Sequence[WorkResult]) -> list[float]:
    """The mean losses of a phase's results."""
    return [r.loss for r in results]
