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

from lit_fl.algorithms.base import Algorithm, RoundResult, nanmean, phase_losses
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import PROXY_DATA, SERVER_BASED
from lit_fl.algorithms.settings import FEDORION_CLIENTS
from lit_fl.constraints import Fraction, NonNegativeFloat, NonNegativeInt, PositiveFloat, PositiveInt
from lit_fl.errors import ConfigError
from lit_fl.federation.selection import select_fraction

if TYPE_CHECKING:
    from collections.abc import Sequence

    import torch
    from torch import Tensor

    from lit_fl.data.batches import ClientBatches
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner



def personalized_targets(coefficients: Tensor, soft: Tensor) -> Tensor:
    """``t_n = sum_m c_nm s_m``: ``coefficients`` ``[K, K]`` (row ``n``: client ``n``'s weights), ``soft`` ``[K, P,
    C]`` (every client's soft predictions on the ``P`` public samples; ``[K, P, T, V]`` on token sequences); returns
    ``soft``'s shape."""
    import torch

    return torch.einsum("nm,m...->n...", coefficients, soft)


def coefficient_loss(coefficients: Tensor, soft: Tensor, kl_weight: float, rho: float) -> Tensor:
    """``lambda sum_n mean_p KL(t_np || s_np) + rho sum_n ||c_n - 1/K||^2`` with ``t = personalized_targets(c, s)``
    (``0 log 0 = 0``)."""
    import torch

    k = coefficients.shape[0]
    targets = personalized_targets(coefficients, soft)
    log_ratio = torch.log(targets.clamp_min(torch.finfo(targets.dtype).tiny)) - torch.log(soft)
    kl = torch.where(targets > 0, targets * log_ratio, torch.zeros_like(targets)).sum(dim=2).mean(dim=1).sum()
    return kl_weight * kl + rho * ((coefficients - 1.0 / k) ** 2).sum()


def project_rows_to_simplex(v: Tensor) -> Tensor:
    """Euclidean projection of every row onto the probability simplex (Duchi et al. 2008): ``max(v - tau, 0)`` with
    ``tau`` such that the row sums to 1."""
    import torch

    k = v.shape[1]
    u, _ = torch.sort(v, dim=1, descending=True)
    css = u.cumsum(dim=1) - 1.0
    ind = torch.arange(1, k + 1, dtype=v.dtype, device=v.device)
    rho = (u - css / ind > 0).sum(dim=1, keepdim=True)  # the number of positive entries, >= 1
    tau = css.gather(1, rho - 1) / rho.to(v.dtype)
    return (v - tau).clamp_min(0.0)


def update_coefficients(coefficients: Tensor, soft: Tensor, lr: float, kl_weight: float, rho: float) -> Tensor:
    """One projected gradient step of :func:`coefficient_loss` on ``coefficients`` (``[K, K]``, rows on the simplex),
    computed in float64, returned in ``coefficients``' dtype."""
    import torch

    c = coefficients.detach().double().requires_grad_(True)
    with torch.enable_grad():
        loss = coefficient_loss(c, soft.detach().double(), kl_weight, rho)
        (grad,) = torch.autograd.grad(loss, c)
    return project_rows_to_simplex(c.detach() - lr * grad).to(coefficients.dtype)


def distilled_positions(soft: Tensor, x: Tensor) -> Tensor:
    """The public samples the coefficient loss averages over: ``soft`` ``[K, P, C]`` unchanged; on token sequences
    (``x`` ``[P, T]``, ``soft`` ``[K, P, T, V]``) the ``[K, M, V]`` predictions at the M positions whose input is not
    PAD (each position one sample, as the clients' distillation counts them)."""
    from lit_fl.data.tokens import PAD, is_token_batch

    if not is_token_batch(x):
        return soft
    return soft.flatten(1, 2)[:, (x != PAD).reshape(-1).to(soft.device)]


def tensor_batches(x: Tensor, y: Tensor, batch_size: int, generator: torch.Generator, epochs: int) -> ClientBatches:
    """Shuffled ``(x, y)`` batches over all of ``x`` (orders from ``generator``), no augmentation."""
    import torch

    from lit_fl.data.batches import ClientBatches

    return ClientBatches(x, y, torch.arange(len(x)), batch_size, generator, epochs=epochs)


@register_algorithm
class KTpFL(Algorithm):
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
        local_epochs: epochs of local CE per round (FedORION sec. 4.2.1: 10).
        loss: the clients' supervised loss (``ce``).
        lr: the clients' learning rate, local training and distillation (FedORION sec. 4.1: 0.01).
        momentum: the clients' SGD momentum (FedORION sec. 4.1: 0.9).
        weight_decay: the clients' SGD weight decay (FedORION names none: 0).
        batch_size: the clients' batch size, private and public data (FedORION sec. 4.1: 32).
    """

    #: FedORION sec. 4.1: KT-pFL "reports the average of individual accuracy of all the client models"
    reports = "global_acc"

    paper_same_init = False
    requires = (SERVER_BASED, PROXY_DATA)  # every sampled client talks to the server; public data on it
    sequence_tasks = True  # per-token soft predictions; coefficient KL and distillation over non-PAD positions
    client_defaults = FEDORION_CLIENTS  # FedORION's shared setting (sec. 4.1, 4.2.1)

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

    # -- round -------------------------------------------------------------------------------------------

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        import torch

        from lit_fl.federation.ledger import Payload

        selected = select_fraction(federation, self.client_fraction)
        clients = [federation.clients[n] for n in selected]
        losses = self.local_phase(clients, federation, runner)

        x = self.public_inputs(federation)
        arrived: list[int] = []
        soft: list[Tensor] = []
        for client, s in zip(clients, self.soft_predictions(clients, x, runner)):
            if ledger.send(client.id, -1, Payload([s])):  # s_n: public_size x classes
                arrived.append(client.id)
                soft.append(s)
        if not arrived:
            return RoundResult(senders=(), train_loss=nanmean(losses),
                               extra={"kd_loss": float("nan"), "coef_self": float("nan")})

        stacked = torch.stack(soft).double().cpu()
        block_idx = torch.tensor(arrived)
        assert self.coefficients is not None
        block = self.coefficients[block_idx][:, block_idx]
        mass = block.sum(dim=1, keepdim=True)
        uniform = torch.full_like(block, 1.0 / len(arrived))
        a = torch.where(mass > 0, block / mass.clamp_min(1e-300), uniform)
        a = update_coefficients(a, distilled_positions(stacked, x), self.coef_lr, self.kl_weight, self.rho)
        self.coefficients[block_idx.view(-1, 1), block_idx.view(1, -1)] = a * mass
        targets = personalized_targets(a, stacked).to(x.device, torch.float32)

        works: list[ClientWork | None] = []
        for k, cid in enumerate(arrived):
            got = ledger.give_back(-1, cid, Payload([targets[k]]))  # t_n: public_size x classes
            works.append(self.distill_work(federation.clients[cid], x, targets[k], federation) if got else None)
        kd_losses = phase_losses(runner.run_phase(works))
        return RoundResult(
            senders=tuple(arrived),
            train_loss=nanmean(losses),
            extra={"kd_loss": nanmean(kd_losses), "coef_self": float(a.diagonal().mean())},
        )

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
        if self.coefficients is not None and tuple(saved.shape) != tuple(self.coefficients.shape):
            raise ConfigError(f"checkpoint: KT-pFL's coefficient matrix is {tuple(saved.shape)}, this config has "
                              f"{self.coefficients.shape[0]} clients")
        self.coefficients = saved.clone().double().cpu()
