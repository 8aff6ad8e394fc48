"""Placement of clients on processes, and what a process that does not compute a phase must still do."""

from __future__ import annotations

import pytest
import torch

from lit_fl.data.batches import ClientBatches
from lit_fl.steps.placement import Placement


def test_a_phase_is_balanced_longest_first_to_the_least_loaded_rank() -> None:
    placement = Placement([5.0, 1.0, 4.0, 3.0, 3.0, 2.0, 100.0], rank=1, world_size=2)
    # by cost: 0 (5) -> r0 [5, 0]; 2 (4) -> r1 [5, 4]; 3 (3) -> r1 [5, 7]; 4 (3) -> r0 [8, 7];
    # 5 (2) -> r1 [8, 9]; 1 (1) -> r0 [9, 9]
    ranks = placement.assign([0, 1, 2, 3, 4, 5])
    assert ranks == [0, 0, 1, 1, 0, 1]
    assert placement.assign([6, 2, 3]) == [0, 1, 1]  # only the phase's own clients count
    assert Placement([1.0] * 3, rank=0, world_size=3).assign([0, 1, 2]) == [0, 1, 2]


def test_one_process_computes_everything_and_collectives_are_identities() -> None:
    placement = Placement([3.0, 1.0, 2.0])
    assert not placement.distributed
    assert placement.assign([0, 1, 2]) == [0, 0, 0]
    t = torch.tensor([1.0, 2.0])
    assert placement.all_reduce_sum(t) is t and t.tolist() == [1.0, 2.0]
    assert placement.share_values([0.5, float("inf")], [0, 0], torch.device("cpu")) == [0.5, float("inf")]
    assert placement.any(True, torch.device("cpu")) and not placement.any(False, torch.device("cpu"))
    assert placement.agree([1, 2], torch.device("cpu"))


@pytest.mark.parametrize("augment", ["none", "crop_flip", "crop_flip_per_batch"])
def test_skipping_batches_advances_the_stream_exactly_as_iterating(augment: str) -> None:
    x, y = torch.randn(50, 1, 8, 8), torch.arange(50) % 3
    iterated, skipped = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    list(ClientBatches(x, y, torch.arange(37), 8, iterated, epochs=2, augment=augment))
    ClientBatches(x, y, torch.arange(37), 8, skipped, epochs=2, augment=augment).skip()
    assert torch.equal(iterated.get_state(), skipped.get_state())


def test_fused_placement_keeps_each_architecture_on_one_rank_and_balances_their_number() -> None:
    """Fused, a rank launches the kernels of every architecture it holds: whole kinds go to ranks, the most costly
    first, to the rank with the fewest kinds (then the least cost)."""
    placement = Placement([10.0, 1.0, 1.0, 5.0, 5.0, 2.0, 2.0, 1.0], rank=0, world_size=2)
    kinds = ["a", "b", "b", "c", "c", "d", "d", "b"]
    ranks = placement.assign_kinds(list(range(8)), kinds)
    by_kind = {k: {r for r, kk in zip(ranks, kinds) if kk == k} for k in kinds}
    assert all(len(r) == 1 for r in by_kind.values())  # no kind split over ranks
    assert sorted(ranks.count(r) > 0 for r in (0, 1)) == [True, True]
    assert by_kind["a"] != by_kind["c"]  # the two most costly kinds on different ranks
    assert [len({k for k, r in by_kind.items() if r == {rank}}) for rank in (0, 1)] == [2, 2]
    assert placement.assign_kinds([0, 1], ["a", "a"]) == placement.assign([0, 1])  # fewer kinds than ranks
