"""Partial work under a deadline (``system.partial_work``): a client that cannot finish its local work in time
trains on as many of its batches as it can and sends what it has, FedProx's variable amount of local work (Li et al.
2020, "Federated Optimization in Heterogeneous Networks", sec. 3: a gamma-inexact local solution per client).

When the server broadcasts, each client's work is cut to the longest prefix of its batches for which

    download (already on the clock) + those batches at its rate + its upload  <=  deadline_s

on the same clock arithmetic that later decides whether the update arrived in time (:func:`lit_fl.system.clock.
round_time`), so every cut update arrives by the deadline. The client still draws its whole pass (its data order is
the one it draws without a deadline), and a cut work fuses like any uneven client's. A client with no batch in time
sends nothing (a late update).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from lit_fl.data.batches import ClientBatches, PlannedBatch
from lit_fl.steps.phase import ClientWork, sample_mparams, trained_params
from lit_fl.system.clock import Departure, Event, Transfer, Work, round_time
from lit_fl.system.profiles import ClientSystem


def within_deadline(work: ClientWork | None, events: Sequence[Event], systems: Sequence[ClientSystem], server: int,
                    upload_mb: float, deadline_s: float) -> ClientWork | None:
    """``work`` with its batches cut to what its client can do and upload (``upload_mb``) by ``deadline_s``, given
    the round's ``events`` so far (its download among them); unchanged when it is None or not a pass over the
    client's own batches."""
    if not isinstance(work, ClientWork) or not isinstance(work.batches, ClientBatches):
        return work
    own = [e for e in events if work.client in _ends(e)]  # a client's clock depends on its own events alone
    budget = _fits(work.client, own, systems, server, upload_mb, deadline_s, trained_params(work.step))
    return ClientWork(work.client, work.step, work.batches.within(budget), work.owners)


def _fits(client: int, own: list[Event], systems: Sequence[ClientSystem], server: int, upload_mb: float,
          deadline_s: float, params: int) -> Callable[[list[PlannedBatch]], bool]:
    def fits(prefix: list[PlannedBatch]) -> bool:
        work = Work(client, sample_mparams(sum(len(p.indices) for p in prefix), params))
        ready = round_time([*own, work, Transfer(client, server, upload_mb)], systems, server).finished
        return ready[client] <= deadline_s

    return fits


def _ends(event: Event) -> tuple[int, ...]:
    return (event.client,) if isinstance(event, Work | Departure) else (event.source, event.target)


def cut(work: object) -> tuple[bool, bool]:
    """After the phase: whether ``work`` (any work of a phase, or None) was cut (some of its batches left undone)
    and whether nothing was left."""
    batches = getattr(work, "batches", None)
    if not isinstance(batches, ClientBatches) or batches.budget is None:
        return False, False
    return batches.kept < batches.drawn, batches.kept == 0 < batches.drawn
