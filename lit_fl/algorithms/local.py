"""``Local``: the no-communication baseline of UA-PDFL (papers/ua-pdfl.txt sec. 5.1.3), and the training
setup that UA-PDFL and its decentralized FedPer baseline share (sec. 5.1.4).

Every client trains on its own train split every round and nothing is sent. The optimiser follows the
UA-PDFL settings: SGD with an initial lr of 0.05 decayed by 0.95 per round, momentum 0.5, batch 50, one
local epoch of cross-entropy. The paper names no weight decay, so the default is 0.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ALONE, NOTHING_SENT
from lit_fl.algorithms.settings import UAPDFL_CLIENTS
from lit_fl.constraints import Fraction
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner


@register_algorithm
class Local(Algorithm):
    """Each client trains alone; no model ever leaves a client (``comm_mb`` stays 0).

    Args:
        lr_decay: per-round decay of the learning rate: round ``r`` (counted from 1) trains with
            ``lr * lr_decay ** (r - 1)``, so round 1 trains at the paper's "initial learning rate 0.05"
            (UA-PDFL sec. 4.1: initial lr 0.05, decay 0.95; SPEC: ``0.05 * 0.95^(round - 1)``); 1 keeps it
            constant.
        local_epochs: E, epochs over the client's train split per round (UA-PDFL: 1).
        loss: ``ce`` (UA-PDFL) or ``wsm``.
        lr: initial learning rate (UA-PDFL: 0.05).
        momentum: SGD momentum (UA-PDFL: 0.5).
        weight_decay: SGD weight decay (UA-PDFL names none: 0).
        batch_size: UA-PDFL: 50.
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over clients, each on its own data
    reports = "local_acc"

    sequence_tasks = True  # learns from logits alone: runs on token sequences (lit_fl.data.tokens)

    requires = (ALONE, NOTHING_SENT)
    client_defaults = UAPDFL_CLIENTS  # UA-PDFL sec. 4.1 and 5.1.4

    def __init__(self, lr_decay: Fraction = 0.95, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.lr_decay = float(lr_decay)

    def round_lr(self, round_: int) -> float:
        """The learning rate of round ``round_`` (from 1): ``lr * lr_decay ** (round_ - 1)``."""
        return self.optimizer.lr * self.lr_decay ** (round_ - 1)

    def round_optimizer(self, round_: int) -> SGDConfig:
        """The (fresh) optimizer settings of every local phase of round ``round_``."""
        return replace(self.optimizer, lr=self.round_lr(round_))

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        optimizer = self.round_optimizer(round_)
        works = [self.work(c, self.local_step(c, optimizer), federation, self.local_epochs) for c in federation.clients]
        return self.round_result(federation, phase_losses(runner.run_phase(works)), optimizer)

    def local_step(self, client: Client, optimizer: SGDConfig) -> steps.LocalTraining:
        """Plain CE/WSM local training of the client's model."""
        return steps.LocalTraining(client.model, client.class_proportions, self.loss, optimizer)

    def round_result(
        self, federation: Federation, losses: list[float], optimizer: SGDConfig, **extra: float
    ) -> RoundResult:
        """Every client took part; ``lr`` and the method's counters go to the metric row."""
        return RoundResult(
            train_loss=nanmean(losses),
            num_participants=federation.num_clients,
            extra={"lr": optimizer.lr, **{k: float(v) for k, v in extra.items()}},
        )
