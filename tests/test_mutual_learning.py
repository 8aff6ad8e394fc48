"""MutualLearning (DFML Eq. 1) and the DFML round: who moves, with which gradient."""

from __future__ import annotations

import copy

import pytest
import torch
from federations import same_weights, snapshot, tiny_federation

from lit_fl.algorithms import DFML
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.losses import teacher_weights, weighted_kl_loss, wsm_loss
from lit_fl.steps import MutualLearning, SGDConfig, StepRunner


def _models(seed: int = 0) -> list[torch.nn.Module]:
    torch.manual_seed(seed)
    return [torch.nn.Linear(6, 3), torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))]


def test_one_backward_gives_every_participant_its_own_eq1_gradient() -> None:
    models = _models()
    beta = torch.tensor([0.5, 0.5, 0.0])
    phi = [sum(p.numel() for p in m.parameters()) for m in models]
    x, y = torch.randn(5, 6), torch.tensor([0, 1, 0, 1, 1])
    step = MutualLearning(models, beta, alpha=0.7, num_params=phi)
    step.training_step((x, y), 0).backward()
    for n, model in enumerate(models):
        reference = copy.deepcopy(models)
        for m in reference:
            m.zero_grad()
        logits = [m(x) for m in reference]
        w = teacher_weights(phi, n)
        own = 0.3 * wsm_loss(logits[n], y, beta) + 0.7 * weighted_kl_loss(logits, n, w)
        own.backward()
        for p, p_ref in zip(model.parameters(), reference[n].parameters()):
            torch.testing.assert_close(p.grad, p_ref.grad)


def test_alpha_zero_is_pure_supervision_and_alpha_one_pure_distillation() -> None:
    models = _models()
    beta = torch.full((3,), 1 / 3)
    x, y = torch.randn(4, 6), torch.tensor([0, 1, 2, 0])
    logits = [m(x) for m in models]
    sup = MutualLearning(models, beta, alpha=0.0, num_params=[1, 1])
    assert sup.model_loss(logits, y, 0).item() == pytest.approx(wsm_loss(logits[0], y, beta).item())
    kd = MutualLearning(models, beta, alpha=1.0, num_params=[1, 1])
    expected = weighted_kl_loss(logits, 0, [0.0, 1.0]).item()
    assert kd.model_loss(logits, y, 0).item() == pytest.approx(expected)


def test_vanilla_transfer_updates_only_the_student() -> None:
    models = _models()
    before = [copy.deepcopy(m.state_dict()) for m in models]
    beta = torch.full((3,), 1 / 3)
    step = MutualLearning(models, beta, 0.5, [1, 1], trainable=[True, False], optimizer=SGDConfig(lr=0.1))
    batches = [(torch.randn(8, 6), torch.randint(0, 3, (8,))) for _ in range(3)]
    StepRunner(accelerator="cpu").run_server_step(step, batches)
    assert not same_weights(before[0], models[0].state_dict())
    assert same_weights(before[1], models[1].state_dict())


def test_dfml_round_moves_participants_and_leaves_the_others() -> None:
    fed = tiny_federation(num_clients=6)
    algo = DFML(mutual_epochs=1, sender_fraction=0.5, lr=0.05)
    algo.setup(fed)
    before = snapshot(fed)
    peaks_before = [copy.deepcopy(c.peak.state_dict()) for c in fed.clients]
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    participants = {result.aggregator, *result.senders}
    assert result.aggregator == 0 and len(result.senders) == 3
    for client, old, old_peak in zip(fed.clients, before, peaks_before):
        moved = not same_weights(old, client.model.state_dict())
        assert moved == (client.id in participants)
        # round 1: alpha(1) > alpha_n = 0, so every participant's peak becomes its new model
        if client.id in participants:
            assert same_weights(client.peak.state_dict(), client.model.state_dict())
            assert client.alpha_peak == pytest.approx(result.alpha)
        else:
            assert same_weights(old_peak, client.peak.state_dict())
            assert client.alpha_peak == 0.0
    sizes = {c.id: sum(t.numel() * 4 for t in c.model.state_dict().values()) / 2**20 for c in fed.clients}
    assert ledger.round_mb == pytest.approx(2 * sum(sizes[s] for s in result.senders))


def test_peak_rule_round_by_round() -> None:
    """Peaks follow Algorithm 1: updated when alpha(t) >= alpha_n, frozen otherwise."""
    fed = tiny_federation(num_clients=4, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=1.0, period=3, period_increment=1, alpha_max=0.9)
    algo.setup(fed)
    runner = StepRunner(accelerator="cpu")
    expected_alpha_n = [0.0] * 4
    for round_ in range(1, 9):
        peaks = [copy.deepcopy(c.peak.state_dict()) for c in fed.clients]
        result = algo.run_round(round_, fed, runner, CommunicationLedger())
        alpha = algo.alpha(round_)
        assert result.alpha == pytest.approx(alpha)
        for c in fed.clients:  # every client participates (sender_fraction 1.0)
            if alpha >= expected_alpha_n[c.id]:
                expected_alpha_n[c.id] = alpha
                assert same_weights(c.peak.state_dict(), c.model.state_dict()), round_
            else:
                assert same_weights(c.peak.state_dict(), peaks[c.id]), round_
            assert c.alpha_peak == pytest.approx(expected_alpha_n[c.id])
    # cycles: rounds 1-3 (rising to 0.9), 4-7 (period 4), 8-12: peaks were frozen in rounds 4-6 and 8
    assert algo.alpha(3) == pytest.approx(0.9) and algo.alpha(7) == pytest.approx(0.9)


def test_peak_updates_k_also_updates_in_the_top_k_rounds_of_a_cycle() -> None:
    fed = tiny_federation(num_clients=3, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=1.0, period=4, period_increment=0, peak_updates=2)
    algo.setup(fed)
    runner = StepRunner(accelerator="cpu")
    for round_ in range(1, 8):
        algo.run_round(round_, fed, runner, CommunicationLedger())
    # round 7 = tau 3 of the second cycle (period 4): in the top 2, so peaks follow despite alpha < 0.9
    assert algo.alpha(7) < 0.9
    for c in fed.clients:
        assert same_weights(c.peak.state_dict(), c.model.state_dict())
        assert c.alpha_peak == pytest.approx(0.9)  # alpha_n never decreases: the 0.9 of round 4 stays


def test_vanilla_transfer_leaves_every_sender_bit_identical() -> None:
    """``mutual: false`` (A.4.8): senders are teachers only; BatchNorm running statistics (ResNet) and every
    other buffer stay as they were, dropout (ViT) is off in their forward passes. The aggregator learns."""
    from lit_fl.algorithms import DFML
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner

    fed = tiny_federation(num_clients=4, pool=("resnet18_4_4_4_4", "vit_16_16"))
    dfml = DFML(mutual_epochs=1, mutual=False, sender_fraction=0.75, local_epochs=0)  # no local training
    dfml.setup(fed)
    before = snapshot(fed)
    result = dfml.run_round(1, fed, StepRunner("cpu"), CommunicationLedger())
    assert len(result.senders) == 3
    for n in result.senders:
        assert same_weights(before[n], fed.clients[n].model.state_dict()), fed.clients[n].arch
        assert fed.clients[n].model.training  # mode restored
    assert not same_weights(before[result.aggregator], fed.clients[result.aggregator].model.state_dict())


def test_frozen_teacher_logits_are_deterministic_and_keep_buffers() -> None:
    from lit_fl.models import create_model
    from lit_fl.steps.peer_learning import frozen_teacher_logits

    torch.manual_seed(0)
    for arch in ("vit_16_16", "resnet18_4_4_4_4"):
        model = create_model(arch, (3, 8, 8), 4).train()
        buffers = {k: v.clone() for k, v in model.state_dict().items()}
        x = torch.randn(5, 3, 8, 8)
        assert torch.equal(frozen_teacher_logits(model, x), frozen_teacher_logits(model, x))  # dropout off
        assert same_weights(buffers, model.state_dict())
        assert model.training
