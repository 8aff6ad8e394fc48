"""Baselines of the DFML paper: decentralized FedProx (A.3.2), Def-KT (def-kt.txt Algorithm 1) with its
DeepMutualLearning step, and the Def-KT paper's averaging baselines FullAvg and Combo (Algorithms 2-3)."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
from federations import same_weights, snapshot, tiny_federation

from lit_fl.algorithms import Combo, DecentralizedFedAvg, DecentralizedFedProx, DefKT, FullAvg
from lit_fl.algorithms.defkt import draw_pairs
from lit_fl.federation.ledger import CommunicationLedger, model_megabytes
from lit_fl.federation.topology import mesh, ring
from lit_fl.losses import cross_entropy, kl_divergence, wsm_loss
from lit_fl.steps import DeepMutualLearning, LocalTraining, SGDConfig, StepRunner

RUNNER = StepRunner(accelerator="cpu")
LR = 0.05


def _models(seed: int = 0) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(seed)
    return torch.nn.Linear(6, 3), torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))


def _flat(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([v.reshape(-1).double() for v in model.state_dict().values()])


def _fill(fed, value_of) -> None:  # noqa: ANN001
    with torch.no_grad():
        for c in fed.clients:
            for p in c.model.parameters():
                p.fill_(value_of(c.id))


# -- DeepMutualLearning ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("loss", "kl_weight"), [("wsm", 1.0), ("ce", 0.5)])
def test_dml_gives_each_model_the_gradient_of_its_own_loss(loss: str, kl_weight: float) -> None:
    a, b = _models()
    beta = torch.tensor([0.5, 0.5, 0.0])
    x, y = torch.randn(5, 6), torch.tensor([0, 1, 0, 1, 1])
    DeepMutualLearning(a, b, beta, loss=loss, kl_weight=kl_weight).training_step((x, y), 0).backward()
    sup = wsm_loss if loss == "wsm" else cross_entropy
    for n, model in enumerate((a, b)):
        ref = [copy.deepcopy(m) for m in (a, b)]
        for m in ref:
            m.zero_grad()
        z = [m(x) for m in ref]
        own = sup(z[n], y, beta) + kl_weight * kl_divergence(z[1 - n].detach(), z[n])  # Def-KT Eq. 5 / 6
        own.backward()
        assert all(p.grad is None for p in ref[1 - n].parameters())  # the peer is a detached teacher
        for p, p_ref in zip(model.parameters(), ref[n].parameters()):
            torch.testing.assert_close(p.grad, p_ref.grad)


def test_dml_updates_both_from_predictions_before_either_update() -> None:
    """One fit step = each model's own SGD step on its own loss with the other's pre-update logits."""
    a, b = _models()
    beta = torch.full((3,), 1 / 3)
    x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
    ref = [copy.deepcopy(m) for m in (a, b)]
    step = DeepMutualLearning(a, b, beta, optimizer=SGDConfig(lr=0.1, momentum=0.0, weight_decay=0.0))
    RUNNER.run_server_step(step, [(x, y)])
    z = [m(x) for m in ref]
    for n in range(2):
        loss = cross_entropy(z[n], y) + kl_divergence(z[1 - n].detach(), z[n])
        grads = torch.autograd.grad(loss, list(ref[n].parameters()))
        for p, p0, g in zip((a, b)[n].parameters(), ref[n].parameters(), grads):
            torch.testing.assert_close(p, p0 - 0.1 * g)


def test_dml_trainable_flags_freeze_a_teacher() -> None:
    a, b = _models()
    before = [copy.deepcopy(m.state_dict()) for m in (a, b)]
    step = DeepMutualLearning(a, b, torch.full((3,), 1 / 3), trainable=(False, True), optimizer=SGDConfig(lr=0.1))
    RUNNER.run_server_step(step, [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(3)])
    assert same_weights(before[0], a.state_dict())
    assert not same_weights(before[1], b.state_dict())
    with pytest.raises(ValueError, match="trainable"):
        DeepMutualLearning(a, b, torch.ones(3), trainable=(False, False))


# -- FedProx ---------------------------------------------------------------------------------------------


def test_fedprox_with_mu_zero_is_fedavg() -> None:
    runs = []
    for algo in (DecentralizedFedAvg(lr=LR), DecentralizedFedProx(mu=0.0, lr=LR)):
        fed = tiny_federation(num_clients=4, pool=("cnn_4",))
        algo.setup(fed)
        for round_ in (1, 2):
            algo.run_round(round_, fed, RUNNER, CommunicationLedger())
        runs.append(snapshot(fed))
    assert all(same_weights(a, b) for a, b in zip(*runs))


def test_fedprox_local_phase_stays_closer_to_its_start() -> None:
    distances = []
    for algo in (DecentralizedFedAvg(lr=LR), DecentralizedFedProx(mu=2.0, lr=LR)):
        fed = tiny_federation(num_clients=4, pool=("cnn_4",))
        client = fed.clients[1]
        start = _flat(client.model)
        algo.local_phase([client], fed, RUNNER)
        distances.append((_flat(client.model) - start).norm().item())
    assert 0 < distances[1] < distances[0]
    with pytest.raises(ValueError, match="algorithm.mu must be >= 0"):
        DecentralizedFedProx(mu=-0.5)


# -- pairing ---------------------------------------------------------------------------------------------


def test_pairs_are_distinct_and_follow_the_topology() -> None:
    rngs = np.random.default_rng(1), np.random.default_rng(2)
    pairs = draw_pairs(25, mesh(50), *rngs)  # the DFML comparison: 25 senders, 25 receivers of 50
    assert len(pairs) == 25 and len({c for p in pairs for c in p}) == 50
    graph = ring(12)
    for _ in range(20):
        pairs = draw_pairs(6, graph, *rngs)
        assert 1 <= len(pairs) <= 6
        assert len({c for p in pairs for c in p}) == 2 * len(pairs)
        assert all(graph.connected(s, r) for s, r in pairs)
    assert DefKT(sender_fraction=0.5).num_pairs(5) == 2  # 2Q <= N


def test_pairwise_methods_have_no_aggregator() -> None:
    with pytest.raises(ValueError, match="algorithm.fixed_aggregator"):
        FullAvg(fixed_aggregator=0)
    with pytest.raises(ValueError, match="algorithm.fusion_epochs"):
        DefKT(fusion_epochs=-1)


# -- Def-KT ----------------------------------------------------------------------------------------------


def test_defkt_receiver_keeps_the_fused_received_model() -> None:
    """Replays Algorithm 1 by hand on an identical federation: same pairs, same batches."""
    fed, ref = tiny_federation(num_clients=6, pool=("cnn_4",)), tiny_federation(num_clients=6, pool=("cnn_4",))
    algo = DefKT(sender_fraction=0.34, fusion_epochs=1, lr=LR)  # Q = 2 of 6
    algo.setup(fed)
    before = snapshot(fed)
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, RUNNER, ledger)

    pairs = draw_pairs(2, ref.topology, ref.rng.selection, ref.rng.algorithm)
    assert result.aggregator is None and result.senders == tuple(s for s, _ in pairs)
    senders, receivers = {s for s, _ in pairs}, {r for _, r in pairs}
    assert len(senders) == len(receivers) == 2 and not senders & receivers
    opt = SGDConfig(lr=LR)
    for s, _ in pairs:
        c = ref.clients[s]
        RUNNER.run_server_step(LocalTraining(c.model, c.class_proportions, "wsm", opt), algo.batches(ref, c.train_idx))
    for s, r in pairs:
        received, own = copy.deepcopy(ref.clients[s].model), ref.clients[r].model
        RUNNER.run_server_step(
            DeepMutualLearning(received, own, ref.clients[r].class_proportions, "wsm", optimizer=opt),
            algo.batches(ref, ref.clients[r].train_idx),
        )
        new = fed.clients[r].model.state_dict()
        assert same_weights(new, received.state_dict())  # the updated received model ...
        assert not same_weights(new, own.state_dict())  # ... not the receiver's own fused model
        assert not same_weights(new, before[r]) and not same_weights(new, ref.clients[s].model.state_dict())
    for c, old, expected in zip(fed.clients, before, ref.clients):
        if c.id in senders:  # senders keep their locally trained model
            assert same_weights(c.model.state_dict(), expected.model.state_dict())
        elif c.id not in receivers:
            assert same_weights(c.model.state_dict(), old)
    size = model_megabytes(fed.clients[0].model)
    assert ledger.transfers == [(s, r, size) for s, r in pairs]  # Q model sends, nothing back
    assert ledger.round_returned_mb == 0
    assert result.extra["fused_pairs"] == 2 and result.num_participants == 4
    assert not np.isnan(result.extra["fusion_loss"])


def test_defkt_failed_senders_change_no_receiver() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    fed.faults.drop_prob = 1.0
    algo = DefKT(sender_fraction=0.5, lr=LR)
    algo.setup(fed)
    before = snapshot(fed)
    ledger = CommunicationLedger.of(fed)
    result = algo.run_round(1, fed, RUNNER, ledger)
    assert len(result.senders) == 3
    for c, old in zip(fed.clients, before):
        assert same_weights(c.model.state_dict(), old) == (c.id not in result.senders)
    assert ledger.round_mb == 0 and ledger.round_faults.dropped_senders == 3 and result.extra["fused_pairs"] == 0


# -- FullAvg and Combo (hand-checked with constant models, no local training) ----------------------------


def _pair_round(algo, fed):  # noqa: ANN001, ANN202
    algo.setup(fed)
    _fill(fed, lambda n: float(n + 1))
    ledger = CommunicationLedger.of(fed)
    result = algo.run_round(1, fed, RUNNER, ledger)
    (s,) = result.senders
    (r,) = [c.id for c in fed.clients if c.id != s and _flat(c.model).ne(c.id + 1).any()] or [None]
    return result, ledger, s, r


def test_fullavg_receiver_is_the_sample_weighted_average() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    result, ledger, s, r = _pair_round(FullAvg(sender_fraction=0.17, local_epochs=0), fed)
    n_s, n_r = fed.clients[s].num_train, fed.clients[r].num_train
    assert n_s != n_r
    expected = (n_s * (s + 1) + n_r * (r + 1)) / (n_s + n_r)
    for p in fed.clients[r].model.parameters():
        torch.testing.assert_close(p, torch.full_like(p, expected))
    for c in fed.clients:
        if c.id != r:
            assert torch.equal(_flat(c.model), torch.full_like(_flat(c.model), c.id + 1.0))
    assert ledger.transfers == [(s, r, model_megabytes(fed.clients[s].model))]


@pytest.mark.parametrize("lose_return", [False, True])
def test_combo_averages_segment_2_at_the_receiver_and_segment_1_at_the_sender(lose_return: bool) -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    fed.faults.return_drop_prob = 1.0 if lose_return else 0.0
    result, ledger, s, r = _pair_round(Combo(sender_fraction=0.17, local_epochs=0), fed)
    n_s, n_r = fed.clients[s].num_train, fed.clients[r].num_train
    mean = (n_s * (s + 1) + n_r * (r + 1)) / (n_s + n_r)
    sender, receiver = _flat(fed.clients[s].model), _flat(fed.clients[r].model)
    half = len(sender) // 2
    expected_receiver = torch.cat([torch.full((half,), r + 1.0), torch.full((len(sender) - half,), mean)])
    torch.testing.assert_close(receiver, expected_receiver.double(), atol=1e-6, rtol=0)
    expected_sender = torch.cat(
        [torch.full((half,), s + 1.0 if lose_return else mean), torch.full((len(sender) - half,), s + 1.0)]
    )
    torch.testing.assert_close(sender, expected_sender.double(), atol=1e-6, rtol=0)
    for c in fed.clients:
        if c.id not in (s, r):
            assert torch.equal(_flat(c.model), torch.full_like(_flat(c.model), c.id + 1.0))
    # the segments travel with their real sizes: half a model each way, one model per pair in all
    (to_r, to_s) = ledger.transfers
    assert to_r[:2] == (s, r) and to_s[:2] == (r, s)
    assert to_s[2] == pytest.approx(half * 4 / 2**20) and to_r[2] == pytest.approx((len(sender) - half) * 4 / 2**20)
    assert ledger.round_mb == pytest.approx(model_megabytes(fed.clients[s].model))
    assert ledger.round_faults.lost_returns == (1 if lose_return else 0)
