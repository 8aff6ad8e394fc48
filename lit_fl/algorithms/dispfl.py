"""``DisPFL``: decentralized personalized FL by sparse training (Dai, Shen, He, Tian, Tao, "DisPFL: Towards
Communication-Efficient Personalized Federated Learning via Decentralized Sparse Training", ICML 2022, arXiv
2206.00187; reference code github.com/rong-dai/DisPFL, read for facts), a baseline of UA-PDFL (papers/ua-pdfl.txt
sec. 5.1.3, ref. [5]).

Every client ``i`` keeps a personalised sparse mask ``m_i`` over every parameter of its model (buffers are dense)
and a sparse model whose support is the mask it was last trained with, ``s_i``. Setup: ERK densities for an overall
density ``d`` (:func:`erk_densities`), one random mask per client with ``floor(d_l * n_l)`` ones per layer
(:func:`random_masks`), every client's model multiplied by its mask (``s_i = m_i``). Round ``k`` (from 1):

1. every client draws ``min(N_com, #topology neighbours)`` distinct neighbours (``rng.algorithm``, client order);
   each sends its round-start sparse model (the kept values only, a ``Payload``) through the ledger; a model that
   does not arrive is left out;
2. aggregation, per coordinate over the client itself and the neighbours that arrived (:func:`masked_average`):
   the mean of the values of the models whose support ``s_j`` holds that coordinate (0 where none does), then
   times the client's own mask ``m_i`` (:func:`aggregate`);
3. local training with the mask enforced (:class:`~lit_fl.steps.MaskedTraining`: masked gradients zeroed, masked
   weights exactly zero after every step), ``local_epochs`` epochs at ``lr * lr_decay^(k - 1)``; then ``s_i = m_i``;
4. mask update (:func:`prune_and_regrow`): per layer, prune the ``ceil(alpha_k * nnz)`` active weights of
   smallest magnitude, regrow as many inactive ones (just pruned included) of largest gradient magnitude, the
   gradient of the loss on one batch at the trained weights (a phase of the runner: :meth:`DisPFL.screen_gradients`);
   ``alpha_k`` cosine-annealed (:func:`prune_rate`).
   The model keeps its trained weights (support ``s_i``): it is what is evaluated and what is sent next round.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.base import RoundResult, phase_losses
from lit_fl.algorithms.fedper import snapshot_states
from lit_fl.algorithms.local import Local
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.constraints import Fraction, NonNegativeFloat, PositiveInt, UnitInterval

if TYPE_CHECKING:
    import numpy as np
    from torch import Tensor, nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner

    State = dict[str, Tensor]
    Mask = dict[str, Tensor]


@register_algorithm
class DisPFL(Local):
    """DisPFL: personalised sparse masks, per-coordinate averaging among the ``N_com`` neighbours that hold a weight,
    masked local training, then magnitude pruning and gradient regrowth of the mask.

    All clients need the same architecture (a clear error says so otherwise).

    Args:
        num_peers: ``N_com``, neighbours each client receives from per round (UA-PDFL sec. 5.1.4: 5); fewer when a
            client has fewer topology neighbours.
        density: overall fraction of the parameters a mask keeps (DisPFL's ``dense_ratio``, reference code and
            scripts: 0.5).
        anneal_factor: ``alpha``, the initial prune rate (reference code and scripts: 0.5).
        anneal_rounds: ``T`` of the cosine schedule, ``alpha_k = alpha/2 (1 + cos(pi min(k - 1, T) / T))`` (the
            reference anneals over its total rounds; UA-PDFL sec. 5.1.4 runs R = 150).
        erk_power: exponent of ERK's raw densities ``(sum(shape) / prod(shape))^power`` (reference: 1).
        same_initial_mask: every client starts from one mask (the reference's default) instead of one each (its
            released scripts pass ``--different_initial``: false).
        local_epochs: epochs of masked local training per round (UA-PDFL: 1).
        lr: initial learning rate (UA-PDFL: 0.05).
        lr_decay: per-round decay, round ``k`` trains at ``lr * lr_decay^(k - 1)`` (UA-PDFL: 0.95).
        momentum: SGD momentum (UA-PDFL sec. 5.1.4: 0.5).
        loss: ``ce`` (UA-PDFL; the reference code) or ``wsm``.
        weight_decay: SGD weight decay (UA-PDFL names none: 0).
        batch_size: UA-PDFL: 50; also the size of the one batch whose gradient regrows the mask.
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over clients, each on its own data
    reports = "local_acc"

    sequence_tasks = False  # masks and its own loss loop are for image models

    requires = (ONE_ARCHITECTURE,)  # weights averaged whole between clients

    def __init__(
        self,
        num_peers: PositiveInt = 5,
        density: Fraction = 0.5,
        anneal_factor: UnitInterval = 0.5,
        anneal_rounds: PositiveInt = 150,
        erk_power: NonNegativeFloat = 1.0,
        same_initial_mask: bool = False,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)  # Local's lr_decay and UA-PDFL's client SGD
        self.num_peers = num_peers
        self.density = float(density)
        self.anneal_factor = float(anneal_factor)
        self.anneal_rounds = anneal_rounds
        self.erk_power = float(erk_power)
        self.same_initial_mask = same_initial_mask
        #: m_i: the mask client i trains with next
        self.masks: dict[int, Mask] = {}
        #: s_i: the mask client i's model was last trained with (the support of what it sends)
        self.support: dict[int, Mask] = {}

    def setup(self, federation: Federation) -> None:
        """ERK masks drawn from ``rng.algorithm`` (one per client, or one shared), applied to the initial models."""
        import torch

        super().setup(federation)
        shapes = parameter_shapes(federation.clients[0].model)
        densities = erk_densities(shapes, self.density, self.erk_power)
        shared = random_masks(shapes, densities, federation.rng.algorithm) if self.same_initial_mask else None
        for client in federation.clients:
            mask = shared if shared is not None else random_masks(shapes, densities, federation.rng.algorithm)
            self.masks[client.id] = {k: m.clone() for k, m in mask.items()}
            self.support[client.id] = {k: m.clone() for k, m in mask.items()}
            with torch.no_grad():
                for name, p in client.model.named_parameters():
                    p.mul_(mask[name].to(device=p.device, dtype=p.dtype))

    def run_round(
        self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger
    ) -> RoundResult:
        snapshot = snapshot_states(federation)  # the round-start sparse models: no chaining
        support = {i: dict(s) for i, s in self.support.items()}
        peers = self.draw_peers(federation)
        received = 0
        for client in federation.clients:
            i = client.id
            arrived = [j for j in peers[i] if ledger.send(j, i, sparse_payload(snapshot[j], support[j]))]
            received += len(arrived)
            if arrived:
                sources = [i, *arrived]
                client.set_weights(aggregate([snapshot[j] for j in sources], [support[j] for j in sources],
                                             self.masks[i]))
        optimizer = self.round_optimizer(round_)
        works = [self.work(c, self.masked_step(c, optimizer), federation, self.local_epochs)
                 for c in federation.clients]
        losses = phase_losses(runner.run_phase(works))
        rate = prune_rate(round_, self.anneal_factor, self.anneal_rounds)
        screened = self.screen_gradients(federation, runner) if rate > 0 else {}
        changed = 0
        for client in federation.clients:  # s_i = m_i (what was trained), then m_i moves
            i = client.id
            self.support[i] = {k: m.clone() for k, m in self.masks[i].items()}
            if i in screened:
                grads = screened[i]
                weights = {k: p.detach().cpu() for k, p in client.model.named_parameters()}
                new = {k: prune_and_regrow(m, weights[k], grads[k].cpu(), rate) for k, m in self.masks[i].items()}
                changed += sum(int((new[k] != self.masks[i][k]).sum()) for k in new)
                self.masks[i] = new
        total = sum(m.numel() for mask in self.masks.values() for m in mask.values())
        kept = sum(int(m.sum()) for mask in self.masks.values() for m in mask.values())
        return self.round_result(federation, losses, optimizer, prune_rate=rate, density=kept / total,
                                 mask_swaps=changed / (2 * len(self.masks)),
                                 mean_peers=received / federation.num_clients)

    def draw_peers(self, federation: Federation) -> dict[int, list[int]]:
        """Every client's ``min(N_com, #neighbours)`` distinct random topology neighbours, drawn from
        ``rng.algorithm`` in client order (the reference's ``cs="random"``, within the topology)."""
        drawn: dict[int, list[int]] = {}
        for client in federation.clients:
            candidates = federation.topology.neighbours(client.id)
            size = min(self.num_peers, len(candidates))
            chosen = federation.rng.algorithm.choice(candidates, size=size, replace=False) if size else []
            drawn[client.id] = [int(p) for p in chosen]
        return drawn

    def masked_step(self, client: Client, optimizer: Any) -> Any:
        """The client's masked local training (its mask ``m_i``, in parameter order)."""
        from lit_fl.steps.masked_training import MaskedTraining

        names = [name for name, _ in client.model.named_parameters()]
        return MaskedTraining(client.model, client.class_proportions, [self.masks[client.id][n] for n in names],
                              self.loss, optimizer)

    def screen_gradients(self, federation: Federation, runner: StepRunner) -> dict[int, dict[str, Tensor]]:
        """Every client's (with a train sample) gradient of the loss on one batch (the first of a fresh shuffle,
        ``rng.data_order``, drawn in client order) at its trained weights, every coordinate, by parameter name (the
        reference's ``screen_gradients``: the model in eval mode): one phase of
        :class:`~lit_fl.steps.gradient.GradientWork`."""
        from lit_fl.steps.gradient import GradientWork

        works: list[GradientWork | None] = []
        for client in federation.clients:
            if client.num_train == 0:
                works.append(None)
                continue
            x, y = next(iter(self.batches(federation, client.train_idx, 1)))
            works.append(GradientWork(client.id, client.model, x, y, client.class_proportions, self.loss))
        names = [name for name, _ in federation.clients[0].model.named_parameters()]
        return {work.client: dict(zip(names, result.value))
                for work, result in zip(works, runner.run_phase(works)) if work is not None}

    def state_dict(self) -> dict[str, Any]:
        return {
            "masks": {i: {k: m.clone() for k, m in self.masks[i].items()} for i in sorted(self.masks)},
            "support": {i: {k: m.clone() for k, m in self.support[i].items()} for i in sorted(self.support)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.masks = {int(i): {k: m.clone() for k, m in mask.items()} for i, mask in sorted(state["masks"].items())}
        self.support = {int(i): {k: m.clone() for k, m in mask.items()}
                        for i, mask in sorted(state["support"].items())}


# -- the pieces, each a pure function -----------------------------------------------------------------------------


def parameter_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape, by name (the tensors DisPFL masks: all of ``named_parameters``, as the reference)."""
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def erk_densities(shapes: Mapping[str, Sequence[int]], density: float, power: float = 1.0) -> dict[str, float]:
    """Erdos-Renyi-Kernel densities (Evci et al. 2020, as DisPFL's reference code): layer ``l`` keeps
    ``d_l = eps * r_l`` of its ``n_l`` weights, ``r_l = (sum(shape_l) / n_l)^power``, with ``eps`` such that
    ``sum_l d_l n_l = density * sum_l n_l``; a layer whose ``d_l`` would exceed 1 is dense (``d_l = 1``) and ``eps``
    is solved again over the others (the layers of the largest ``r_l`` first)."""
    sizes = {name: math.prod(shape) for name, shape in shapes.items()}
    raw = {name: (sum(shape) / sizes[name]) ** power for name, shape in shapes.items()}
    dense: set[str] = set()
    while True:
        sparse = [n for n in shapes if n not in dense]
        if not sparse:
            return dict.fromkeys(shapes, 1.0)
        rhs = density * sum(sizes[n] for n in sparse) - (1 - density) * sum(sizes[n] for n in dense)
        eps = rhs / sum(raw[n] * sizes[n] for n in sparse)
        largest = max(raw[n] for n in sparse)
        if eps * largest <= 1:
            return {n: 1.0 if n in dense else eps * raw[n] for n in shapes}
        dense.update(n for n in sparse if raw[n] == largest)


def random_masks(
    shapes: Mapping[str, Sequence[int]], densities: Mapping[str, float], generator: np.random.Generator
) -> dict[str, Tensor]:
    """One bool mask per layer with ``floor(d_l * n_l)`` ones at positions drawn without replacement from
    ``generator`` (in layer order)."""
    import torch

    masks = {}
    for name, shape in shapes.items():
        n = math.prod(shape)
        flat = torch.zeros(n, dtype=torch.bool)
        keep = int(densities[name] * n)
        if keep > 0:
            flat[torch.from_numpy(generator.permutation(n)[:keep])] = True
        masks[name] = flat.reshape(tuple(shape))
    return masks


def masked_average(states: Sequence[State], supports: Sequence[Mapping[str, Tensor]]) -> State:
    """Per coordinate, the mean of the values of the states whose support holds it (0 where none does); entries
    without a support (buffers) are dense: the mean of all floating-point ones, the first state's integer ones.
    Accumulated in float64, stored in the entry's dtype."""
    import torch

    out = {}
    for key, value in states[0].items():
        if key in supports[0]:
            device = value.device
            total = sum(s[key].to(torch.float64) * m[key].to(device, torch.float64) for s, m in zip(states, supports))
            count = sum(m[key].to(device, torch.float64) for m in supports)
            out[key] = torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total)).to(value.dtype)
        elif value.is_floating_point():
            out[key] = (sum(s[key].to(torch.float64) for s in states) / len(states)).to(value.dtype)
        else:
            out[key] = value.clone()
    return out


def aggregate(states: Sequence[State], supports: Sequence[Mapping[str, Tensor]], mask: Mapping[str, Tensor]) -> State:
    """DisPFL's aggregation of a client (``states[0]``, its own) with its neighbours: :func:`masked_average`, then
    times the client's own mask ``mask`` (a coordinate held by no neighbour keeps the client's own value)."""
    out = masked_average(states, supports)
    for key, m in mask.items():
        out[key] = out[key] * m.to(out[key].device, out[key].dtype)
    return out


def prune_rate(round_: int, anneal_factor: float, anneal_rounds: int) -> float:
    """``alpha_k = alpha/2 (1 + cos(pi t / T))``, ``t = min(k - 1, T)``: ``alpha`` in round 1, 0 from round
    ``T + 1`` on (the reference's ``cosine_annealing`` with its 0-based round)."""
    t = min(round_ - 1, anneal_rounds)
    return anneal_factor / 2 * (1 + math.cos(math.pi * t / anneal_rounds))


def prune_and_regrow(mask: Tensor, weight: Tensor, grad: Tensor, rate: float) -> Tensor:
    """One layer's mask update: ``r = ceil(rate * nnz)``; the ``r`` active weights of smallest ``|weight|`` leave
    the mask, then the ``r`` inactive coordinates (those just pruned included) of largest ``|grad|`` join it. The
    number of ones is unchanged. Ties go to the lower flat index (stable sorts)."""
    import torch

    flat = mask.reshape(-1).to(torch.bool)
    r = math.ceil(rate * int(flat.sum()))
    if r == 0:
        return mask.clone()
    new = flat.clone()
    magnitude = torch.where(flat, weight.reshape(-1).abs().to(torch.float64), torch.full_like(flat, math.inf,
                                                                                              dtype=torch.float64))
    new[torch.sort(magnitude, stable=True).indices[:r]] = False
    score = torch.where(new, torch.full_like(flat, -math.inf, dtype=torch.float64),
                        grad.reshape(-1).abs().to(torch.float64))
    new[torch.sort(score, descending=True, stable=True).indices[:r]] = True
    return new.reshape(mask.shape).to(mask.dtype)


def sparse_payload(state: State, support: Mapping[str, Tensor]) -> nn.Module:
    """What a client sends: the values its support keeps (each masked entry as a 1-D tensor of its kept values) and
    its dense buffers; the ledger counts their bytes (the positions, a bitmap, are not counted: the reference
    counts only the non-zero parameters)."""
    from lit_fl.federation.ledger import Payload

    return Payload([value[support[key].to(value.device)] if key in support else value for key, value in state.items()])
