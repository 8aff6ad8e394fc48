"""``MutualLearning``: the multi-student mutual learning of the DFML aggregator (Algorithm 1, Eq. 1-3)."""

from __future__ import annotations

from collections.abc import Sequence

from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.losses import peer_losses, teacher_weight_matrix
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.peer_learning import PeerLearningStep


class MutualLearning(PeerLearningStep):
    """Every batch: the logits of ALL participants first, then every trainable participant ``n`` gets

    ``L_n = (1 - alpha) * WSM_a(z_n) + alpha * sum_{q != n} w_{q|n} KL(p_q || p_n)``

    with teachers detached, ``w_{q|n} = Phi_q / sum_{u != n} Phi_u`` (or uniform with ``weighted_kl=False``)
    and ``beta`` of the aggregator; one backward pass of ``sum_n L_n`` (see :class:`PeerLearningStep`).

    ``trainable[n] = False`` makes participant ``n`` a teacher only (vanilla knowledge transfer, A.4.8).
    """

    def __init__(
        self,
        models: Sequence[nn.Module],
        class_proportions: Tensor,
        alpha: float,
        num_params: Sequence[int],
        trainable: Sequence[bool] | None = None,
        weighted_kl: bool = True,
        loss: SupervisedLoss = "wsm",
        temperature: float = 1.0,
        optimizer: SGDConfig | None = None,
    ) -> None:
        super().__init__(models, class_proportions, trainable, loss, optimizer)
        self.alpha = float(alpha)
        #: ``W[n, q]``, Eq. 3's weight of teacher ``q`` for student ``n``
        self.register_buffer("weights", teacher_weight_matrix(num_params, weighted_kl), persistent=False)
        self.temperature = temperature

    def peer_losses(self, logits: Tensor, y: Tensor) -> Tensor:
        """DFML Eq. 1 for every participant given all participants' stacked logits ``[N, B, C]`` on the batch."""
        if self.alpha == 0.0:
            return peer_losses(logits, y, None, class_proportions=self.class_proportions, loss=self.loss_name)
        return peer_losses(logits, y, self.weights, 1.0 - self.alpha, self.alpha, self.temperature,
                           self.class_proportions, self.loss_name)
