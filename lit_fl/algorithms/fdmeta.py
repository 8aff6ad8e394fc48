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
   phase, :class:`~lit_fl.steps.predict.PredictWork`) and uploads them (ledger ``send(k, SERVER, Payload)``,
   ``|P_t| x C`` numbers).
5. Aggregation (:func:`aggregate_logits`): ``z(x) = sum_k w_k z_k(x) / sum_k w_k`` over the clients whose logits
   arrived, ``w_k = 1`` (``aggregation: uniform``) or ``n_k`` (``samples``).
6. Server KD: the global model ``g`` learns ``softmax(z / T)`` on ``P_t`` for ``server_epochs`` epochs of batches of
   ``server_batch_size`` (SGD ``server_lr``, ``server_momentum``):
   ``L = T^2 mean_x CE(softmax(z(x) / T), softmax(g(x) / T))`` (:class:`~lit_fl.steps.TargetDistillation`).
7. Distribution and digest: the server sends ``z`` to every client of ``S_t`` (ledger ``give_back(SERVER, k,
   Payload)``); each distills the same loss into its own model for ``distill_epochs`` epochs of batches of
   ``batch_size`` at the clients' SGD settings.

The round is :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s (nothing goes down at its start, ``sends_model =
False``): step 3 the client phase, 2 and 4 :meth:`FDmeta.collect_all` (a predict phase, fused per architecture), 5-6
:meth:`FDmeta.server_update` (6 a server step), 7 :meth:`FDmeta.send_back` (the digest, ``ClientWork`` that fuses
under ``trainer.fuse on`` for models without BatchNorm). All access to the public data is
:meth:`FDmeta.public_inputs` (``data.proxy``: by default the held-out slice, ``data.server_fraction > 0``).

Defaults: FedORION's shared setting (sec. 4.1, 4.2.1): SGD momentum 0.9, client lr 0.01, batch 32, 10 local epochs,
30% of the clients per round; server lr 0.001, momentum 0.9, batch 128, 5 server epochs. Not given by FedORION nor
(as far as could be read) by Liu et al.: one digest epoch, temperature 1, uniform averaging of logits, the whole
public set every round.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl import steps
from lit_fl.algorithms.base import nanmean, phase_losses
from lit_fl.algorithms.fdmeta_logits import aggregate_logits, public_sample
from lit_fl.algorithms.global_model import GlobalModelMethod, initial_global_model
from lit_fl.algorithms.ktpfl import tensor_batches
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import PROXY_DATA
from lit_fl.algorithms.server import GLOBAL, ServerAlgorithm
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import ClientUpdate
from lit_fl.constraints import Fraction, Momentum, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lit_fl.federation.endpoints import SERVER
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.algorithms.base import RoundResult
    from lit_fl.data.batches import ClientBatches
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork, WorkResult
    from lit_fl.steps.runner import StepRunner

#: how the uploaded logits are weighted: equally, or by the clients' train sample counts
LogitWeights = Literal["uniform", "samples"]


@register_algorithm
class FDmeta(GlobalModelMethod, ServerAlgorithm):
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
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), FedORION's shared setting by default; their
            ``lr`` and ``batch_size`` serve local training and the digest alike.
    """

    #: FedORION sec. 4.1: "test set accuracy of the global server model"
    reports = "server_acc/global"

    requires = (*ServerAlgorithm.requires, PROXY_DATA)  # public data on the server
    paper_same_init = False  # heterogeneous clients initialise their own models (FedORION sec. 4.1: "randomly")
    sequence_tasks = True  # per-token aggregated logits; the CE over positions whose input is not PAD
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)
    sends_model = False  # step 3: nothing goes down; the client trains its own model
    #: the round's ``|S_t|`` and ``P_t`` (:meth:`collect_all`) and ``z`` (:meth:`server_update`; None: no logits
    #: arrived), read by the later hooks of the same round
    sampled: int
    round_inputs: Tensor
    consensus: Tensor | None

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
        """Resolve the global architecture and create the server model (once): the first client's model of that
        architecture, else a fresh one (it never trains on labels: its start only needs to be reproducible)."""
        self.setup_global_model(federation, lambda fed, arch: initial_global_model(fed, arch, 996))
        super().setup(federation)

    # -- the public data ---------------------------------------------------------------------------------

    def public_inputs(self, federation: Federation) -> Tensor:
        """The public (proxy) inputs, unlabeled: the ONE place that reads them (``data.proxy``, ``federation.proxy``;
        by default the held-out slice of the training set, whose labels are never read)."""
        return federation.proxy

    # -- round (the server round contract, :class:`~lit_fl.algorithms.server.ServerAlgorithm`) ----------

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        """The contract's round; every client of ``S_t`` is a participant (it trained, whatever reached the server)."""
        result = super().run_round(round_, federation, runner, ledger)
        result.num_participants = self.sampled
        return result

    def collect_all(self, clients: Sequence[Client], works: Sequence[ClientWork | None], results: Sequence[WorkResult],
                    federation: Federation, runner: StepRunner,
                    ledger: CommunicationLedger) -> list[ClientUpdate | None]:
        """Steps 2 and 4: ``P_t`` (kept as :attr:`round_inputs`), one predict phase of the participants with training
        data on it, and their logits' upload."""
        from lit_fl.federation.ledger import Payload
        from lit_fl.steps.predict import PredictWork

        public, self.sampled = self.public_inputs(federation), len(clients)
        x = self.round_inputs = public[public_sample(len(public), self.public_size, federation.rng.algorithm)]
        extracted = runner.run_phase([PredictWork(c.id, c.model, x) if c.num_train > 0 else None for c in clients])
        return [ClientUpdate(c.id, {"logits": r.value}, self.update_weight(c))
                for c, r in zip(clients, extracted)
                if r.value is not None and ledger.send(c.id, SERVER, Payload([r.value]))]

    def update_weight(self, client: Client) -> float:
        """Step 5's ``w_k``: 1 (``aggregation: uniform``) or ``n_k`` (``samples``)."""
        return 1.0 if self.aggregation == "uniform" else float(client.num_train)

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Steps 5-6: :attr:`consensus` ``z`` (None when no logits arrived), which the server model learns."""
        self.consensus = None
        if not updates:
            return {"kd_loss": math.nan}
        x = self.round_inputs
        z = self.consensus = aggregate_logits([u.values["logits"] for u in updates], [u.weight for u in updates])
        kd_loss = math.nan
        if self.server_epochs > 0:
            step = steps.TargetDistillation(federation.server[GLOBAL], loss="ce", target="logits",
                                            temperature=self.temperature, optimizer=self.server_optimizer)
            kd_loss = runner.run_server_step(step, self.distill_batches(federation, x, z, self.server_batch_size,
                                                                        self.server_epochs))
        return {"kd_loss": kd_loss}

    def send_back(self, clients: Sequence[Client], updates: Sequence[ClientUpdate], result: RoundResult,
                  federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> RoundResult:
        """Step 7: ``z`` goes down to every participant, which digests it (one phase)."""
        from lit_fl.federation.ledger import Payload
        from lit_fl.steps.phase import ClientWork

        z, x = self.consensus, self.round_inputs
        if z is None:
            return result.with_extra({"distill_loss": math.nan})
        works: list[ClientWork | None] = []
        for client in clients:
            if ledger.give_back(SERVER, client.id, Payload([z])) and self.distill_epochs > 0:
                step = steps.TargetDistillation(client.model, loss="ce", target="logits", temperature=self.temperature,
                                                optimizer=self.optimizer)
                works.append(ClientWork(client.id, step, self.distill_batches(federation, x, z, self.batch_size,
                                                                              self.distill_epochs)))
            else:
                works.append(None)
        return result.with_extra({"distill_loss": nanmean(phase_losses(runner.run_phase(works)))})

    def distill_batches(self, federation: Federation, x: Tensor, targets: Tensor, batch_size: int,
                        epochs: int) -> ClientBatches:
        """Shuffled ``(x, target logits)`` batches over the public subset (no augmentation: the targets are the
        logits of these very inputs), ordered by ``federation.rng.data_order``."""
        return tensor_batches(x, targets, batch_size, federation.rng.data_order, epochs)
