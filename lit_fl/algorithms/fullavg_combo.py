"""The Def-KT paper's averaging baselines (papers/def-kt.txt): FullAvg (Algorithm 2, Eq. 9) and Combo
(Algorithm 3, segmented gossip of Hu et al. 2019 with two segments). Same round as Def-KT
(:class:`~lit_fl.algorithms.defkt.PairwiseExchange`), fusion by sample-weighted averaging."""

from __future__ import annotations

from functools import reduce
from typing import TYPE_CHECKING

from lit_fl import steps
from lit_fl.algorithms.defkt import PairwiseExchange
from lit_fl.algorithms.registry import register_algorithm

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from lit_fl.algorithms.peer import PeerRound
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.federation.state import Client, Federation
    from lit_fl.steps.phase import ClientWork


def pair_weights(sender: Client, receiver: Client) -> tuple[float, float]:
    """``(N_sender, N_receiver)`` of Eq. 9 (equal weights in the degenerate case of no samples at all)."""
    if sender.num_train + receiver.num_train == 0:
        return 1.0, 1.0
    return float(sender.num_train), float(receiver.num_train)


@register_algorithm
class FullAvg(PairwiseExchange):
    """FullAvg (Algorithm 2): the receiver replaces its model by the sample-weighted average of the received
    model and its own, ``w_r <- N_s / (N_s + N_r) w~_s + N_r / (N_s + N_r) w_r`` (Eq. 9); senders keep their
    locally trained models; nothing is sent back. Integer buffers (counters) stay the receiver's."""

    #: Def-KT sec. IV-C (Figs. 4-6 a-c): averaged global accuracy of all clients' models (local_acc: Figs. d)
    reports = "global_acc"

    def fuse(
        self, sender: Client, receiver: Client, federation: Federation, ledger: CommunicationLedger
    ) -> ClientWork | None:
        w_s, w_r = pair_weights(sender, receiver)
        average = steps.weighted_average([receiver.model.state_dict(), sender.model.state_dict()], [w_r, w_s])
        receiver.set_weights(average)
        return None


# -- Combo: two segments of the flattened model ----------------------------------------------------------


def segment_keys(state: dict[str, Tensor]) -> list[str]:
    """The entries that make up the flattened model: every floating-point entry of the state dict
    (parameters and float buffers such as BatchNorm statistics), in state-dict order. Integer buffers
    (``num_batches_tracked``) are counters, not weights: they are neither split nor sent."""
    import torch

    return [k for k, v in state.items() if torch.is_floating_point(v)]


def flatten(state: dict[str, Tensor], keys: list[str]) -> Tensor:
    """The flattened model (float64, exact for float32/16 entries)."""
    import torch

    return torch.cat([state[k].detach().reshape(-1).to(torch.float64) for k in keys])


def unflatten(vector: Tensor, like: dict[str, Tensor], keys: list[str]) -> dict[str, Tensor]:
    """A state dict shaped like ``like`` with the floating entries taken from ``vector``."""
    out = {k: v if k in keys else v.clone() for k, v in like.items()}
    offset = 0
    for k in keys:
        n = like[k].numel()
        out[k] = vector[offset : offset + n].view(like[k].shape).to(like[k].dtype)
        offset += n
    return out


def split_point(length: int) -> int:
    """Segment 1 = ``[0, length // 2)``, segment 2 = ``[length // 2, length)`` (the second half takes the
    odd element)."""
    return length // 2


def wire_dtype(state: dict[str, Tensor], keys: list[str]) -> torch.dtype:
    import torch

    return reduce(torch.promote_types, [state[k].dtype for k in keys])


@register_algorithm
class Combo(PairwiseExchange):
    """Combo (Algorithm 3) with two segments: the first and second half of the flattened model
    (:func:`segment_keys`, :func:`split_point`).

    * The sender ``s`` trains locally, then sends segment 2 of ``w~_s`` to its receiver ``r``.
    * ``r`` sends segment 1 of its own model ``w_r`` to ``s`` (recorded as a return, with its real size;
      ``faults.return_drop_prob`` can lose it, then ``s`` keeps its segment 1).
    * ``r``: ``w_r,2 <- N_s / (N_s + N_r) w~_s,2 + N_r / (N_s + N_r) w_r,2``; its segment 1 unchanged.
    * ``s``: ``w~_s,1 <- N_s / (N_s + N_r) w~_s,1 + N_r / (N_s + N_r) w_r,1``; its segment 2 unchanged.

    Per pair the traffic is one full model, as for Def-KT and FullAvg (sec. IV.B). A failed sender sends
    nothing and its receiver sends nothing either.
    """

    #: Def-KT sec. IV-C (Figs. 4-6 a-c): averaged global accuracy of all clients' models (local_acc: Figs. d)
    reports = "global_acc"

    def outgoing(self, source: Client, receiver: Client, plan: PeerRound) -> nn.Module:
        from lit_fl.federation.ledger import Payload

        state = source.model.state_dict()
        keys = segment_keys(state)
        vector = flatten(state, keys)
        return Payload([vector[split_point(len(vector)) :].to(wire_dtype(state, keys))])  # one flat segment

    def fuse(
        self, sender: Client, receiver: Client, federation: Federation, ledger: CommunicationLedger
    ) -> ClientWork | None:
        from lit_fl.federation.ledger import Payload

        w_s, w_r = pair_weights(sender, receiver)
        a_s, a_r = w_s / (w_s + w_r), w_r / (w_s + w_r)
        s_state, r_state = sender.model.state_dict(), receiver.model.state_dict()
        keys = segment_keys(r_state)
        v_s, v_r = flatten(s_state, keys), flatten(r_state, keys)
        half = split_point(len(v_r))

        new_r = v_r.clone()
        new_r[half:] = a_s * v_s[half:] + a_r * v_r[half:]
        receiver.set_weights(unflatten(new_r, r_state, keys))

        before = self.snapshot_for_returns(federation, [sender])
        new_s = v_s.clone()
        new_s[:half] = a_s * v_s[:half] + a_r * v_r[:half]
        sender.set_weights(unflatten(new_s, s_state, keys))
        segment_1 = Payload([v_r[:half].to(wire_dtype(r_state, keys))])
        self.give_back(federation, ledger, receiver, [sender], before, models=[segment_1])
        return None
