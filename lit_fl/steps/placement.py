"""``Placement``: which process (rank) computes which client, and the few collectives that keep ranks equal.

lit-fl runs SPMD (like pfl-research's simulator): every rank runs the same round loop and draws the same
aggregators, senders, faults and batch orders from the shared seeded streams. Every rank holds the whole
federation (the dataset and every client's models, replicated); what is split is the *work*:

* a client phase (local training, a Def-KT fusion) runs on the rank it is assigned to (its *owner* for that
  phase, balanced over the phase's clients by cost); the other ranks only advance the random streams the
  phase draws from, and afterwards the owner broadcasts the client's new weights and the phase's value
  (:func:`lit_fl.steps.phase.run_phase`);
* DFML's mutual learning runs every participant's forward/backward on its owner; per batch the logits are
  summed over ranks (each rank contributes its own participants' logits, zeros elsewhere, so the sum is exact)
  and each student's loss uses the others' logits as detached teachers: the one-process math, bit for bit;
* a step nobody owns (a server's distillation) runs on every rank and rank 0's result is broadcast, so
  replicas cannot drift even where a GPU kernel is not deterministic;
* evaluation splits its passes over ranks and sums the correct counts.

Averaging needs no collective: every rank holds every model and computes the same average. Ownership is
balanced by cost (train samples x parameters, largest first, to the least-loaded rank) and never changes
the numbers: a client's results do not depend on which rank, or how many ranks, compute it. The price of
replicas is memory: every rank holds the whole federation (a 100-client ``cnn_8_16`` federation is a few MB
of weights next to ~0.5 GB of libraries per process).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor, nn


class Placement:
    """This process is ``rank`` of ``world_size``; ``costs[n]`` is client ``n``'s work (for balancing).

    Every rank holds every model, so any rank can compute any client: each phase balances *its* clients over the
    ranks (:meth:`assign`), which keeps a round of 6 participants as even as the costs allow whatever the
    federation's size."""

    def __init__(self, costs: Sequence[float] = (), rank: int = 0, world_size: int = 1) -> None:
        if not 0 <= rank < world_size:
            raise ValueError(f"rank {rank} is outside 0..{world_size - 1}")
        self.costs, self.rank, self.world_size = list(costs), rank, world_size

    @property
    def distributed(self) -> bool:
        return self.world_size > 1

    def assign(self, clients: Sequence[int]) -> list[int]:
        """The rank that computes each of ``clients`` in one phase: longest-processing-time first (by decreasing
        cost, ties by position), each to the rank with the least cost so far (ties: lower rank). Deterministic,
        so every rank computes the same assignment."""
        return self.spread([self.cost(n) for n in clients])

    def assign_kinds(self, clients: Sequence[int], kinds: Sequence[object]) -> list[int]:
        """The rank of each of ``clients`` in a fused phase, where the clients of one ``kind`` (an architecture) run
        as one fused module: a kind's launches cost the same for 1 or 50 clients, so whole kinds are placed (the
        most costly first, each to the rank with the fewest kinds so far, ties: the least cost, then the lower
        rank), and a rank launches the kernels of its own kinds only. Fewer kinds than ranks: :meth:`assign`."""
        distinct = list(dict.fromkeys(kinds))
        if not self.distributed or len(distinct) < self.world_size:
            return self.assign(clients)
        cost = {k: 0.0 for k in distinct}
        for client, kind in zip(clients, kinds):
            cost[kind] += self.cost(client)
        count, load = [0] * self.world_size, [0.0] * self.world_size
        rank_of: dict[object, int] = {}
        for kind in sorted(distinct, key=lambda k: (-cost[k], distinct.index(k))):
            r = min(range(self.world_size), key=lambda k: (count[k], load[k], k))
            rank_of[kind] = r
            count[r] += 1
            load[r] += cost[kind]
        return [rank_of[kind] for kind in kinds]

    def spread(self, costs: Sequence[float]) -> list[int]:
        """A rank for each of a phase's jobs with these ``costs`` (the rule of :meth:`assign`)."""
        if not self.distributed:
            return [0] * len(costs)
        load = [0.0] * self.world_size
        ranks = [0] * len(costs)
        for i in sorted(range(len(costs)), key=lambda i: (-costs[i], i)):
            r = min(range(self.world_size), key=lambda k: (load[k], k))
            ranks[i] = r
            load[r] += costs[i]
        return ranks

    def cost(self, client: int) -> float:
        return self.costs[client] if client < len(self.costs) else 1.0

    # -- collectives (no-ops in one process) ------------------------------------------------------------

    def all_reduce_sum(self, tensor: Tensor) -> Tensor:
        """Sum ``tensor`` over ranks in place (exact where every entry comes from one rank, zeros elsewhere)."""
        if self.distributed:
            torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
        return tensor

    def any(self, flag: bool, device: torch.device) -> bool:
        """Whether ``flag`` holds on any rank (e.g. a stop request that reached one process)."""
        if not self.distributed:
            return flag
        value = torch.tensor([1.0 if flag else 0.0], device=device)
        torch.distributed.all_reduce(value, op=torch.distributed.ReduceOp.MAX)
        return bool(value.item() > 0)

    def agree(self, values: Sequence[int], device: torch.device) -> bool:
        """Whether every rank passed the same ``values`` (a cheap check that replicas have not diverged)."""
        if not self.distributed:
            return True
        both = torch.tensor([*values, *(-v for v in values)], dtype=torch.int64, device=device)
        torch.distributed.all_reduce(both, op=torch.distributed.ReduceOp.MAX)
        return [int(v) for v in both[: len(values)]] == [-int(v) for v in both[len(values) :]] == list(values)

    def broadcast_module(self, module: nn.Module, src: int) -> None:
        """Every parameter and buffer of ``module`` takes rank ``src``'s values (one flat tensor per dtype)."""
        if not self.distributed:
            return
        by_dtype: dict[tuple[torch.dtype, torch.device], list[Tensor]] = {}
        for tensor in module.state_dict(keep_vars=True).values():
            by_dtype.setdefault((tensor.dtype, tensor.device), []).append(tensor)
        for tensors in by_dtype.values():
            flat = torch.cat([t.detach().reshape(-1) for t in tensors])
            torch.distributed.broadcast(flat, src=src)
            if self.rank == src:
                continue
            with torch.no_grad():
                offset = 0
                for t in tensors:
                    t.copy_(flat[offset : offset + t.numel()].view(t.shape))
                    offset += t.numel()

    def share_values(self, values: Sequence[float], sources: Sequence[int], device: torch.device) -> list[float]:
        """``values[i]`` as computed on rank ``sources[i]`` (float64, exact), on every rank."""
        if not self.distributed:
            return list(values)
        mine = [v if s == self.rank else 0.0 for v, s in zip(values, sources)]
        tensor = torch.tensor(mine, dtype=torch.float64, device=device)
        torch.distributed.all_reduce(tensor, op=torch.distributed.ReduceOp.SUM)
        return [float(v) for v in tensor.cpu()]

    def share_tensors(self, values: Sequence[Value | None], sources: Sequence[int],
                      device: torch.device) -> list[Value]:
        """``values[i]`` (a tensor or a tuple of tensors, on ``device``) as computed on rank ``sources[i]``, on every
        rank (exact): their shapes and dtypes travel first (one object all-gather), then one broadcast per source rank
        and dtype."""
        if not self.distributed:
            return list(values)  # type: ignore[arg-type]
        import torch.distributed as dist

        mine = {i: _layout(v) for i, (v, s) in enumerate(zip(values, sources)) if s == self.rank and v is not None}
        gathered: list[dict[int, tuple[bool, list[tuple[tuple[int, ...], torch.dtype]]]] | None] = \
            [None] * self.world_size
        dist.all_gather_object(gathered, mine)
        layouts = {i: layout for part in gathered for i, layout in (part or {}).items()}
        leaves = {i: list(_leaves(values[i])) if sources[i] == self.rank else
                  [torch.empty(shape, dtype=dtype, device=device) for shape, dtype in layouts[i][1]]
                  for i in sorted(layouts)}
        for src in sorted(set(sources)):
            by_dtype: dict[torch.dtype, list[Tensor]] = {}
            for i in sorted(layouts):
                if sources[i] == src:
                    for t in leaves[i]:
                        by_dtype.setdefault(t.dtype, []).append(t)
            for dtype in sorted(by_dtype, key=str):
                _broadcast_flat(by_dtype[dtype], src, self.rank == src)
        return [(tuple(leaves[i]) if layouts[i][0] else leaves[i][0]) if i in layouts else None  # type: ignore[misc]
                for i in range(len(values))]


#: what a value work returns (:func:`lit_fl.steps.predict.run_value_phase`): a tensor or a tuple of tensors
Value = Tensor | tuple[Tensor, ...]


def _leaves(value: Value) -> tuple[Tensor, ...]:
    return value if isinstance(value, tuple) else (value,)


def _layout(value: Value) -> tuple[bool, list[tuple[tuple[int, ...], torch.dtype]]]:
    """Whether ``value`` is a tuple, and its tensors' shapes and dtypes."""
    return isinstance(value, tuple), [(tuple(t.shape), t.dtype) for t in _leaves(value)]


def _broadcast_flat(tensors: list[Tensor], src: int, is_src: bool) -> None:
    """Broadcast ``tensors`` (one dtype, one device) from ``src`` as one flat tensor, written into them elsewhere."""
    flat = torch.cat([t.detach().reshape(-1) for t in tensors]) if is_src else \
        torch.empty(sum(t.numel() for t in tensors), dtype=tensors[0].dtype, device=tensors[0].device)
    torch.distributed.broadcast(flat, src=src)
    if is_src:
        return
    offset = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(flat[offset : offset + t.numel()].view(t.shape))
            offset += t.numel()
