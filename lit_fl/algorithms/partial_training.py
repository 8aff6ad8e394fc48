"""Decentralized partial training: Federated Dropout, HeteroFL, FedRolex (papers/dfml.txt A.3.3, Algorithm 3).

Each round the participants train locally, the senders send their models to the aggregator, the largest
participating model becomes ``W_g``, every entry of ``W_g`` is averaged over the participants covering it
(Eq. 6) and every participant gets its slice of the new ``W_g`` back. The methods differ only in the index
sets of the sub-models (Eq. 7-9); the slicing itself is functional, in :mod:`lit_fl.steps.slicing`.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from lit_fl.algorithms.fedavg import DecentralizedFedAvg
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.errors import ConfigError
from lit_fl.models import POOLS

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.slicing import IndexRule, Shape


class PartialTraining(DecentralizedFedAvg):
    """Algorithm 3 with the index sets of a subclass (:meth:`index_rule`).

    All models must be width-scaled copies of one architecture family (an H1 pool); :meth:`setup` refuses
    anything else. Index sets follow the rule of :mod:`lit_fl.steps.slicing`: keyed by the global dimension
    size, so coupled dimensions (a layer's outputs and the next layer's inputs) always agree.

    Args:
        weighting: ``equal`` (the paper: ``d_n = 1/|P|``) or ``samples`` (``d_n`` = local train-set size).
    """

    #: DFML sec. 4.4.3 (Tables 4-5, 11): the decentralized partial-training baselines' global accuracy
    reports = "global_acc"

    sequence_tasks = False  # width-sliced submodels of the image families

    sample_level_dp = False  # trains sliced sub-models: DP-SGD is not built for them (docs/privacy.md)
    exchange_dp = False  # sends sliced sub-models: DP on them is not built (docs/privacy.md)

    def __init__(self, weighting: Literal["equal", "samples"] = "equal", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.weighting = weighting

    def setup(self, federation: Federation) -> None:
        from lit_fl.steps.slicing import width_family_mismatch

        super().setup(federation)
        models = {}
        for client in federation.clients:
            models.setdefault(client.arch, client.model)
        mismatch = width_family_mismatch(models)
        if mismatch is not None:
            big, small, reason = mismatch
            pools = ", ".join(name for name in POOLS if name.startswith("h1_"))
            raise ConfigError(
                f"{self.name} needs width-scaled copies of one architecture family (models.pool {pools}); "
                f"got {big} and {small} ({reason})"
            )

    @abstractmethod
    def index_rule(
        self, round_: int, federation: Federation, global_views: dict[str, Shape], views: Sequence[dict[str, Shape]]
    ) -> IndexRule:
        """The rule ``(J, n) -> index set`` of this round, given ``W_g``'s and the participants' view shapes."""

    def index_rules(
        self, round_: int, federation: Federation, global_views: dict[str, Shape], views: Sequence[dict[str, Shape]]
    ) -> list[IndexRule]:
        """One rule per participant; by default every participant follows the round's :meth:`index_rule`."""
        return [self.index_rule(round_, federation, global_views, views)] * len(views)

    def aggregate(self, round_: int, federation: Federation, clients: list[Client]) -> None:
        """Eq. 6 over the participants' overlapping entries instead of FedAvg's per-architecture average."""
        self.aggregate_and_split(round_, federation, clients)

    def aggregate_and_split(self, round_: int, federation: Federation, clients: Sequence[Client]) -> dict[str, Tensor]:
        """At the aggregator: ``W_g`` = the largest model of ``clients`` (most parameters, the first of equals),
        Eq. 6 over all of them, then every client's weights = its slice of the new ``W_g`` (returned)."""
        from lit_fl.steps.slicing import aggregate, extract, slice_plan, view_shapes

        largest = max(range(len(clients)), key=lambda i: clients[i].num_params)
        states = [c.model.state_dict() for c in clients]
        global_views = view_shapes(clients[largest].model)
        views = [view_shapes(c.model) for c in clients]
        rules = self.index_rules(round_, federation, global_views, views)
        plans = [slice_plan(global_views, v, rule) for v, rule in zip(views, rules)]
        weights = None if self.weighting == "equal" else [float(c.num_train) for c in clients]
        new_global = aggregate(states[largest], states, weights, plans)
        subs = [extract(new_global, {k: t.shape for k, t in s.items()}, p) for s, p in zip(states, plans)]
        for client, sub in zip(clients, subs):
            client.set_weights(sub)
        return new_global


@register_algorithm
class HeteroFL(PartialTraining):
    """Decentralized HeteroFL (Eq. 8): every sub-model takes the first ``n`` indices of each scaled dimension."""

    def index_rule(
        self, round_: int, federation: Federation, global_views: dict[str, Shape], views: Sequence[dict[str, Shape]]
    ) -> IndexRule:
        from lit_fl.steps.slicing import heterofl_indices

        return heterofl_indices


@register_algorithm
class FedRolex(PartialTraining):
    """Decentralized FedRolex (Eq. 9): the window of each scaled dimension starts at ``(round - 1) mod J`` and
    wraps around ``J`` (round 1 equals HeteroFL, as the paper describes); ``J`` is the size in this round's
    ``W_g``. The round number plays the role of the ``t`` each aggregator hands on to the next."""

    def index_rule(
        self, round_: int, federation: Federation, global_views: dict[str, Shape], views: Sequence[dict[str, Shape]]
    ) -> IndexRule:
        from lit_fl.steps.slicing import fedrolex_rule

        return fedrolex_rule(round_ - 1)


@register_algorithm
class FederatedDropout(PartialTraining):
    """Decentralized Federated Dropout (Eq. 7): every participant gets its OWN random index set (DFML A.3.3:
    the sub-models are "randomly selected" per model). Per participant, in participant order, one random
    permutation per global dimension size ``J`` is drawn; a sub-model with ``n`` of ``J`` takes its first ``n``
    entries, sorted, so a layer's outputs and the next layer's inputs agree within one model.

    The draws come from ``federation.rng.algorithm``, a stream of their own: aggregator and sender draws
    (``rng.selection``) stay identical to HeteroFL's and FedRolex's with the same seed, so runs of the three
    methods stay paired. The stream is checkpointed, so a resumed run repeats the draws.
    """

    def index_rule(
        self, round_: int, federation: Federation, global_views: dict[str, Shape], views: Sequence[dict[str, Shape]]
    ) -> IndexRule:
        """The first participant's rule (see :meth:`index_rules`: every participant draws its own)."""
        return self.index_rules(round_, federation, global_views, views[:1])[0]

    def index_rules(
        self, round_: int, federation: Federation, global_views: dict[str, Shape], views: Sequence[dict[str, Shape]]
    ) -> list[IndexRule]:
        from lit_fl.steps.slicing import DropoutIndices

        rules: list[IndexRule] = []
        for view in views:
            scaled = {big for key, local in view.items() for n, big in zip(local, global_views[key]) if n < big}
            rules.append(DropoutIndices(federation.rng.algorithm, scaled))
        return rules
