"""KT-pFL: parameterized knowledge transfer for personalized FL (Zhang, Guo, Ma, Wang, Xu, Wu, NeurIPS 2021,
arXiv 2111.02862; reference code github.com/cugzj/KT-pFL); docs/baselines.md "KT-pFL".

Every client ``n`` keeps its own (heterogeneous) model ``w_n``; nothing but soft predictions on public data travels.
The server keeps the knowledge coefficient matrix ``C`` (N x N, row ``n`` = how much client ``n`` learns from each
client; every row on the probability simplex, initially ``1/N``, checkpointed). Each round:

1. ``S``: ``round(client_fraction * N)`` clients drawn from ``federation.rng.selection`` (FedORION's 30%).
2. Local training (the paper's ``min_w L_n(w_n)`` step): ``local_epochs`` of CE on the client's data.
3. Every client of ``S`` sends its soft prediction ``s_n = softmax(f_n(x) / T)`` on the public inputs ``x``
   (a :class:`~lit_fl.federation.ledger.Payload` of ``public_size x classes``).
4. Server, update of the coefficients (the paper's alternating step on ``c``), on the block ``a = C[S, S]`` with its
   rows renormalised to sum to 1 (:func:`update_coefficients`)::

       a <- Proj_simplex(a - eta_c grad_a [lambda sum_n KL(sum_m a_nm s_m || s_n) + rho sum_n ||a_n - 1/|S| ||^2])

   with the KL a mean over the public samples; the block goes back into ``C`` scaled by its rows' previous mass,
   so the coefficients of clients outside ``S`` stay as they were and every row of ``C`` stays on the simplex.
5. Personalized soft predictions (:func:`personalized_targets`): ``t_n = sum_m a_nm s_m``, sent to client ``n``.
6. Client ``n`` distils towards ``t_n`` on the public inputs (``distill_epochs`` epochs, batches of ``batch_size``):
   ``lambda T^2 KL(t_n || softmax(f_n(x) / T))`` (:class:`~lit_fl.steps.TargetDistillation`).

Steps 1-6 are :class:`~lit_fl.algorithms.server.ServerAlgorithm`'s round without a server model: step 2 is the client
phase (``sends_model = False``: nothing goes down), step 3 :meth:`KTpFL.collect_all` (one predict phase), steps 4-5
:meth:`KTpFL.server_update` and step 6 :meth:`KTpFL.send_back` (``C``'s functions: :mod:`.knowledge_coefficients`).

Evaluation: the clients' own models (``global_acc``: each client model on the common test set, averaged; FedORION
sec. 4.1 reports KT-pFL so). Public data: :meth:`KTpFL.public_inputs` (the held-out unlabeled slice of the train set,
``data.server_fraction > 0``, as Codistillation reads it); it is the one place public data is read.

Defaults: FedORION's shared setting (sec. 4.1/4.2.1): SGD momentum 0.9, lr 0.01, batch 32, 10 local epochs, 30% of
the clients per round; clients initialised independently. KT-pFL's own: ``rho`` 0.7 and ``T`` 10 (the reference
code's ``penalty_ratio`` and ``Temp``), one distillation epoch (its ``N_logits_matching_round``). lit-fl's choices
(docs/baselines.md): ``lambda`` = 1, a fixed coefficient step ``coef_lr`` (the reference code rescales the step by
powers of 5 and then maps each row through ``softmax(5 c)``; the paper normalises ``c``), the Euclidean projection
onto the simplex.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.base import nanmean, phase_losses
from lit_fl.algorithms.knowledge_coefficients import (  # noqa: F401  (public imports of lit_fl.algorithms.ktpfl)
    coefficient_loss,
    distilled_positions,
    personalized_targets,
    project_rows_to_simplex,
    update_coefficients,
)
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import PROXY_DATA
from lit_fl.algorithms.server import ServerAlgorithm, check_checkpoint
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.algorithms.updates import ClientUpdate
from lit_fl.constraints import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lit_fl.federation.endpoints import SERVER

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch
    from torch import Tensor

    from lit_fl.data.batches import ClientBatches
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.round import RoundResult
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork, WorkResult
    from lit_fl.steps.runner import StepRunner


def tensor_batches(x: Tensor, y: Tensor, batch_size: int, generator: torch.Generator, epochs: int) -> ClientBatches:
    """Shuffled ``(x, y)`` batches over all of ``x`` (orders from ``generator``), no augmentation."""
    import torch

    from lit_fl.data.batches import ClientBatches

    return ClientBatches(x, y, torch.arange(len(x)), batch_size, generator, epochs=epochs)


@register_algorithm
class KTpFL(ServerAlgorithm):
    """KT-pFL (Zhang et al., NeurIPS 2021) with FedORION's shared setting; clients initialise their models
    independently (``paper_same_init = False``, FedORION sec. 4.1).

    Args:
        client_fraction: share of the clients per round, ``round(f * N)`` (FedORION sec. 4.2.1: 0.3).
        kl_weight: ``lambda``, weight of the distillation term, in the coefficient loss and the clients'
            distillation (lit-fl: 1).
        rho: weight of the regulariser ``||c_n - 1/N||^2`` pulling the coefficients to uniform (reference code's
            ``penalty_ratio``: 0.7).
        coef_lr: ``eta_c``, step of the coefficient update (lit-fl: 0.1; the reference code adapts it).
        temperature: ``T`` of the soft predictions and of the distillation (reference code's ``Temp``: 10).
        distill_epochs: epochs of distillation on the public data per round (reference code: 1).
        public_size: public samples used (the first ones of the public data); None = all.
        **kwargs: the clients' SGD (:mod:`lit_fl.algorithms.settings`), FedORION's shared setting by default;
            ``local_epochs`` of local CE, ``lr`` and ``batch_size`` for private and public data.
    """

    #: FedORION sec. 4.1: KT-pFL "reports the average of individual accuracy of all the client models"
    reports = "global_acc"

    paper_same_init = False
    requires = (*ServerAlgorithm.requires, PROXY_DATA)  # public data on the server
    sequence_tasks = True  # per-token soft predictions; coefficient KL and distillation over non-PAD positions
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)
    sends_model = False  # step 2: nothing goes down; the client trains its own model
    #: the round's personalized targets ``t_n`` by client (:meth:`server_update`; sent by :meth:`send_back`)
    targets: dict[int, Tensor]

    def __init__(
        self,
        client_fraction: Fraction = 0.3,
        kl_weight: NonNegativeFloat = 1.0,
        rho: NonNegativeFloat = 0.7,
        coef_lr: PositiveFloat = 0.1,
        temperature: PositiveFloat = 10.0,
        distill_epochs: NonNegativeInt = 1,
        public_size: PositiveInt | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.client_fraction = client_fraction
        self.kl_weight = float(kl_weight)
        self.rho = float(rho)
        self.coef_lr = float(coef_lr)
        self.temperature = float(temperature)
        self.distill_epochs = distill_epochs
        self.public_size = public_size
        #: C, N x N (float64, CPU), every row on the simplex
        self.coefficients: Tensor | None = None

    # -- setup -------------------------------------------------------------------------------------------

    def setup(self, federation: Federation) -> None:
        """Start ``C`` at ``1/N``."""
        import torch

        n = federation.num_clients
        self.coefficients = torch.full((n, n), 1.0 / n, dtype=torch.float64)

    def public_inputs(self, federation: Federation) -> Tensor:
        """The public (unlabeled) inputs: ``data.proxy`` (``federation.proxy``; by default the held-out slice of the
        train set, whose labels are never read), the first ``public_size`` of them. The ONE place KT-pFL reads
        public data."""
        inputs = federation.proxy
        return inputs if self.public_size is None else inputs[: self.public_size]

    # -- round (the server round contract, :class:`~lit_fl.algorithms.server.ServerAlgorithm`) ----------

    def server_groups(self, federation: Federation) -> list[str]:
        """None: the server holds ``C`` alone, no model."""
        return []

    def collect_all(self, clients: Sequence[Client], works: Sequence[ClientWork | None], results: Sequence[WorkResult],
                    federation: Federation, runner: StepRunner,
                    ledger: CommunicationLedger) -> list[ClientUpdate | None]:
        """Step 3: every participant's ``s_n`` (one predict phase) goes up; the ones that arrived."""
        from lit_fl.federation.ledger import Payload

        updates: list[ClientUpdate | None] = []
        for client, s in zip(clients, self.soft_predictions(clients, self.public_inputs(federation), runner)):
            if ledger.send(client.id, SERVER, Payload([s])):  # s_n: public_size x classes
                updates.append(ClientUpdate(client.id, {"soft": s}))
        return updates

    def server_update(self, updates: Sequence[ClientUpdate], federation: Federation,
                      runner: StepRunner) -> dict[str, float]:
        """Steps 4-5 on the block of ``C`` of the clients whose ``s_n`` arrived; :attr:`targets` for step 6."""
        import torch

        self.targets = {}
        if not updates:
            return {"coef_self": float("nan")}
        x = self.public_inputs(federation)
        stacked = torch.stack([u.values["soft"] for u in updates]).double().cpu()
        block_idx = torch.tensor([u.client for u in updates])
        assert self.coefficients is not None
        block = self.coefficients[block_idx][:, block_idx]
        mass = block.sum(dim=1, keepdim=True)
        uniform = torch.full_like(block, 1.0 / len(updates))
        a = torch.where(mass > 0, block / mass.clamp_min(1e-300), uniform)
        a = update_coefficients(a, distilled_positions(stacked, x), self.coef_lr, self.kl_weight, self.rho)
        self.coefficients[block_idx.view(-1, 1), block_idx.view(1, -1)] = a * mass
        targets = personalized_targets(a, stacked).to(x.device, torch.float32)
        self.targets = {u.client: targets[k] for k, u in enumerate(updates)}
        return {"coef_self": float(a.diagonal().mean())}

    def send_back(self, clients: Sequence[Client], updates: Sequence[ClientUpdate], result: RoundResult,
                  federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> RoundResult:
        """Step 6: ``t_n`` goes down to every client whose ``s_n`` arrived, which distils towards it (one phase)."""
        from lit_fl.federation.ledger import Payload

        if not self.targets:
            return result.with_extra({"kd_loss": float("nan")})
        x = self.public_inputs(federation)
        works: list[ClientWork | None] = []
        for cid, target in self.targets.items():
            got = ledger.give_back(SERVER, cid, Payload([target]))  # t_n: public_size x classes
            works.append(self.distill_work(federation.clients[cid], x, target, federation) if got else None)
        return result.with_extra({"kd_loss": nanmean(phase_losses(runner.run_phase(works)))})

    def soft_predictions(self, clients: Sequence[Client], x: Tensor, runner: StepRunner) -> list[Tensor]:
        """Every client's ``s_n = softmax(f_n(x) / T)`` on the public inputs (float32, on ``x``'s device): the logits
        of one predict phase (eval mode, no gradient)."""
        import torch

        from lit_fl.steps.predict import PredictWork

        results = runner.run_phase([PredictWork(c.id, c.model, x) for c in clients])
        return [torch.softmax(r.value.float() / self.temperature, dim=-1).to(x.device) for r in results]

    def distill_work(self, client: Client, x: Tensor, target: Tensor, federation: Federation) -> ClientWork | None:
        """``distill_epochs`` of ``lambda T^2 KL(t_n || softmax(f_n(x) / T))`` on the public inputs."""
        from lit_fl import steps
        from lit_fl.steps.phase import ClientWork

        if self.distill_epochs == 0 or len(x) == 0:
            return None
        step = steps.TargetDistillation(client.model, loss="kl", target="probabilities", temperature=self.temperature,
                                        weight=self.kl_weight, optimizer=self.optimizer)
        batches = tensor_batches(x, target, self.batch_size, federation.rng.data_order, self.distill_epochs)
        return ClientWork(client.id, step, batches)

    # -- checkpoint --------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {"coefficients": None if self.coefficients is None else self.coefficients.clone()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = state["coefficients"]
        if self.coefficients is not None:
            check_checkpoint("KT-pFL's coefficient matrix is", tuple(saved.shape), tuple(self.coefficients.shape))
        self.coefficients = saved.clone().double().cpu()
