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

from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.dispfl_masks import (
    aggregate,
    erk_densities,
    kept_positions,
    masked_average,
    ones,
    parameter_shapes,
    prune_and_regrow,
    prune_rate,
    random_masks,
    screen_gradients,
    sparse_payload,
    updated_masks,
)
from lit_fl.algorithms.neighbours import NeighbourAlgorithm, draw_neighbours
from lit_fl.algorithms.peer import PeerRound, snapshot_states
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.constraints import Fraction, NonNegativeFloat, PositiveInt, UnitInterval

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner

    State = dict[str, Tensor]
    Mask = dict[str, Tensor]


@register_algorithm
class DisPFL(NeighbourAlgorithm):
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
    trains_first = False  # the round-start sparse models travel; the aggregated model trains

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
        super().__init__(**kwargs)  # NeighbourAlgorithm's lr_decay and UA-PDFL's client SGD
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

    # -- the round: the round-start sparse models of the drawn peers, aggregated, masked training, mask update ----

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """The round-start sparse models and their supports (no chaining) and every client's drawn peers."""
        snapshot = snapshot_states(federation)
        support = {i: dict(s) for i, s in self.support.items()}
        plan = super().plan(round_, federation, runner, ledger)
        plan.state.update(snapshot=snapshot, support=support, received=0, kept={})
        return plan

    def peers(self, round_: int, federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        return self.draw_peers(federation)

    def outgoing(self, source: Client, receiver: Client, plan: PeerRound) -> nn.Module:
        """The kept values of the source's round-start sparse model (:func:`sparse_payload`)."""
        kept = plan.state["kept"]
        if source.id not in kept:  # once per source and round, whatever the number of receivers
            state = plan.state["snapshot"][source.id]
            kept[source.id] = kept_positions(plan.state["support"][source.id], next(iter(state.values())).device)
        return sparse_payload(plan.state["snapshot"][source.id], plan.state["support"][source.id], kept[source.id])

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """:func:`aggregate` of the client's and the arrived peers' models, times the client's mask."""
        i, snapshot, support = receiver.id, plan.state["snapshot"], plan.state["support"]
        plan.state["received"] += len(arrived)
        if arrived:
            sources = [i, *(c.id for c in arrived)]
            receiver.set_weights(aggregate([snapshot[j] for j in sources], [support[j] for j in sources],
                                           self.masks[i]))

    def client_phase(self, plan: PeerRound, federation: Federation, runner: StepRunner) -> list[float]:
        """Masked local training, then ``s_i = m_i`` and the mask update (:func:`updated_masks`, on the gradients
        of :func:`screen_gradients`) while the prune rate is above 0."""
        losses = super().client_phase(plan, federation, runner)
        rate = prune_rate(plan.round, self.anneal_factor, self.anneal_rounds)
        screened = self.screen_gradients(federation, runner) if rate > 0 else {}
        changed = 0
        moving = [client for client in federation.clients if client.id in screened]
        new_masks = updated_masks([self.masks[c.id] for c in moving], [c.model for c in moving],
                                  [screened[c.id] for c in moving], rate)
        moved = {c.id: new for c, new in zip(moving, new_masks)}
        for client in federation.clients:  # s_i = m_i (what was trained), then m_i moves
            i = client.id
            self.support[i] = {k: m.clone() for k, m in self.masks[i].items()}
            if i in moved:
                new = moved[i]
                changed += sum(ones(new[k] != self.masks[i][k]) for k in new)
                self.masks[i] = new
        total = sum(m.numel() for mask in self.masks.values() for m in mask.values())
        kept = sum(ones(m) for mask in self.masks.values() for m in mask.values())
        plan.extra.update(prune_rate=rate, density=kept / total, mask_swaps=changed / (2 * len(self.masks)),
                          mean_peers=plan.state["received"] / federation.num_clients)
        return losses

    def client_work(self, client: Client, plan: PeerRound, federation: Federation) -> ClientWork | None:
        return self.work(client, self.masked_step(client, plan.state["optimizer"]), federation, self.local_epochs)

    def draw_peers(self, federation: Federation) -> dict[int, list[int]]:
        """Every client's ``min(N_com, #neighbours)`` distinct random topology neighbours, drawn from
        ``rng.algorithm`` in client order (the reference's ``cs="random"``, within the topology)."""
        return draw_neighbours(federation, [self.num_peers] * federation.num_clients)

    def masked_step(self, client: Client, optimizer: Any) -> Any:
        """The client's masked local training (its mask ``m_i``, in parameter order)."""
        from lit_fl.steps.masked_training import MaskedTraining

        names = [name for name, _ in client.model.named_parameters()]
        return MaskedTraining(client.model, client.class_proportions, [self.masks[client.id][n] for n in names],
                              self.loss, optimizer)

    def screen_gradients(self, federation: Federation, runner: StepRunner) -> dict[int, dict[str, Tensor]]:
        """:func:`~lit_fl.algorithms.dispfl_masks.screen_gradients` on the first batch of a fresh shuffle of every
        client's train split (``rng.data_order``, client order)."""
        return screen_gradients(federation.clients, runner,
                                lambda c: next(iter(self.batches(federation, c.train_idx, 1))), self.loss)

    def state_dict(self) -> dict[str, Any]:
        return {
            "masks": {i: {k: m.clone() for k, m in self.masks[i].items()} for i in sorted(self.masks)},
            "support": {i: {k: m.clone() for k, m in self.support[i].items()} for i in sorted(self.support)},
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.masks = {int(i): {k: m.clone() for k, m in mask.items()} for i, mask in sorted(state["masks"].items())}
        self.support = {int(i): {k: m.clone() for k, m in mask.items()}
                        for i, mask in sorted(state["support"].items())}


__all__ = ["DisPFL", "aggregate", "erk_densities", "masked_average", "prune_and_regrow", "prune_rate",
           "random_masks"]
