"""FedDF: ensemble distillation for model fusion (Lin, Kong, Stich, Jaggi, NeurIPS 2020, arXiv 2006.07242),
Algorithm 1 with heterogeneous models (sec. 4: one server model per architecture, "prototype"); docs/baselines.md
"FedDF". A distillation baseline of FedORION (papers/fedorion.txt sec. 4, 4.1).

Server based. The server holds one model per architecture of the pool (``federation.server[<arch>]``, evaluated as
``server_acc/<arch>``) and reports the ensemble of them, their averaged logits, as ``server_acc/global``
(FedORION sec. 4.1: "Its performance is, therefore, reported based on the ensemble of the global models"). Each round:

1. ``S``: ``round(client_fraction * N)`` clients from ``federation.rng.selection`` (FedORION's fraction).
2. Every client of ``S`` receives the server model of its architecture (through the ledger, from ``SERVER``) and
   trains it ``local_epochs`` epochs with SGD on its data (cross-entropy), then sends it back.
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

Steps 1-2 are :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round with one group per architecture; this class
writes steps 3-4 (:meth:`FedDF.server_update`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl import steps
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import PROXY_DATA
from lit_fl.algorithms.server import ServerAlgorithm, check_checkpoint
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import average_updates
from lit_fl.constraints import Fraction, NonNegativeInt, PositiveFloat, PositiveInt
from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    from torch import nn

    from lit_fl.algorithms.updates import ClientUpdate
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner

#: ``federation.server`` name of the ensemble of the per-architecture server models
GLOBAL = "global"


@register_algorithm
class FedDF(ServerAlgorithm):
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

    #: FedORION sec. 4.1: FedDF "reported based on the ensemble of the global models" (server_acc/global)
    reports = "server_acc/global"

    sequence_tasks = True  # per-token KL to the ensemble on the proxy sequences (PAD inputs masked)
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)
    requires = (*ServerAlgorithm.requires, PROXY_DATA.when(lambda algo: algo.distill_steps > 0))  # 0: FedAvg per arch

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
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client_fraction = client_fraction
        self.distill_steps, self.distill_batch_size = distill_steps, distill_batch_size
        self.distill_lr, self.cosine = float(distill_lr), bool(cosine)
        self.temperature = float(temperature)
        self.clip_norm = None if clip_norm is None else float(clip_norm)
        self.aggregation = aggregation
        self.archs: list[str] = []

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """One server model per architecture from the clients' initialisation of it (:class:`ServerAlgorithm`),
        and their ensemble ``global``."""
        from lit_fl.steps.ensemble_distillation import ServerEnsemble

        self.archs = federation.architectures()
        if GLOBAL in self.archs:
            raise ConfigError(f"models.pool: an architecture named {GLOBAL!r} clashes with FedDF's ensemble")
        super().setup(federation)
        federation.server[GLOBAL] = ServerEnsemble([federation.server[arch] for arch in self.archs])

    def server_groups(self, federation: Federation) -> list[str]:
        return federation.architectures()

    def group_of(self, client: Client) -> str:
        return client.arch

    def update_weight(self, client: Client) -> float:
        """``n_k`` (Algorithm 1), or 1 with ``aggregation: uniform``."""
        return float(client.num_train) if self.aggregation == "samples" else 1.0

    # -- round -------------------------------------------------------------------------------------------

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Step 3, per architecture that received models (Algorithm 1: ``x_{t,0} = sum_k n_k / n x_t^k``); step 4,
        the ensemble distillation of those server models from every received client model."""
        averages = average_updates(updates)
        fused = [arch for arch in self.archs if arch in averages]
        for arch in fused:
            steps.load_weights(federation.server[arch], averages[arch])
        kd_loss = float("nan")
        if fused and self.distill_steps > 0:
            teachers = [federation.clients[u.client].model for u in updates]
            kd_loss = self.distill([federation.server[arch] for arch in fused], teachers, federation, runner)
        return {"kd_loss": kd_loss, "distilled_archs": float(len(fused))}

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

    # -- checkpoint --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"archs": list(self.archs)}  # the server models are the federation's; Adam is fresh every round

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_checkpoint("FedDF's server models are", list(state["archs"]), self.archs)
