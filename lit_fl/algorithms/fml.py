"""Decentralized FML (papers/dfml.txt A.3.4 and A.4.11; Shen et al. 2020).

Every client holds its heterogeneous model and a homogeneous "meme" model (one architecture for all, by
default the median of the pool by parameter count: ``cnn_32_64`` for the H2 CNN pool, as in A.4.11).
Each round the participants run deep mutual learning between the two on their own data, with FML's
loss weights (``fml_alpha * CE + (1 - fml_alpha) * KL`` for the local model, ``fml_beta`` likewise for the
meme); the memes go to
the aggregator, are averaged by sample count (Eq. 5) and sent back. Heterogeneous models never leave their
client. Global accuracy is reported for both kinds: ``global_acc`` (heterogeneous) and ``global_acc_meme``.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.decentralized import DecentralizedAlgorithm
from lit_fl.algorithms.global_model import memory_format
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.settings import DFML_CLIENTS
from lit_fl.constraints import PositiveInt, UnitInterval
from lit_fl.models import create_model, num_parameters

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lit_fl.algorithms.peer import PeerRound
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

MEME = "meme"


@register_algorithm
class DecentralizedFML(DecentralizedAlgorithm):
    """Decentralized FML (DFML paper baseline, Shen et al. 2020): each participant trains its local model and a
    homogeneous meme model by deep mutual learning; the memes are averaged at the aggregator.

    Args:
        meme_arch: architecture of the homogeneous meme models; None = the median architecture of the
            federation's pool by parameter count.
        mutual_epochs: epochs of deep mutual learning between the two models of a participant (1).
        fml_alpha: FML's (Shen et al. 2020) weight of the local model's supervised loss:
            ``L_local = alpha * CE + (1 - alpha) * KL(p_meme || p_local)``; FML's default 0.5.
        fml_beta: the same for the meme: ``L_meme = beta * CE + (1 - beta) * KL(p_local || p_meme)``; FML's 0.5.
        loss: ``wsm`` (the DFML paper runs its FML baseline with WSM, sec. 4) or ``ce``.
    """

    #: DFML App. A.4.11 (Fig. 24): the heterogeneous models' global accuracy (memes: global_acc_meme)
    reports = "global_acc"
    client_defaults = DFML_CLIENTS  # WSM, as DFML (sec. 4)

    def __init__(
        self,
        meme_arch: str | None = None,
        mutual_epochs: PositiveInt = 1,
        fml_alpha: UnitInterval = 0.5,
        fml_beta: UnitInterval = 0.5,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.meme_arch = meme_arch
        self.mutual_epochs = mutual_epochs
        self.fml_alpha, self.fml_beta = float(fml_alpha), float(fml_beta)

    def setup(self, federation: Federation) -> None:
        """Give every client the same initial meme model (once; a resumed run loads them afterwards)."""
        import torch

        super().setup(federation)
        arch = self.meme_arch or median_architecture(federation)
        self.meme_arch = arch
        first = federation.clients[0].model
        param = next(first.parameters())
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(federation.seed * 1_000 + 999)
            meme = create_model(arch, federation.data.input_shape, federation.num_classes)
        meme = meme.to(param.device, memory_format=memory_format(first))
        for client in federation.clients:
            if MEME not in client.extras:
                client.extras[MEME] = copy.deepcopy(meme)

    def client_work(self, client: Client, plan: PeerRound, federation: Federation) -> ClientWork | None:
        """Every participant's :meth:`mutual_work`."""
        return self.mutual_work(client, federation)

    def outgoing(self, source: Client, receiver: Client, plan: PeerRound) -> nn.Module:
        """The senders send their memes (the heterogeneous models never leave their client)."""
        return source.extras[MEME]

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """The aggregator averages the memes that reached it by sample count (Eq. 5); every one of them takes it."""
        cluster = [receiver, *arrived]
        average = steps.weighted_average([c.extras[MEME].state_dict() for c in cluster], [c.num_train for c in cluster])
        for client in cluster:
            set_meme(client, average)

    def send_back(self, receiver: Client, plan: PeerRound, federation: Federation,
                  ledger: CommunicationLedger) -> None:
        senders = plan.arrived[receiver.id]
        self.give_back(federation, ledger, receiver, senders, plan.state["before"], [c.extras[MEME] for c in senders],
                       restore=set_meme)

    def mutual_work(self, client: Client, federation: Federation) -> ClientWork | None:
        """Deep mutual learning between the client's heterogeneous model and its meme on its own data."""
        step = steps.DeepMutualLearning(
            client.model,
            client.extras[MEME],
            client.class_proportions,
            loss=self.loss,
            optimizer=self.optimizer,
            loss_weights=[(self.fml_alpha, 1.0 - self.fml_alpha), (self.fml_beta, 1.0 - self.fml_beta)],
        )
        return self.work(client, step, federation, self.mutual_epochs)

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "meme_arch": self.meme_arch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.meme_arch = state["meme_arch"]


def set_meme(client: Client, state: dict[str, torch.Tensor]) -> None:
    steps.load_weights(client.extras[MEME], state)


def median_architecture(federation: Federation) -> str:
    """The median of the federation's distinct architectures ordered by parameter count."""
    sizes: dict[str, int] = {}
    for client in federation.clients:
        sizes.setdefault(client.arch, num_parameters(client.model))
    ordered = sorted(sizes, key=sizes.__getitem__)
    return ordered[(len(ordered) - 1) // 2]
