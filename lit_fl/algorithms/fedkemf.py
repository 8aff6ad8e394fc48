"""FedKEMF: resource-aware FL by knowledge extraction and multi-model fusion (Yu, Nguyen, Munoz, Jannesari,
arXiv 2208.07978, 2022; "Enhancing Heterogeneous Federated Learning with Knowledge Extraction and Multi-Model
Fusion"); docs/baselines.md "FedKEMF".

Every client keeps its own (large, heterogeneous) local model; all share a small *knowledge network*, whose global
version the server holds (``federation.server["global"]``, evaluated as ``server_acc/global``; default architecture:
the smallest of the pool, the WRN40 role of FedORION sec. 4.1). Each round:

1. ``S``: ``round(client_fraction * N)`` clients (``federation.rng.selection``) download the global knowledge
   network (through the ledger, from ``SERVER``).
2. Knowledge extraction: deep mutual learning between the local model and the received knowledge network on the
   client's data, ``local_epochs`` epochs, each ``CE + kl_weight * KL(p_peer || p_own)`` with the peer detached
   (:class:`~lit_fl.steps.DeepMutualLearning`, the shape of FedORION's client phase), both at ``lr``.
3. The clients upload their knowledge networks (to ``SERVER``); the local models never travel.
4. Multi-model fusion (:func:`fuse_knowledge`): the server averages the received knowledge networks (FedAvg,
   weighted by sample counts, buffers included), then distils the ensemble of the received networks into the
   average on the public (unlabeled) data: ``server_epochs`` epochs of batches of ``server_batch_size``, loss
   ``T^2 CE(sum_i n_i / sum n * softmax(f_i(x) / T), f_g(x) / T)`` (:func:`ensemble_soft_target`;
   :class:`~lit_fl.steps.NoiseDistillation` with real inputs, teachers in eval mode), SGD ``server_lr``.

Steps 1 and 3 are :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round: :meth:`FedKEMF.broadcast` hands the
client a copy of the knowledge network for its DML, :meth:`FedKEMF.collect` uploads that copy, and
:meth:`FedKEMF.server_update` is step 4. A sampled client without training data does no DML and sends nothing.

On token sequences the DML's CE and KL are over the positions whose target is not PAD (:mod:`lit_fl.losses`) and the
fusion's CE over the public positions whose input is not PAD (per-token next-token distributions).

Public data: :meth:`FedKEMF.public_inputs` (the held-out unlabeled slice of the train set, ``data.server_fraction >
0``, as Codistillation reads it), the one place public data is read. Evaluation: the server's knowledge network
(``server_acc/global``); ``global_acc`` is the clients' local models.

Defaults: FedORION's shared setting (sec. 4.1/4.2.1): SGD momentum 0.9, client lr 0.01, server lr 0.001, client
batch 32, server batch 128, 10 local epochs, 5 server epochs, 30% of the clients per round, clients initialised
independently. lit-fl's choices (docs/baselines.md): sample-weighted averaging and ensemble, ``T`` = 1, the
student's BatchNorm statistics updated on the public data.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl import steps
from lit_fl.algorithms.global_model import GlobalModelMethod, fresh_model
from lit_fl.algorithms.ktpfl import tensor_batches
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import PROXY_DATA
from lit_fl.algorithms.server import GLOBAL, ServerAlgorithm, model_state
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import ClientUpdate
from lit_fl.constraints import BatchStatisticsSize, Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat
from lit_fl.federation.endpoints import SERVER
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner


def ensemble_soft_target(teacher_logits: Sequence[Tensor], weights: Sequence[float], temperature: float) -> Tensor:
    """The fused teacher: ``sum_i w_i softmax(z_i / T)`` with ``w`` normalised to sum to 1."""
    import torch

    total = float(sum(weights))
    return sum((float(w) / total) * torch.softmax(z / temperature, dim=-1) for z, w in zip(teacher_logits, weights))


def fuse_knowledge(states: Sequence[dict[str, Tensor]], weights: Sequence[float]) -> dict[str, Tensor]:
    """The aggregation of the knowledge networks: ``sum_i w_i theta_i / sum w`` per tensor (floating buffers
    included; integer counters: the first network's), :func:`lit_fl.steps.weighted_average`."""
    return steps.weighted_average(list(states), list(weights))


@register_algorithm
class FedKEMF(GlobalModelMethod, ServerAlgorithm):
    """FedKEMF (Yu et al. 2022) with FedORION's shared setting; clients initialise their local models
    independently (``paper_same_init = False``, FedORION sec. 4.1).

    Args:
        global_arch: architecture of the knowledge network; None = the smallest of the pool by parameter count.
        client_fraction: share of the clients per round, ``round(f * N)`` (FedORION sec. 4.2.1: 0.3).
        kl_weight: weight of the mutual-learning KL term of both models (DML: 1).
        aggregation: ``samples`` (FedAvg's weights n_i, default) or ``uniform``; also the ensemble's weights.
        server_epochs: epochs of ensemble distillation on the public data per round (FedORION sec. 4.2: 5; 0 =
            averaging only).
        server_batch_size: the server's batch size (FedORION sec. 4.1: 128).
        server_lr: the server's SGD learning rate (FedORION sec. 4.1: 0.001).
        server_momentum: the server's SGD momentum (FedORION sec. 4.1: 0.9).
        temperature: ``T`` of the ensemble distillation (lit-fl: 1).
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), FedORION's shared setting by default;
            ``local_epochs`` of mutual learning, ``lr`` for both models.
    """

    #: FedORION sec. 4.1: "test set accuracy of the global server model" (its knowledge network)
    reports = "server_acc/global"

    paper_same_init = False
    requires = (*ServerAlgorithm.requires, PROXY_DATA)  # public data on the server
    sequence_tasks = True  # per-token DML on the private data, per-token fusion CE on the public sequences
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)
    global_model_name = "the knowledge network"

    def __init__(
        self,
        global_arch: str | None = None,
        client_fraction: Fraction = 0.3,
        kl_weight: NonNegativeFloat = 1.0,
        aggregation: Literal["samples", "uniform"] = "samples",
        server_epochs: NonNegativeInt = 5,
        server_batch_size: BatchStatisticsSize = 128,
        server_lr: PositiveFloat = 0.001,
        server_momentum: float = 0.9,
        temperature: PositiveFloat = 1.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.global_arch = global_arch
        self.client_fraction = client_fraction
        self.kl_weight = float(kl_weight)
        self.aggregation = aggregation
        self.server_epochs = server_epochs
        self.server_batch_size = server_batch_size
        self.server_optimizer = SGDConfig(server_lr, server_momentum, 0.0, key="algorithm.server_")
        self.temperature = float(temperature)

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Resolve the knowledge network's architecture and create it (once), from a seed of its own."""
        self.setup_global_model(federation, lambda fed, arch: fresh_model(fed, arch, fed.seed * 1_000 + 996))
        super().setup(federation)

    def public_inputs(self, federation: Federation) -> Tensor:
        """The public (unlabeled) inputs: ``data.proxy`` (``federation.proxy``; by default the held-out slice of the
        train set, whose labels are never read). The ONE place FedKEMF reads public data."""
        return federation.proxy

    # -- round -------------------------------------------------------------------------------------------

    def broadcast(self, client: Client, starts: dict[str, dict[str, Any]], federation: Federation,
                  ledger: CommunicationLedger) -> ClientWork | None:
        """Step 1: the global knowledge network goes down; step 2 runs on the client's own copy of it."""
        if not ledger.give_back(SERVER, client.id, federation.server[GLOBAL]):
            return None
        return self.dml_work(client, copy.deepcopy(federation.server[GLOBAL]), federation)

    def collect(self, client: Client, work: ClientWork, federation: Federation,
                ledger: CommunicationLedger) -> ClientUpdate | None:
        """Step 3: the client's knowledge network (the DML's second model) goes up."""
        network = work.step.model_b
        if not ledger.send(client.id, SERVER, network):
            return None
        weight = float(client.num_train) if self.aggregation == "samples" else 1.0
        return ClientUpdate(client.id, model_state(network), weight, extra={"network": network})

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Step 4: the weighted average of the received networks, then their ensemble distilled into it."""
        server = federation.server[GLOBAL]
        kd_loss = float("nan")
        if updates:
            weights = [u.weight for u in updates]
            steps.load_weights(server, fuse_knowledge([dict(u.values) for u in updates], weights))
            if self.server_epochs > 0:
                kd_loss = self.distill(server, [u.extra["network"] for u in updates], weights, federation, runner)
        return {"kd_loss": kd_loss}

    def dml_work(self, client: Client, network: nn.Module, federation: Federation) -> ClientWork | None:
        """Knowledge extraction: DML between the local model and the knowledge network on the client's data."""
        step = steps.DeepMutualLearning(client.model, network, client.class_proportions, loss=self.loss,
                                        kl_weight=self.kl_weight, optimizer=self.optimizer)
        return self.work(client, step, federation, self.local_epochs)

    def distill(self, server: nn.Module, teachers: list[nn.Module], weights: list[float], federation: Federation,
                runner: StepRunner) -> float:
        """Ensemble distillation of ``teachers`` into ``server`` on the public inputs; the mean batch loss."""
        import torch

        x = self.public_inputs(federation)
        step = steps.NoiseDistillation(server, teachers, weights, bn_stats="running", student_running_stats="update",
                                       temperature=self.temperature, optimizer=self.server_optimizer)
        dummy = torch.zeros(len(x), dtype=torch.long, device=x.device)
        batches = tensor_batches(x, dummy, self.server_batch_size, federation.rng.data_order, self.server_epochs)
        return runner.run_server_step(step, batches)
