"""UA-PDFL: unit representation aided personalised decentralized FL (papers/ua-pdfl.txt, Algorithms 1-2).

Every round, for every client ``i`` (all clients take part, each acting as its own aggregator):

1. every client's unit representation ``I = softmax(f(X_unit))`` (Eq. 5) and auxiliary representation
   ``I_aux = g(X_unit)`` (Eq. 11) are taken from its weights at the start of the round (= after its last
   local training, Algorithm 2 lines 24-25); ``X_unit`` is the all-ones sample in the normalised input space
   (see :mod:`lit_fl.algorithms.unit_representation`);
2. ``i`` draws ``N_com`` random peers ``Q_i`` among its topology neighbours (``rng.algorithm``) and gets their
   ``I`` and ``I_aux``; ``Div(i, j) = 0.5 KL(I_i||I_j) + 0.5 KL(I_j||I_i)`` (Eq. 6);
3. client-wise dropout (sec. 3.3): if ``Div(i, j) <= th_I`` for ALL peers, ``i`` replaces its whole model by
   the model of one random peer of ``Q_i``;
4. otherwise layer-wise personalisation (sec. 3.4, Algorithm 1): ``g_i`` = data-size weighted average of
   the feature extractors of ``i`` and all peers, ``h_i`` = the same over ``i`` and the peers with
   ``Div(i, j) < th_I`` (only those send ``h``);
5. local training, E epochs of CE + ``mu ||I_aux_i - I_aux_avg||^2`` (Eq. 12), ``I_aux_avg`` the mean of
   ``I_aux`` over ``i`` and ``Q_i`` (detached), ``I_aux_i`` recomputed from the current weights.

All reads in steps 3-4 use a snapshot of the round-start weights, so a model replaced or averaged earlier in
the round is never passed on in the same round (no chaining). The ledger counts the weights that travel: a
whole model per dropout, ``g`` from every peer plus ``h`` from close peers otherwise; the representations
(``C + F`` floats per peer) are not model weights and are not counted.

Split ``g | h``: everything before the final classifier block (sec. 5.1.1), configurable with
``classifier_modules``. lit-fl's CNN has one linear classifier where the paper's CNN has two fully connected
layers, so ``h`` is that single layer there.

Scale of the auxiliary term (measured, see the issue note): ``||.||^2`` is Eq. 12's summed squared L2 norm
over all ``F`` features. lit-fl's CNN ends every layer with a LayerNorm (``GroupNorm(1, C)``), so its
features have unit variance and ``F`` is large (784 for ``cnn_8_16`` on 28x28, 4096 for ``cnn_32_64`` on
32x32): with the paper's ``mu = 0.01`` the term dominates CE. On mnist5k (10 clients, Dirichlet 0.5,
``cnn_8_16``, 12 rounds) local accuracy was 0.754 with ``mu = 0.01``, 0.943 with 0.001 and 0.954 with 0
(FedPer 0.942, Local 0.933). The default stays the paper's 0.01.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.fedper import FedPer, payload
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.unit_representation import pair_divergences, unit_input, unit_representations
from lit_fl.constraints import NonNegativeFloat, OpenUnitInterval
from lit_fl.steps.optim import SGDConfig

if TYPE_CHECKING:
    from torch import Tensor, nn

    from lit_fl.algorithms.peer import PeerRound
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner


@register_algorithm
class UAPDFL(FedPer):
    """UA-PDFL. Homogeneous models only (averaging ``g``/``h`` needs one architecture; a clear error otherwise).

    Args:
        threshold: ``th_I`` (default 0.1): dropout when every ``Div(i, j) <= th_I``; a peer's classifier is
            merged when ``Div(i, j) < th_I``.
        mu: weight of the auxiliary proximal term of Eq. 12 (default 0.01); 0 disables it.
        client_dropout: ablation "without CD" of Fig. 13 when false: never replace a model, always use
            layer-wise personalisation.
        layer_wise: ablation "without LP" of Fig. 13 when false: when a client does not drop out it averages
            its WHOLE model with all its peers (no personalised layers).
        eps: clamp of the probabilities inside the KL divergences.
        **kwargs: ``num_peers`` (N_com, 5) and ``classifier_modules`` of :class:`FedPer`; the training setup of
            :class:`~lit_fl.algorithms.neighbours.NeighbourAlgorithm` (``lr`` 0.05, ``lr_decay`` 0.95 per round,
            ``momentum`` 0.5, ``batch_size`` 50, ``local_epochs`` 1, ``loss`` ce, ``weight_decay`` 0).
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over the personalized clients' own data
    reports = "local_acc"

    #: "each client C_i initializes its model parameters w_i^0" (UA-PDFL sec. 3.5): one initialisation each.
    paper_same_init = False

    def __init__(
        self,
        threshold: NonNegativeFloat = 0.1,
        mu: NonNegativeFloat = 0.01,
        client_dropout: bool = True,
        layer_wise: bool = True,
        eps: OpenUnitInterval = 1e-8,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.threshold = float(threshold)
        self.mu = float(mu)
        self.client_dropout = client_dropout
        self.layer_wise = layer_wise
        self.eps = float(eps)

    @staticmethod
    def make_unit_input(federation: Federation) -> Tensor:
        """``X_unit`` for the federation's input shape, on its models' device."""
        param = next(federation.clients[0].model.parameters())
        return unit_input(federation.data.input_shape, param.device, param.dtype)

    def representations(self, federation: Federation, runner: StepRunner,
                        x_unit: Tensor) -> dict[int, tuple[Tensor, Tensor]]:
        """``(I, I_aux)`` of every client's current model (Eq. 5 and 11), one predict phase."""
        return unit_representations(runner, {c.id: c.model for c in federation.clients}, x_unit, self.split)

    def plan(self, round_: int, federation: Federation, runner: StepRunner, ledger: CommunicationLedger) -> PeerRound:
        """FedPer's plan, with every client's ``(I, I_aux)`` at the round's start and its decision (sec. 3.3-3.4):
        a dropout receives one random peer's whole model, otherwise every peer sends ``g`` and the close ones
        ``h`` too."""
        if not self.feature_keys:
            self.prepare(federation)
        x_unit = self.make_unit_input(federation)
        reps = self.representations(federation, runner, x_unit)
        plan = super().plan(round_, federation, runner, ledger)
        queues: dict[int, list[int]] = plan.draw
        pairs = [(c.id, p) for c in federation.clients for p in queues[c.id]]
        values = iter(pair_divergences({n: rep for n, (rep, _) in reps.items()}, pairs, self.eps))
        dropouts: dict[int, int] = {}  # client -> the peer whose model it takes
        close_peers: dict[int, list[int]] = {}
        divergences: list[float] = []
        for client in federation.clients:
            peers = queues[client.id]
            if not peers:  # no neighbour reachable this round: keep the model, train alone
                continue
            divs = [next(values) for _ in peers]  # Eq. 6 for every peer
            divergences += divs
            if self.client_dropout and all(d <= self.threshold for d in divs):
                dropouts[client.id] = peers[int(federation.rng.algorithm.integers(len(peers)))]
                continue
            close = [p for p, d in zip(peers, divs) if d < self.threshold or not self.layer_wise]
            close_peers[client.id] = close
        plan.incoming = [(c, [federation.clients[dropouts[c.id]]] if c.id in dropouts else sources)
                         for c, sources in plan.incoming]
        personalised = int(self.layer_wise) * len(close_peers)
        plan.extra.update(client_dropouts=len(dropouts), personalised_classifiers=personalised,
                          merged_classifiers=sum(len(c) for c in close_peers.values()),
                          mean_divergence=sum(divergences) / len(divergences) if divergences else math.nan)
        plan.state.update(x_unit=x_unit, reps=reps, dropouts=dropouts, close=close_peers)
        return plan

    def outgoing(self, source: Client, receiver: Client, plan: PeerRound) -> nn.Module:
        """The whole model to a dropout and from a close peer; ``g`` alone otherwise."""
        whole = receiver.id in plan.state["dropouts"] or source.id in plan.state["close"][receiver.id]
        keys = [*self.feature_keys, *self.classifier_keys] if whole else self.feature_keys
        return payload(plan.state["snapshot"][source.id], keys)

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """A dropout takes the peer's model; otherwise ``g`` from every peer, ``h`` from the close ones."""
        snapshot, i = plan.state["snapshot"], receiver.id
        if i in plan.state["dropouts"]:
            receiver.set_weights(snapshot[plan.state["dropouts"][i]])
        elif i in plan.state["close"]:
            peers = [c.id for c in arrived]
            receiver.set_weights(self.merge(federation, snapshot, receiver, [i, *peers], [i, *plan.state["close"][i]]))

    def client_work(self, client: Client, plan: PeerRound, federation: Federation) -> ClientWork | None:
        """Eq. 12's local training (:meth:`aux_step`) at the round's lr."""
        step = self.aux_step(client, plan.state["optimizer"], plan.state["x_unit"], plan.state["reps"],
                             plan.draw[client.id])
        return self.work(client, step, federation, self.local_epochs)

    def aux_step(
        self,
        client: Client,
        optimizer: SGDConfig,
        x_unit: Tensor,
        reps: dict[int, tuple[Tensor, Tensor]],
        peers: list[int],
    ) -> steps.AuxProximalTraining:
        """Eq. 12 for ``client``: CE + ``mu ||I_aux - mean(I_aux of client and peers)||^2`` (Algorithm 2 l. 29)."""
        import torch

        target = torch.stack([reps[n][1] for n in [client.id, *peers]]).mean(dim=0)
        return steps.AuxProximalTraining(
            client.model,
            client.class_proportions,
            x_unit,
            target,
            mu=self.mu,
            loss=self.loss,
            optimizer=optimizer,
            features=self.split.features,
        )
