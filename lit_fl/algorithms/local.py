"""``Local``: the no-communication baseline of UA-PDFL (papers/ua-pdfl.txt sec. 5.1.3).

Every client trains on its own train split every round and nothing is sent: the neighbour round
(:class:`~lit_fl.algorithms.neighbours.NeighbourAlgorithm`) in which no client draws a neighbour. The optimiser
follows the UA-PDFL settings: SGD with an initial lr of 0.05 decayed by 0.95 per round, momentum 0.5, batch 50, one
local epoch of cross-entropy. The paper names no weight decay, so the default is 0.
"""

from __future__ import annotations

from lit_fl.algorithms.neighbours import NeighbourAlgorithm
from lit_fl.algorithms.registry import register_algorithm
from lit_fl.algorithms.requirements import ALONE, NOTHING_SENT
from lit_fl.algorithms.settings import UAPDFL_CLIENTS


@register_algorithm
class Local(NeighbourAlgorithm):
    """Each client trains alone; no model ever leaves a client (``comm_mb`` stays 0).

    Args:
        lr_decay: per-round decay of the learning rate: round ``r`` (counted from 1) trains with
            ``lr * lr_decay ** (r - 1)``, so round 1 trains at the paper's "initial learning rate 0.05"
            (UA-PDFL sec. 4.1: initial lr 0.05, decay 0.95; SPEC: ``0.05 * 0.95^(round - 1)``); 1 keeps it
            constant.
        local_epochs: E, epochs over the client's train split per round (UA-PDFL: 1).
        loss: ``ce`` (UA-PDFL) or ``wsm``.
        lr: initial learning rate (UA-PDFL: 0.05).
        momentum: SGD momentum (UA-PDFL: 0.5).
        weight_decay: SGD weight decay (UA-PDFL names none: 0).
        batch_size: UA-PDFL: 50.
    """

    #: UA-PDFL secs. 5.2-5.4 (Tables 1-5): final test accuracy averaged over clients, each on its own data
    reports = "local_acc"
    sample_level_dp = True  # its one client phase is LocalTraining: DP-SGD can take it

    sequence_tasks = True  # learns from logits alone: runs on token sequences (lit_fl.data.tokens)

    requires = (ALONE, NOTHING_SENT)
    client_defaults = UAPDFL_CLIENTS  # UA-PDFL sec. 4.1 and 5.1.4
