"""FedDF: ensemble distillation for model fusion (Lin, Kong, Stich, Jaggi, NeurIPS 2020, arXiv 2006.07242),
Algorithm 1 with heterogeneous models (sec. 4: one server model per architecture, "prototype"); docs/baselines.md
"FedDF". A distillation baseline of FedORION (papers/fedorion.txt sec. 4, 4.1).

Server based. The server holds one model per architecture of the pool (``federation.server[<arch>]``, evaluated as
``server_acc/<arch>``) and reports the ensemble of them, their averaged logits, as ``server_acc/global``
(FedORION sec. 4.1: "Its performance is, therefore, reported based on the ensemble of the global models"). Each round:

1. ``S``: ``round(client_fraction * N)`` clients from ``federation.rng.selection`` (FedORION's fraction).
2. Every client of ``S`` receives the server model of its architecture (ledger ``give_back(-1, i, ...)``) and trains
   it ``local_epochs`` epochs with SGD on its data (cross-entropy), then sends it back (``send(i, -1, ...)``).
3. Per architecture with at least one received model: the server model becomes their average weighted by the
   clients' sample counts (Algorithm 1: ``x_{t,0} = sum_k n_k / n x_t^k``; buffers alike, integer counters the
   first client's).
4. Ensemble distillation (Algorithm 1 lines 7-10): each of those server models is distilled for ``distill_steps``
   batches of ``distill_batch_size`` proxy inputs (``federation.proxy``: ``data.proxy``) from the ENSEMBLE of all
   received client models, every architecture together: ``KL(softmax(mean_k f(x_k, d) / T) || softmax(f(x, d) /
   T))``, Adam at ``distill_lr`` on a cosine to 0 over the phase, gradients clipped to norm ``clip_norm``
   (:class:`~lit_fl.steps.ensemble_distillation.EnsembleDistillation`). A fresh Adam each round.

An architecture none of whose clients sent a model this round keeps its server model and is not distilled (the
reference code averages and distils only the architectures that received models). A client without training data,
or whose model was lost (``faults.*``), sends nothing and is no teacher.

Defaults: FedORION's shared client setting (sec. 4.1, 4.2.1: SGD momentum 0.9, lr 0.01, batch 32, 10 local epochs,
30% of the clients); FedDF's server (paper sec. 4 / reference code epfml/federated-learning-public-code, FedDF-code:
Adam lr 1e-3 with cosine annealing, 10^4 distillation steps at most, batches of 128, temperature 1, gradient norm
clipped at 5, teachers' logits averaged). The paper stops distilling early on a labeled validation split (10% of
the train set, patience 10^3 steps); lit-fl runs a fixed ``distill_steps`` (the proxy is unlabeled).
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Any, Literal

from lit_fl import steps
from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.choices import SupervisedLoss
from lit_fl.constraints import Fraction, NonNegativeInt, PositiveFloat, PositiveInt
from lit_fl.errors import ConfigError
from lit_fl.federation.selection import select_fraction

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

#: ``federation.server`` name of the ensemble of the per-architecture server models
GLOBAL = "global"
NO_PROXY = ("FedDF distils on unlabeled proxy data: set data.server_fraction > 0 (the held-out slice, "
            "data.proxy.dataset: null) or data.proxy.dataset")


@register_algorithm
class FedDF(Algorithm):
    """FedDF (Lin et al. 2020, Algorithm 1) with one server model per architecture; see the module docstring.

    Args:
        client_fraction: share of the clients sampled each round, ``round(f * N)`` (at least 1). FedORION's shared
            setting: 0.3 (sec. 4.2.1).
        distill_steps: proxy batches of server distillation per round, all of them run (the reference code's cap:
            10^4, with early stopping on labeled validation data that lit-fl does not have); 0 = FedAvg per
            architecture.
        distill_batch_size: proxy inputs per batch (reference code: 128).
        distill_lr: Adam's learning rate at the first distillation step (FedDF sec. 4: 1e-3).
        cosine: anneal the distillation rate to 0 over the ``distill_steps`` (reference code: yes).
        temperature: ``T`` of the KL's softmaxes (reference code: 1).
        clip_norm: clip each server model's distillation gradient to this L2 norm (reference code: 5); null = none.
        aggregation: the per-architecture average: ``samples`` (Algorithm 1: weights ``n_k``) or ``uniform`` (the
            reference code's ``_s1_federated_average``).
        local_epochs: the clients' epochs per round (FedORION sec. 4.2.1: 10).
        loss: the clients' supervised loss (``ce``).
        lr: the clients' SGD learning rate (FedORION sec. 4.1: 0.01).
        momentum: the clients' SGD momentum (FedORION sec. 4.1: 0.9).
        weight_decay: the clients' SGD weight decay (FedORION names none: 0).
        batch_size: the clients' batch size (FedORION sec. 4.1: 32).
    """

    sequence_tasks = True  # per-token KL to the ensemble on the proxy sequences (PAD inputs masked)

    def __init__(
        self,
        client_fraction: Fraction = 0.3,
        distill_steps: NonNegativeInt = 10_000,
        distill_batch_size: PositiveInt = 128,
        distill_lr: PositiveFloat = 1e-3,
        cosine: bool = True,
        temperature: PositiveFloat = 1.0,
        clip_norm: PositiveFloat | None = 5.0,
        aggregation: Literal["samples", "uniform"] = "samples",
        local_epochs: int = 10,
        loss: SupervisedLoss = "ce",
        lr: float = 0.01,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        batch_size: int = 32,
    ) -> None:
        super().__init__(local_epochs=local_epochs, loss=loss, lr=lr, momentum=momentum, weight_decay=weight_decay,
                         batch_size=batch_size)
        if aggregation not in ("samples", "uniform"):
            raise ConfigError(f"algorithm.aggregation must be one of samples, uniform; got {aggregation!r}")
        self.client_fraction = client_fraction
        self.distill_steps, self.distill_batch_size = distill_steps, distill_batch_size
        self.distill_lr, self.cosine = float(distill_lr), bool(cosine)
        self.temperature = float(temperature)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.aggregation = aggregation
        self.archs: list[str] = []

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Check the federation (a mesh, proxy data), create one server model per architecture from the clients'
        initialisation of it, and the ensemble ``global``."""
        from lit_fl.steps.ensemble_distillation import ServerEnsemble

        if federation.topology.name != "mesh":
            raise ConfigError(
                f"topology.name: FedDF is server based (every client reaches the server); "
                f"{federation.topology.name!r} is not allowed; allowed: mesh"
            )
        if self.distill_steps > 0 and len(federation.proxy) == 0:
            raise ConfigError(NO_PROXY)
        self.archs = federation.architectures()
        if GLOBAL in self.archs:
            raise ConfigError(f"models.pool: an architecture named {GLOBAL!r} clashes with FedDF's ensemble")
        for arch in self.archs:
            if arch not in federation.server:
                first = next(c for c in federation.clients if c.arch == arch)
                federation.server[arch] = copy.deepcopy(first.regular_model)
        federation.server[GLOBAL] = ServerEnsemble([federation.server[arch] for arch in self.archs])

    # -- round -------------------------------------------------------------------------------------------

    def select(self, federation: Federation) -> list[int]:
        """``round(client_fraction * N)`` distinct clients (at least one), sorted."""
        return select_fraction(federation, self.client_fraction)

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        selected = self.select(federation)
        starts = {arch: {k: v.detach().clone() for k, v in federation.server[arch].state_dict().items()}
                  for arch in self.archs}
        works: list[ClientWork | None] = []
        for cid in selected:
            client = federation.clients[cid]
            if ledger.give_back(-1, cid, federation.server[client.arch]):  # the server model of its architecture
                client.set_weights(starts[client.arch])
                works.append(self.local_work(client, federation))
            else:
                works.append(None)
        losses = phase_losses(runner.run_phase(works))

        senders: list[int] = []
        received: dict[str, list[dict[str, Tensor]]] = {}
        weights: dict[str, list[float]] = {}
        teachers: list[nn.Module] = []
        for cid, work in zip(selected, works):
            if work is None:  # lost download or no training data: nothing to send
                continue
            client = federation.clients[cid]
            if not ledger.send(cid, -1, client.model):
                continue
            senders.append(cid)
            received.setdefault(client.arch, []).append({k: v.detach() for k, v in client.model.state_dict().items()})
            weights.setdefault(client.arch, []).append(float(client.num_train) if self.aggregation == "samples"
                                                       else 1.0)
            teachers.append(client.model)

        fused = [arch for arch in self.archs if arch in received]
        for arch in fused:  # Algorithm 1: x_{t,0} = sum_k n_k / n x_t^k, per architecture
            steps.load_weights(federation.server[arch], steps.weighted_average(received[arch], weights[arch]))
        kd_loss = float("nan")
        if fused and self.distill_steps > 0:
            kd_loss = self.distill([federation.server[arch] for arch in fused], teachers, federation, runner)
        return RoundResult(senders=tuple(senders), train_loss=nanmean(losses),
                           extra={"kd_loss": kd_loss, "distilled_archs": float(len(fused))})

    def distill(self, students: list[nn.Module], teachers: list[nn.Module], federation: Federation,
                runner: StepRunner) -> float:
        """Algorithm 1 lines 7-10 for every student together; returns the mean KL per student and batch."""
        from lit_fl.data.proxy import proxy_batches

        step = steps.EnsembleDistillation(students, teachers, lr=self.distill_lr, temperature=self.temperature,
                                          clip_norm=self.clip_norm,
                                          total_steps=self.distill_steps if self.cosine else None)
        batches = proxy_batches(federation.proxy, self.distill_batch_size, self.distill_steps,
                                federation.rng.data_order)
        return runner.run_server_step(step, batches)

    def local_work(self, client: Client, federation: Federation) -> ClientWork | None:
        """``local_epochs`` of SGD on the client's train split from the received server model."""
        step = steps.LocalTraining(client.model, client.class_proportions, self.loss, self.optimizer)
        return self.work(client, step, federation, self.local_epochs)

    # -- checkpoint --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"archs": list(self.archs)}  # the server models are the federation's; Adam is fresh every round

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if list(state["archs"]) != self.archs:
            raise ConfigError(
                f"checkpoint: FedDF's server models are {state['archs']}, this config builds {self.archs}"
            )
