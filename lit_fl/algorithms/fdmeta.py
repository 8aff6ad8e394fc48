"""FDmeta: the generic meta-algorithm of federated distillation (FD) of Liu, Zhang, Song and Letaief,
"Communication-Efficient Federated Distillation with Active Data Sampling", IEEE ICC 2022, arXiv 2203.06900 (cited
by FedORION, papers/fedorion.txt, as "FDMeta Liu et al. (2022)", a heterogeneous baseline that "uses KD to learn a
global server model"); docs/baselines.md "FDmeta" records the source and every assumption.

Clients keep their own models (any architectures: only logits travel); the server holds a global model of
``global_arch`` (``federation.server["global"]``, evaluated as ``server_acc/global``; by default the pool's smallest
architecture, FedORION's WRN40 role, sec. 4.1) that learns by distillation alone. Each round ``t``:

1. ``S_t``: ``round(client_fraction * N)`` clients (at least 1) from ``federation.rng.selection``.
2. ``P_t``: ``public_size`` samples of the public data (all of it when None), drawn without replacement from
   ``federation.rng.algorithm`` (:func:`public_sample`: the meta-algorithm's uniform sampling; the paper's active
   sampling is not implemented).
3. Local update: every client of ``S_t`` trains its model for ``local_epochs`` on its private data (CE, SGD).
4. Knowledge extraction: client ``k`` computes its logits ``z_k(x)`` on ``P_t`` (model in eval mode; a predict
   phase, :class:`~lit_fl.steps.predict.PredictWork`) and uploads them (ledger ``send(k, -1, Payload)``, ``|P_t| x C``
   numbers).
5. Aggregation (:func:`aggregate_logits`): ``z(x) = sum_k w_k z_k(x) / sum_k w_k`` over the clients whose logits
   arrived, ``w_k = 1`` (``aggregation: uniform``) or ``n_k`` (``samples``).
6. Server KD: the global model ``g`` learns ``softmax(z / T)`` on ``P_t`` for ``server_epochs`` epochs of batches of
   ``server_batch_size`` (SGD ``server_lr``, ``server_momentum``):
   ``L = T^2 mean_x CE(softmax(z(x) / T), softmax(g(x) / T))`` (:class:`~lit_fl.steps.TargetDistillation`).
7. Distribution and digest: the server sends ``z`` to every client of ``S_t`` (ledger ``give_back(-1, k, Payload)``);
   each distills the same loss into its own model for ``distill_epochs`` epochs of batches of ``batch_size`` at the
   clients' SGD settings.

Steps 3, 4 and 7 are client phases through ``runner.run_phase``: 3 and 7 ``ClientWork`` (with ``trainer.fuse on`` each
runs as one batched step, every client on its own batches: :class:`~lit_fl.steps.LocalTraining` and
:class:`~lit_fl.steps.TargetDistillation`, for models without BatchNorm; the BatchNorm CNNs of
``experiments/mnist5k/fdmeta.yaml`` run client by client), 4 a predict phase (fused per architecture, BatchNorm
included: eval mode); step 6 is a server step. All
access to the public data is :meth:`FDmeta.public_inputs` (today the held-out unlabeled slice of the training set,
``data.proxy``: by default the held-out slice, ``data.server_fraction > 0``).

Defaults: FedORION's shared setting (sec. 4.1, 4.2.1): SGD momentum 0.9, client lr 0.01, batch 32, 10 local epochs,
30% of the clients per round; server lr 0.001, momentum 0.9, batch 128, 5 server epochs. Not given by FedORION nor
(as far as could be read) by Liu et al.: one digest epoch, temperature 1, uniform averaging of logits, the whole
public set every round.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from lit_fl import steps
from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses
from lit_fl.algorithms.global_model import memory_format as _memory_format
from lit_fl.algorithms.global_model import smallest_architecture
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import PROXY_DATA, SERVER_BASED
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.constraints import Fraction, Momentum, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lit_fl.errors import ConfigError
from lit_fl.federation.selection import select_fraction
from lit_fl.models import create_model
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.data.batches import ClientBatches
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

GLOBAL = "global"
#: how the uploaded logits are weighted: equally, or by the clients' train sample counts
LogitWeights = Literal["uniform", "samples"]


def public_sample(num_public: int, size: int | None, rng: np.random.Generator) -> np.ndarray:
    """Step 2: ``size`` distinct public indices drawn uniformly from ``rng`` (sorted); all ``num_public`` of them,
    without a draw, when ``size`` is None or not smaller."""
    if num_public <= 0:
        raise ValueError("public_sample needs at least one public sample")
    if size is None or size >= num_public:
        return np.arange(num_public)
    return np.sort(rng.choice(num_public, size=size, replace=False))


def aggregate_logits(logits: Sequence[Tensor], weights: Sequence[float]) -> Tensor:
    """Step 5: ``sum_k w_k z_k / sum_k w_k``, accumulated in float64, returned in the dtype of ``logits[0]``."""
    if not logits or len(logits) != len(weights):
        raise ValueError("aggregate_logits needs one weight per client's logits, at least one client")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"aggregate_logits: weights must be >= 0 with a positive sum, got {list(weights)}")
    total = float(sum(weights))
    mean = sum(float(w) / total * z.double() for w, z in zip(weights, logits))
    return mean.to(logits[0].dtype)  # type: ignore[union-attr]


@register_algorithm
class FDmeta(Algorithm):
    """The FD meta-algorithm (Liu et al. 2022) with a global server model distilled from the clients' aggregated
    logits on public data (FedORION's use of it); see the module docstring.

    Args:
        client_fraction: share of the clients sampled each round (FedORION sec. 4.2.1: 0.3).
        global_arch: architecture of the server model; None = the pool's smallest by parameter count (FedORION sec.
            4.1: WRN40, its smallest).
        public_size: public samples drawn each round; None = the whole public set (not given: all).
        aggregation: weights of the clients' logits: ``uniform`` (default) or ``samples`` (their train counts).
        temperature: ``T`` of the distillation softmaxes, loss scaled by ``T^2`` (not given: 1).
        distill_epochs: the clients' digest epochs on the public subset per round (not given: 1; 0 = none).
        server_epochs: the server model's distillation epochs per round (FedORION sec. 4.2: 5).
        server_batch_size: the server's batch size (FedORION sec. 4.1: 128).
        server_lr: the server's SGD learning rate (FedORION sec. 4.1: 0.001).
        server_momentum: the server's SGD momentum (FedORION sec. 4.1: 0.9).
        server_weight_decay: the server's SGD weight decay (FedORION names none: 0).
        local_epochs: epochs of local training on private data per round (FedORION sec. 4.2: 10).
        loss: the clients' supervised loss (``ce``).
        lr: the clients' learning rate, local training and digest (FedORION sec. 4.1: 0.01).
        momentum: the clients' SGD momentum (FedORION sec. 4.1: 0.9).
        weight_decay: the clients' SGD weight decay (FedORION names none: 0).
        batch_size: the clients' batch size, local training and digest (FedORION sec. 4.1: 32).
    """

    #: FedORION sec. 4.1: "test set accuracy of the global server model"
    reports = "server_acc/global"

    requires = (SERVER_BASED, PROXY_DATA)  # every sampled client talks to the server; public data on it
    paper_same_init = False  # heterogeneous clients initialise their own models (FedORION sec. 4.1: "randomly")
    sequence_tasks = True  # per-token aggregated logits; the CE over positions whose input is not PAD
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)

    def __init__(
        self,
        client_fraction: Fraction = 0.3,
        global_arch: str | None = None,
        public_size: PositiveInt | None = None,
        aggregation: LogitWeights = "uniform",
        temperature: PositiveFloat = 1.0,
        distill_epochs: NonNegativeInt = 1,
        server_epochs: NonNegativeInt = 5,
        server_batch_size: PositiveInt = 128,
        server_lr: PositiveFloat = 0.001,
        server_momentum: Momentum = 0.9,
        server_weight_decay: NonNegativeFloat = 0.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client_fraction = client_fraction
        self.global_arch = global_arch
        self.public_size = public_size
        self.aggregation: LogitWeights = aggregation
        self.temperature = float(temperature)
        self.distill_epochs = distill_epochs
        self.server_epochs = server_epochs
        self.server_batch_size = server_batch_size
        self.server_optimizer = SGDConfig(server_lr, server_momentum, server_weight_decay, key="algorithm.server_")

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Resolve the global architecture and create the server model (once)."""
        arch = self.global_arch or smallest_architecture(federation)
        self.global_arch = arch
        if GLOBAL not in federation.server:
            federation.server[GLOBAL] = initial_server_model(federation, arch)

    # -- the public data ---------------------------------------------------------------------------------

    def public_inputs(self, federation: Federation) -> Tensor:
        """The public (proxy) inputs, unlabeled: the ONE place that reads them (``data.proxy``, ``federation.proxy``;
        by default the held-out slice of the training set, whose labels are never read)."""
        return federation.proxy

    # -- round -------------------------------------------------------------------------------------------

    def select(self, federation: Federation) -> list[int]:
        """``round(client_fraction * N)`` distinct clients (at least one), sorted."""
        return select_fraction(federation, self.client_fraction)

    def distill_batches(self, federation: Federation, x: Tensor, targets: Tensor, batch_size: int,
                        epochs: int) -> ClientBatches:
        """Shuffled ``(x, target logits)`` batches over the public subset (no augmentation: the targets are the
        logits of these very inputs), ordered by ``federation.rng.data_order``."""
        import torch

        from lit_fl.data.batches import ClientBatches

        return ClientBatches(x, targets, torch.arange(len(x)), batch_size, federation.rng.data_order, epochs=epochs)

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        from lit_fl.federation.ledger import Payload
        from lit_fl.steps.phase import ClientWork
        from lit_fl.steps.predict import PredictWork

        selected = self.select(federation)
        public = self.public_inputs(federation)
        x = public[public_sample(len(public), self.public_size, federation.rng.algorithm)]

        losses = phase_losses(runner.run_phase([self.local_work(federation.clients[k], federation)
                                                 for k in selected]))  # 3. local update

        uploaded: list[Tensor] = []
        weights: list[float] = []
        extracted = runner.run_phase([PredictWork(k, federation.clients[k].model, x)  # 4. knowledge extraction
                                      if federation.clients[k].num_train > 0 else None for k in selected])
        for k, result in zip(selected, extracted):  # and upload
            client, z_k = federation.clients[k], result.value
            if z_k is None:
                continue
            if ledger.send(k, -1, Payload([z_k])):
                uploaded.append(z_k)
                weights.append(1.0 if self.aggregation == "uniform" else float(client.num_train))
        if not uploaded:
            return RoundResult(senders=(), train_loss=nanmean(losses), num_participants=len(selected),
                               extra={"kd_loss": math.nan, "distill_loss": math.nan})
        z = aggregate_logits(uploaded, weights)  # 5. aggregation

        kd_loss = math.nan  # 6. the server model learns the aggregated logits
        if self.server_epochs > 0:
            step = steps.TargetDistillation(federation.server[GLOBAL], loss="ce", target="logits",
                                            temperature=self.temperature, optimizer=self.server_optimizer)
            kd_loss = runner.run_server_step(step, self.distill_batches(federation, x, z, self.server_batch_size,
                                                              self.server_epochs))

        works: list[ClientWork | None] = []  # 7. distribution and digest
        for k in selected:
            client = federation.clients[k]
            if ledger.give_back(-1, k, Payload([z])) and self.distill_epochs > 0:
                step = steps.TargetDistillation(client.model, loss="ce", target="logits", temperature=self.temperature,
                                                optimizer=self.optimizer)
                works.append(ClientWork(k, step, self.distill_batches(federation, x, z, self.batch_size,
                                                                      self.distill_epochs)))
            else:
                works.append(None)
        distill_loss = nanmean(phase_losses(runner.run_phase(works)))
        return RoundResult(
            senders=tuple(selected),
            train_loss=nanmean(losses),
            num_participants=len(selected),
            extra={"kd_loss": kd_loss, "distill_loss": distill_loss},
        )

    # -- checkpoint --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"global_arch": self.global_arch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["global_arch"] != self.global_arch:
            raise ConfigError(
                f"checkpoint: the global model is {state['global_arch']}, this config builds {self.global_arch}"
            )


def initial_server_model(federation: Federation, arch: str) -> nn.Module:
    """A copy of the first client's model of ``arch`` when a client has it, else a fresh ``arch`` from a seed of its
    own (the server model never trains on labels: its start only needs to be reproducible)."""
    import torch

    same = [c for c in federation.clients if c.arch == arch]
    if same:
        return copy.deepcopy(same[0].model)
    first = federation.clients[0].model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(federation.seed * 1_000 + 996)
        model = create_model(arch, federation.data.input_shape, federation.num_classes)
    return model.to(next(first.parameters()).device, memory_format=_memory_format(first))
