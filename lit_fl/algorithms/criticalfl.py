"""``CriticalFL``: FedAvg whose number of communicated clients follows the critical learning periods (Yan, Wang, Li,
"CriticalFL: A Critical Learning Periods Augmented Client Selection Framework for Efficient Federated Learning",
KDD 2023, arXiv 2109.05613; reference code GYan58/KDD-2023-CriticalFL, read for facts), a baseline of UA-PDFL
(papers/ua-pdfl.txt sec. 5.1.3: "Adjust the number of client communications according to gradient information"),
decentralized as UA-PDFL decentralizes it: every client is its own server (sec. 5.1.3, the pattern of Algorithm 2).

Round ``r`` (counted from 1), every client ``i`` keeps its own peer count ``n_i`` (``N_com`` at the start):

1. local training, ``local_epochs`` epochs of SGD (lr ``eta_r = lr * lr_decay^(r - 1)``, momentum) from the client's
   current model ``x_i``: ``z_i``, and the norm of its update ``u_i = ||z_i - x_i||_2`` (trainable parameters);
2. client ``i`` draws ``min(n_i, #topology neighbours)`` distinct neighbours ``S_i`` (``rng.algorithm``, client
   order); each ``j`` in ``S_i`` sends ``z_j`` (and the scalar ``u_j`` with it) through the ledger; with ``A_i`` the
   peers whose model arrived, FedAvg's data-size weighted average::

       x_i <- sum_{j in {i} + A_i} |D_j| z_j / sum_{j in {i} + A_i} |D_j|

3. the federated gradient norm client ``i`` measures (:func:`federated_gradient_norm`, the mean over the
   participants of their update norms, as the paper's server averages its participants' norms)::

       FGN_i^r = mean_{j in {i} + A_i} u_j

4. the critical-period rule (:func:`next_peer_count`) on client ``i``'s FGN history ``F_1 .. F_r``, window ``W``,
   threshold ``delta``: with ``old = mean(F_{r-W} .. F_{r-1})`` and ``new = mean(F_{r-W+1} .. F_r)``, the round is
   critical when ``(new - old) / old >= delta`` (and while fewer than ``W + 1`` values exist: the early phase is
   critical); then ``n_i <- min(2 n_i, n_max)``, otherwise ``n_i <- max(ceil(n_i / 2), n_min)``.

The counts and the FGN histories are the method's state across rounds (checkpointed).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lit_fl import steps
from lit_fl.algorithms.neighbours import NeighbourAlgorithm, data_sizes, draw_neighbours
from lit_fl.algorithms.norms import l2_norms
from lit_fl.algorithms.peer import snapshot_states
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ONE_ARCHITECTURE
from lit_fl.constraints import Fraction, NonNegativeFloat, PositiveInt
from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.algorithms.base import RoundResult
    from lit_fl.algorithms.peer import PeerRound
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.runner import StepRunner

    State = dict[str, Tensor]


@register_algorithm
class CriticalFL(NeighbourAlgorithm):
    """Decentralized CriticalFL: train, average with ``n_i`` peers (FedAvg), adapt ``n_i`` to the FGN's trend.

    All clients need the same architecture (averaging whole models; a clear error says so otherwise).

    Args:
        num_peers: ``N_com``, every client's peer count in round 1 (UA-PDFL sec. 5.1.4: 5; the paper's initial
            number of selected clients).
        min_peers: ``n_min``, the fewest peers outside a critical period; ``None`` = ``num_peers`` (the reference
            code's lower limit is the initial number of participants).
        max_peer_fraction: ``n_max = max(floor(f * N), min_peers)`` peers for ``N`` clients (reference code:
            0.75 of all clients); a client with fewer topology neighbours contacts all of them.
        window: ``W``, FGN values per window of the relative change (reference code: 10).
        threshold: ``delta``, the relative FGN change from which a round is critical (reference code: 0.01).
        **kwargs: the training setup of :class:`~lit_fl.algorithms.neighbours.NeighbourAlgorithm` (lr 0.05
            decayed 0.95 per round, momentum 0.5, batch 50, one epoch of cross-entropy: UA-PDFL sec. 5.1.4).
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over clients, each on its own data
    reports = "local_acc"

    sequence_tasks = False  # not checked on sequences

    requires = (ONE_ARCHITECTURE,)  # weights averaged whole between clients

    def __init__(
        self,
        num_peers: PositiveInt = 5,
        min_peers: PositiveInt | None = None,
        max_peer_fraction: Fraction = 0.75,
        window: PositiveInt = 10,
        threshold: NonNegativeFloat = 0.01,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.num_peers = num_peers
        self.min_peers = num_peers if min_peers is None else min_peers
        if self.min_peers > num_peers:
            raise ConfigError(f"algorithm.min_peers must be <= algorithm.num_peers ({num_peers}), got {min_peers}")
        self.max_peer_fraction = float(max_peer_fraction)
        self.window = window
        self.threshold = float(threshold)
        self.peer_counts: list[int] = []
        self.fgn_history: list[list[float]] = []

    def setup(self, federation: Federation) -> None:
        super().setup(federation)
        self.peer_counts = [self.num_peers] * federation.num_clients
        self.fgn_history = [[] for _ in range(federation.num_clients)]

    def max_peers(self, num_clients: int) -> int:
        """``n_max = max(floor(max_peer_fraction * N), min_peers)``."""
        return max(int(self.max_peer_fraction * num_clients), self.min_peers)

    def peers(self, round_: int, federation: Federation, ledger: CommunicationLedger) -> dict[int, list[int]]:
        """``S_i`` of every client: ``min(n_i, #neighbours)`` distinct topology neighbours from ``rng.algorithm``,
        in client order."""
        if not self.peer_counts:
            self.setup(federation)
        return draw_neighbours(federation, self.peer_counts)

    def client_phase(self, plan: PeerRound, federation: Federation, runner: StepRunner) -> list[float]:
        """Local training; ``z_j`` (every model after it, ``state["trained"]``) and the norm of every update."""
        before = snapshot_states(federation)
        losses = super().client_phase(plan, federation, runner)
        trained = plan.state["trained"] = snapshot_states(federation)  # z_j: before any averaging
        plan.state["norms"] = update_norms([before[c.id] for c in federation.clients],
                                           [trained[c.id] for c in federation.clients],
                                           [[k for k, _ in c.model.named_parameters()] for c in federation.clients])
        plan.state.update(used=list(self.peer_counts), critical=0, n_max=self.max_peers(federation.num_clients))
        return losses

    def combine(self, receiver: Client, arrived: list[Client], plan: PeerRound, federation: Federation,
                runner: StepRunner, ledger: CommunicationLedger) -> None:
        """FedAvg over the client and the peers that arrived; the FGN it measures; its next peer count."""
        i, trained, norms = receiver.id, plan.state["trained"], plan.state["norms"]
        sources = [i, *(c.id for c in arrived)]
        if arrived:
            average = steps.weighted_average([trained[j] for j in sources], data_sizes(federation, sources))
            receiver.set_weights(average)
        self.fgn_history[i].append(federated_gradient_norm([norms[j] for j in sources]))
        plan.state["critical"] += is_critical(self.fgn_history[i], self.window, self.threshold)
        self.peer_counts[i] = next_peer_count(self.fgn_history[i], self.peer_counts[i], self.window,
                                              self.threshold, self.min_peers, plan.state["n_max"])

    def round_result(self, plan: PeerRound, federation: Federation) -> RoundResult:
        n = federation.num_clients
        plan.extra.update(mean_peers=sum(plan.state["used"]) / n, mean_fgn=sum(h[-1] for h in self.fgn_history) / n,
                          critical_fraction=plan.state["critical"] / n)
        return super().round_result(plan, federation)

    def state_dict(self) -> dict[str, Any]:
        return {"peer_counts": list(self.peer_counts), "fgn_history": [list(h) for h in self.fgn_history]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.peer_counts = [int(n) for n in state["peer_counts"]]
        self.fgn_history = [[float(v) for v in h] for h in state["fgn_history"]]


def update_norms(befores: Sequence[State], afters: Sequence[State], keys: Sequence[Sequence[str]]) -> list[float]:
    """``||after - before||_2`` of every client over its entries ``keys`` (the trainable parameters), in float64,
    read from the device once for all clients (:func:`~lit_fl.algorithms.norms.l2_norms`)."""
    import torch

    return l2_norms([[after[k].to(torch.float64) - before[k].to(torch.float64) for k in names]
                     for before, after, names in zip(befores, afters, keys)])


def federated_gradient_norm(norms: Sequence[float]) -> float:
    """The FGN a client measures: the mean of its own and its arrived peers' update norms."""
    return sum(norms) / len(norms)


def relative_change(history: Sequence[float], window: int) -> float | None:
    """``(new - old) / old`` of the last two windows of ``window`` values, one value apart:
    ``old = mean(h[-W-1:-1])``, ``new = mean(h[-W:])``; None while fewer than ``W + 1`` values exist; ``inf``
    (``-inf``, 0) when ``old`` is 0 and ``new`` is above it (below, equal)."""
    if len(history) < window + 1:
        return None
    old = sum(history[-window - 1 : -1]) / window
    new = sum(history[-window:]) / window
    if old == 0:
        return 0.0 if new == 0 else math.copysign(math.inf, new)
    return (new - old) / old


def is_critical(history: Sequence[float], window: int, threshold: float) -> bool:
    """A critical learning period: the FGN's relative change is at least ``threshold``, or there is not yet a full
    pair of windows (the early phase, which the paper finds critical)."""
    change = relative_change(history, window)
    return change is None or change >= threshold


def next_peer_count(
    history: Sequence[float], current: int, window: int, threshold: float, min_peers: int, max_peers: int
) -> int:
    """The next round's peer count: doubled during a critical period (at most ``max_peers``), halved outside one,
    rounding up (at least ``min_peers``)."""
    if is_critical(history, window, threshold):
        return min(2 * current, max_peers)
    return max(math.ceil(current / 2), min_peers)
