"""Partial training (DFML A.3.3, Algorithm 3, Eq. 6-9): index sets, sub-model slicing, Eq. 6 and full rounds."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from federations import same_weights, snapshot, tiny_federation
from torch import nn

from lit_fl.algorithms import FederatedDropout, FedRolex, HeteroFL
from lit_fl.federation.ledger import CommunicationLedger, model_megabytes
from lit_fl.steps import StepRunner
from lit_fl.steps.slicing import (
    DropoutIndices,
    TensorSlice,
    aggregate,
    extract,
    fedrolex_rule,
    heterofl_indices,
    slice_plan,
    view_shapes,
)

BIG, SMALL = "cnn_8_16", "cnn_4_8"


def models_by_arch(fed):
    return {c.arch: c.model for c in reversed(fed.clients)}


def shapes(state):
    return {k: v.shape for k, v in state.items()}


def test_heterofl_one_participant_gets_its_weights_back() -> None:
    fed = tiny_federation(num_clients=2, pool=(BIG, SMALL))
    models = models_by_arch(fed)
    glob, small = models[BIG].state_dict(), models[SMALL].state_dict()
    plan = slice_plan(view_shapes(models[BIG]), view_shapes(models[SMALL]), heterofl_indices)
    new = aggregate(glob, [small], None, [plan])
    back = extract(new, shapes(small), plan)
    assert same_weights(small, back)
    # outside the participant's slice W_g is unchanged; the largest model alone is a fixed point
    torch.testing.assert_close(new["features.0.weight"][4:], glob["features.0.weight"][4:])
    whole = slice_plan(view_shapes(models[BIG]), view_shapes(models[BIG]), heterofl_indices)
    assert all(p.whole for p in whole.values())
    assert same_weights(glob, extract(aggregate(glob, [glob], None, [whole]), shapes(glob), whole))


def test_eq6_overlap_is_mean_single_cover_keeps_value_uncovered_keeps_global() -> None:
    glob = {"w": torch.full((4, 3), 9.0), "n": torch.tensor(7)}
    p1 = {"w": torch.full((3, 3), 1.0), "n": torch.tensor(1)}
    p2 = {"w": torch.full((2, 3), 5.0), "n": torch.tensor(2)}
    views = {"w": (4, 3), "n": ()}
    plans = [
        slice_plan(views, {"w": (3, 3), "n": ()}, heterofl_indices),
        slice_plan(views, {"w": (2, 3), "n": ()}, heterofl_indices),
    ]
    out = aggregate(glob, [p1, p2], None, plans)
    torch.testing.assert_close(out["w"], torch.tensor([[3.0] * 3, [3.0] * 3, [1.0] * 3, [9.0] * 3]))
    assert out["n"].item() == 7  # non-floating buffers stay W_g's
    weighted = aggregate(glob, [p1, p2], [1.0, 3.0], plans)
    torch.testing.assert_close(weighted["w"][:2], torch.full((2, 3), (1.0 + 3 * 5.0) / 4))
    torch.testing.assert_close(weighted["w"][2:], torch.tensor([[1.0] * 3, [9.0] * 3]))


def test_eq6_with_scattered_indices_on_two_dims() -> None:
    glob = {"w": torch.zeros(4, 5)}
    p = {"w": torch.arange(6.0).reshape(2, 3)}
    plan = {"w": TensorSlice((4, 5), (torch.tensor([1, 3]), torch.tensor([4, 0, 2])))}
    out = aggregate(glob, [p], None, [plan])["w"]
    expected = torch.zeros(4, 5)
    expected[1, 4], expected[1, 0], expected[1, 2] = 0.0, 1.0, 2.0
    expected[3, 4], expected[3, 0], expected[3, 2] = 3.0, 4.0, 5.0
    torch.testing.assert_close(out, expected)
    assert torch.equal(extract({"w": out}, {"w": (2, 3)}, plan)["w"], p["w"])


def test_fedrolex_window_rolls_with_the_round_and_wraps() -> None:
    assert fedrolex_rule(0)(5, 3).tolist() == [0, 1, 2]
    assert fedrolex_rule(1)(5, 3).tolist() == [1, 2, 3]
    assert fedrolex_rule(3)(5, 3).tolist() == [3, 4, 0]
    assert fedrolex_rule(4)(5, 3).tolist() == [4, 0, 1]
    assert fedrolex_rule(5)(5, 3).tolist() == [0, 1, 2]  # t mod J
    fed = tiny_federation(num_clients=2, pool=(BIG, SMALL))
    algo = FedRolex()
    rules = [algo.index_rule(t, fed, {}, []) for t in (1, 2, 8, 9)]
    assert [r(8, 4).tolist() for r in rules] == [[0, 1, 2, 3], [1, 2, 3, 4], [7, 0, 1, 2], [0, 1, 2, 3]]
    assert torch.equal(rules[0](16, 8), heterofl_indices(16, 8))  # round 1 = HeteroFL


def test_federated_dropout_indices_random_sorted_reproducible() -> None:
    first = DropoutIndices(np.random.default_rng(3), [16, 8])
    again = DropoutIndices(np.random.default_rng(3), [8, 16])
    idx = first(16, 6)
    assert idx.shape == (6,) and torch.equal(idx, idx.sort().values) and len(set(idx.tolist())) == 6
    assert 0 <= int(idx.min()) and int(idx.max()) < 16
    assert torch.equal(idx, again(16, 6)) and torch.equal(first(8, 3), again(8, 3))
    assert set(first(16, 4).tolist()) <= set(idx.tolist())  # one permutation per J: nested sets
    rng = np.random.default_rng(3)
    draws = [DropoutIndices(rng, [16])(16, 6).tolist() for _ in range(4)]
    assert len({tuple(d) for d in draws}) > 1  # a new draw every round
    assert any(d != list(range(6)) for d in draws)


def test_federated_dropout_plan_is_consistent_between_layers() -> None:
    fed = tiny_federation(num_clients=2, pool=(BIG, SMALL))
    models = models_by_arch(fed)
    glob, local = view_shapes(models[BIG]), view_shapes(models[SMALL])
    plan = slice_plan(glob, local, FederatedDropout().index_rule(1, fed, glob, [glob, local]))
    out1 = plan["features.0.weight"].indices[0]
    assert len(out1) == 4 and plan["features.0.weight"].indices[1:] == (None, None, None)
    for key in ("features.0.bias", "features.3.weight", "features.3.bias"):
        assert torch.equal(plan[key].indices[0], out1)
    assert torch.equal(plan["features.4.weight"].indices[1], out1)  # inputs follow the previous outputs
    out2 = plan["features.4.weight"].indices[0]
    assert len(out2) == 8
    assert torch.equal(plan["classifier.weight"].indices[1], out2)  # classifier follows the last layer
    assert plan["classifier.weight"].indices[0] is None and plan["classifier.weight"].indices[2] is None
    assert plan["classifier.bias"].whole


def test_cnn_classifier_takes_whole_channel_blocks_of_the_flattened_map() -> None:
    fed = tiny_federation(num_clients=2, pool=(BIG, SMALL))
    models = models_by_arch(fed)
    assert models[BIG].feature_map == (16, 2, 2) and models[SMALL].feature_map == (8, 2, 2)
    assert view_shapes(models[BIG])["classifier.weight"] == (4, 16, 4)
    glob = models[BIG].state_dict()
    rule = DropoutIndices(np.random.default_rng(0))
    plan = slice_plan(view_shapes(models[BIG]), view_shapes(models[SMALL]), rule)
    channels = plan["classifier.weight"].indices[1].tolist()
    weight = extract(glob, shapes(models[SMALL].state_dict()), plan)["classifier.weight"]
    manual = torch.cat([glob["classifier.weight"][:, 4 * c : 4 * (c + 1)] for c in channels], dim=1)
    assert weight.shape == (4, 32)
    torch.testing.assert_close(weight, manual)
    models[SMALL].load_state_dict(extract(glob, shapes(models[SMALL].state_dict()), plan))  # loads as a model


class FusedQKV(nn.Module):
    """A ViT-like fused projection declaring its [3, inner, dim] view through the model hook."""

    def __init__(self, inner: int, dim: int = 2) -> None:
        super().__init__()
        self.to_qkv = nn.Linear(dim, 3 * inner, bias=False)
        self.inner = inner

    def partial_view(self, key: str, shape: tuple[int, ...]) -> tuple[int, ...] | None:
        return (3, self.inner, shape[1]) if key == "to_qkv.weight" else None


def test_view_hook_on_the_model_slices_fused_qkv_per_projection() -> None:
    big, small = FusedQKV(4), FusedQKV(2)
    plan = slice_plan(view_shapes(big), view_shapes(small), heterofl_indices)
    weight = big.state_dict()["to_qkv.weight"]
    sub = extract(big.state_dict(), shapes(small.state_dict()), plan)["to_qkv.weight"]
    torch.testing.assert_close(sub, weight[[0, 1, 4, 5, 8, 9]])


def test_batchnorm_counter_kept_and_running_stats_sliced() -> None:
    big, small = nn.BatchNorm2d(4), nn.BatchNorm2d(2)
    big.num_batches_tracked.fill_(5)
    small.running_mean.fill_(2.0)
    plan = slice_plan(view_shapes(big), view_shapes(small), fedrolex_rule(3))
    out = aggregate(big.state_dict(), [small.state_dict()], None, [plan])
    assert out["num_batches_tracked"].item() == 5
    torch.testing.assert_close(out["running_mean"], torch.tensor([2.0, 0.0, 0.0, 2.0]))


def run_one_round(algo, fed, round_=1):
    algo.setup(fed)
    ledger = CommunicationLedger.of(fed)
    result = algo.run_round(round_, fed, StepRunner(accelerator="cpu"), ledger)
    return result, ledger


@pytest.mark.parametrize("algo_cls", [HeteroFL, FedRolex])
def test_round_moves_participants_to_slices_of_one_new_global(algo_cls) -> None:
    fed = tiny_federation(num_clients=6, pool=(BIG, SMALL))
    before = snapshot(fed)
    algo = algo_cls(sender_fraction=0.5, lr=0.05)
    result, ledger = run_one_round(algo, fed, round_=3)
    participants = [result.aggregator, *result.senders]
    assert len(participants) == 4
    for client, old in zip(fed.clients, before):
        assert same_weights(old, client.model.state_dict()) == (client.id not in participants)
    bigs = [fed.clients[n] for n in participants if fed.clients[n].arch == BIG]
    smalls = [fed.clients[n] for n in participants if fed.clients[n].arch == SMALL]
    assert bigs and smalls
    glob = bigs[0].model.state_dict()
    assert all(same_weights(glob, c.model.state_dict()) for c in bigs)
    rule = algo.index_rule(3, fed, {}, [])
    plan = slice_plan(view_shapes(bigs[0].model), view_shapes(smalls[0].model), rule)
    expected = extract(glob, shapes(smalls[0].model.state_dict()), plan)
    assert all(same_weights(expected, c.model.state_dict()) for c in smalls)  # overlapping entries are equal
    sizes = [model_megabytes(fed.clients[n].model) for n in result.senders]
    assert ledger.round_sent_mb == pytest.approx(sum(sizes)) and ledger.round_returned_mb == pytest.approx(sum(sizes))
    assert result.extra == {} and ledger.round_faults.as_metrics() == {"dropped_senders": 0.0, "lost_returns": 0.0}


def test_federated_dropout_round_gives_everyone_a_slice_of_the_same_global() -> None:
    fed = tiny_federation(num_clients=4, pool=(BIG, SMALL))
    algo = FederatedDropout(sender_fraction=1.0, lr=0.05)
    algo.setup(fed)
    participants = list(fed.clients)
    glob, plans = _dropout_round(algo, fed, participants)
    for client, plan in zip(participants, plans):
        assert same_weights(extract(glob, shapes(client.model.state_dict()), plan), client.model.state_dict())


def _dropout_round(algo: FederatedDropout, fed, participants: list) -> tuple[dict, list]:  # noqa: ANN001
    """Round 1's new global weights and, replayed from the same random state, every participant's slice plan."""
    rng_state = fed.rng.algorithm.bit_generator.state
    glob = algo.aggregate_and_split(1, fed, participants)
    fed.rng.algorithm.bit_generator.state = rng_state  # replay the round's draws
    global_views = view_shapes(next(c for c in participants if c.arch == BIG).model)
    views = [view_shapes(c.model) for c in participants]
    rules = algo.index_rules(1, fed, global_views, views)
    return glob, [slice_plan(global_views, v, r) for v, r in zip(views, rules)]


def test_federated_dropout_draws_indices_per_participant_and_averages_over_covering_ones() -> None:
    """DFML A.3.3: every sub-model has its own random indices; Eq. 6 averages each global entry over the
    participants whose index sets cover it."""
    fed = tiny_federation(num_clients=6, pool=(BIG, SMALL))
    algo = FederatedDropout(sender_fraction=1.0)
    algo.setup(fed)
    participants = list(fed.clients)
    with torch.no_grad():
        for value, client in enumerate(participants, start=1):
            for param in client.model.state_dict().values():
                param.fill_(float(value))
    glob, plans = _dropout_round(algo, fed, participants)
    small = [i for i, c in enumerate(participants) if c.arch == SMALL]
    assert len(small) == 3
    key = next(k for k, sl in plans[small[0]].items() if not sl.whole)
    index_sets = {tuple(plans[i][key].indices[0].tolist()) for i in small}
    assert len(index_sets) == 3, index_sets  # same width, three different random index sets
    for key, global_tensor in glob.items():
        total = torch.zeros(global_tensor.numel())
        count = torch.zeros(global_tensor.numel())
        for value, plan in enumerate(plans, start=1):
            flat = plan[key].flat_index().reshape(-1)
            total[flat] += value
            count[flat] += 1
        covered = count > 0
        expected = total[covered] / count[covered]
        assert torch.allclose(global_tensor.reshape(-1)[covered].float(), expected), key


def test_mixed_family_pool_is_refused_with_the_architectures_named() -> None:
    fed = tiny_federation(num_clients=4, pool=("cnn_4_8", "cnn_8"))
    with pytest.raises(ValueError, match=r"HeteroFL needs width-scaled copies of one architecture family.*h1_cnn"):
        HeteroFL().setup(fed)
    with pytest.raises(ValueError, match=r"got cnn_4_8 and cnn_8"):
        FedRolex().setup(fed)
    with pytest.raises(ValueError, match="algorithm.weighting"):
        HeteroFL(weighting="median")
    HeteroFL().setup(tiny_federation(num_clients=4, pool=(BIG, SMALL)))


def test_lost_returns_keep_the_locally_trained_sender_models() -> None:
    from lit_fl.federation.faults import FaultsConfig

    fed = tiny_federation(num_clients=4, pool=(BIG, SMALL))
    fed.faults = FaultsConfig(return_drop_prob=1.0)
    before = snapshot(fed)
    algo = HeteroFL(sender_fraction=1.0, local_epochs=0)  # no training: a lost return leaves the sender as it was
    result, ledger = run_one_round(algo, fed)
    assert ledger.round_faults.lost_returns == len(result.senders) == 3
    for n in result.senders:
        assert same_weights(before[n], fed.clients[n].model.state_dict())
    assert ledger.round_returned_mb > 0
