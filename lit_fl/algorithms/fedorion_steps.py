"""FedORION's work on the clients and on the server (papers/fedorion.txt, Algorithm 1; SPEC "FedORION"), mixed into
:class:`~lit_fl.algorithms.fedorion.FedORION`, whose module maps the paper's steps to the round:

* client side (sec. 3.1, Eq. 1-2): deep mutual learning between the local model and the copy of the global model
  (:meth:`FedORIONSteps.dml_work`), or, with selective DML (sec. 3.2.1), the received global model trained alone
  (:meth:`FedORIONSteps.no_dml_work`);
* server side (sec. 3.3, Eq. 3): the received local models as teachers of the global model on noise
  (:meth:`FedORIONSteps.distill`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl import steps
from lit_fl.algorithms.global_model import memory_format

if TYPE_CHECKING:
    from torch import nn

    from lit_fl.choices import BNStats, NoiseKind, StudentRunningStats, SupervisedLoss
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.optim import SGDConfig
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner


class FedORIONSteps:
    """The steps of FedORION's round; the settings are :class:`~lit_fl.algorithms.fedorion.FedORION`'s keys."""

    loss: SupervisedLoss
    optimizer: SGDConfig
    global_optimizer: SGDConfig
    server_optimizer: SGDConfig
    prox_mu: float
    local_epochs: int
    kl_weight: float
    global_label_loss: bool
    no_dml_lr: str
    server_epochs: int
    noise_steps: int
    noise_batch_size: int
    noise: NoiseKind
    bn_stats: BNStats
    student_running_stats: StudentRunningStats

    def no_dml_work(self, client: Client, federation: Federation) -> ClientWork | None:
        """Selective DML (sec. 3.2.1): a client without DML trains the received global model alone on its data, at
        ``lr`` or ``global_lr`` (``no_dml_lr``)."""
        optimizer = self.optimizer if self.no_dml_lr == "lr" else self.global_optimizer
        step = steps.LocalTraining(client.model, client.class_proportions, self.loss, optimizer, self.prox_mu)
        return self.work(client, step, federation, self.local_epochs)

    def dml_work(self, client: Client, global_copy: nn.Module, federation: Federation) -> ClientWork | None:
        """Eq. 1-2: DML between the local model and the copy of the global model on the client's data."""
        step = steps.DeepMutualLearning(
            client.model,
            global_copy,
            client.class_proportions,
            loss=self.loss,
            # L_CMi = CE + KL for the local model; L_GMi the same, or its KL alone (Table 3 "w/o DML")
            loss_weights=[(1.0, self.kl_weight), (1.0 if self.global_label_loss else 0.0, self.kl_weight)],
            optimizer=self.optimizer,
            model_optimizers=[None, self.global_optimizer],  # theta_i at eta_i, theta_gi at eta_g
        )
        return self.work(client, step, federation, self.local_epochs)

    def distill(self, server: nn.Module, teachers: list[Client], federation: Federation, runner: StepRunner) -> float:
        """Eq. 3 for ``server_epochs * noise_steps`` noise batches; returns the mean ``L_KD``."""
        import torch

        step = steps.NoiseDistillation(
            server,
            [c.model for c in teachers],
            [c.num_train for c in teachers],
            bn_stats=self.bn_stats,
            student_running_stats=self.student_running_stats,
            optimizer=self.server_optimizer,
        )
        noise = steps.NoiseBatches(
            federation.data.input_shape,
            self.noise_batch_size,
            self.server_epochs * self.noise_steps,
            federation.rng.data_order,
            runner.device,
            channels_last=memory_format(server) == torch.channels_last,
            kind=self.noise,
        )
        return runner.run_server_step(step, noise)
