"""UA-PDFL (papers/ua-pdfl.txt): unit representation and divergence, client-wise dropout, layer-wise
personalisation, the auxiliary proximal term, the lr schedule, and the Local / FedPer baselines."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from federations import same_weights, snapshot, tiny_federation
from torch import nn

from lit_fl.algorithms import UAPDFL, FedPer, Local
from lit_fl.algorithms.unit_representation import (
    ModelSplit,
    divergence,
    kl,
    unit_input,
    unit_representations,
)
from lit_fl.data import load_dataset
from lit_fl.data.batches import ClientBatches
from lit_fl.federation.ledger import CommunicationLedger, model_megabytes
from lit_fl.models import create_model
from lit_fl.steps import LocalTraining, SGDConfig, StepRunner
from lit_fl.steps.aux_proximal_training import AuxProximalTraining
from lit_fl.steps.phase import WorkResult
from lit_fl.steps.predict import PredictWork

RUNNER = StepRunner(accelerator="cpu")


def _homogeneous(num_clients: int = 6, seed: int = 0):  # noqa: ANN202
    return tiny_federation(num_clients=num_clients, pool=("cnn_4_8",), seed=seed)


def _fill_constants(fed) -> None:  # noqa: ANN001
    """Client ``n``'s every float weight becomes ``n + 1``: each model is recognisable after a round."""
    with torch.no_grad():
        for client in fed.clients:
            for value in client.model.state_dict().values():
                if value.is_floating_point():
                    value.fill_(client.id + 1.0)


def _spy_queues(algo):  # noqa: ANN001, ANN202
    queues = {}
    original = algo.draw_queues

    def spy(federation, ledger):  # noqa: ANN001, ANN202
        queues.update(original(federation, ledger))
        return queues

    algo.draw_queues = spy
    return queues


# -- unit representation and divergence ---------------------------------------------------------------------


def test_divergence_matches_the_formula_and_is_symmetric() -> None:
    p = torch.tensor([0.5, 0.3, 0.2])
    q = torch.tensor([0.1, 0.6, 0.3])
    kl_pq = sum(a * math.log(a / b) for a, b in zip(p.tolist(), q.tolist()))
    kl_qp = sum(b * math.log(b / a) for a, b in zip(p.tolist(), q.tolist()))
    assert float(kl(p, q)) == pytest.approx(kl_pq, rel=1e-6)
    assert divergence(p, q) == pytest.approx(0.5 * kl_pq + 0.5 * kl_qp, rel=1e-6)
    assert divergence(p, q) == divergence(q, p)
    assert divergence(p, p) == 0.0
    saturated = torch.tensor([1.0, 0.0, 0.0])  # an exact 0: eps-clamped, finite
    assert math.isfinite(divergence(saturated, q)) and divergence(saturated, q) > 0


def test_identical_models_have_zero_divergence_and_representations_are_distributions() -> None:
    model = create_model("cnn_4_8", (1, 8, 8), 4)
    twin = copy.deepcopy(model)
    x_unit = unit_input((1, 8, 8))
    assert torch.equal(x_unit, torch.ones(1, 1, 8, 8))  # all ones in the normalised input space
    model.train()
    reps = unit_representations(RUNNER, {0: model, 1: twin}, x_unit, ModelSplit())
    rep, aux = reps[0]
    assert model.training  # the mode is restored
    assert rep.shape == (4,) and float(rep.sum()) == pytest.approx(1.0, abs=1e-6)
    assert aux.shape == (8 * 2 * 2,)  # the flattened input of the classifier
    assert divergence(rep, reps[1][0]) == 0.0


def test_toy_of_figure_4_same_classes_diverge_far_less_than_disjoint_classes() -> None:
    """Clients 1 and 2 learn classes {0, 1} (disjoint samples), client 3 classes {2, 3}, of a seeded synthetic
    10-class task (class prototype + noise, 1x8x8); a shallow MLP from one initialisation (as the federation
    gives every client), trained to > 90% on its own data, then ``X_unit`` = ones. Paper: Div(1, 2) = 0.02,
    Div(1, 3) = Div(2, 3) = 0.61."""
    data = load_dataset("synthetic", seed=0, num_classes=10, input_shape=(1, 8, 8), num_train=800, num_test=10)
    g = torch.Generator().manual_seed(0)

    def shuffled(classes: list[int]) -> torch.Tensor:
        idx = torch.nonzero(torch.isin(data.train_y, torch.tensor(classes))).flatten()
        return idx[torch.randperm(len(idx), generator=g)]

    first, second = shuffled([0, 1]), shuffled([2, 3])
    parts = [first[: len(first) // 2], first[len(first) // 2 :], second[: len(second) // 2]]
    torch.manual_seed(0)
    init = nn.Sequential(nn.Flatten(), nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 10))
    x_unit = unit_input(data.input_shape)
    reps = []
    for idx in parts:
        model = copy.deepcopy(init)
        step = LocalTraining(model, torch.ones(10), "ce", SGDConfig(lr=0.05, momentum=0.5, weight_decay=0.0))
        RUNNER.run_server_step(step, ClientBatches(data.train_x, data.train_y, idx, 50, g, epochs=3))
        with torch.no_grad():
            accuracy = (model.eval()(data.train_x[idx]).argmax(1) == data.train_y[idx]).float().mean()
        assert accuracy > 0.9
        reps.append(unit_representations(RUNNER, {0: model}, x_unit, ModelSplit(["3"]))[0][0])  # "3": the last Linear
    same = divergence(reps[0], reps[1])
    disjoint = [divergence(reps[0], reps[2]), divergence(reps[1], reps[2])]
    print(f"UA-PDFL Figure 4 toy: Div(1,2) = {same:.4f}, Div(1,3) = {disjoint[0]:.4f}, Div(2,3) = {disjoint[1]:.4f}")
    assert same < 0.25 * min(disjoint)


# -- the round ---------------------------------------------------------------------------------------------------


def test_client_wise_dropout_takes_exactly_one_peers_round_start_model() -> None:
    fed = _homogeneous(num_clients=8)
    _fill_constants(fed)
    before = snapshot(fed)
    algo = UAPDFL(threshold=1e9, num_peers=2, local_epochs=0)
    algo.setup(fed)
    queues = _spy_queues(algo)
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, RUNNER, ledger)
    for client in fed.clients:
        assert len(queues[client.id]) == 2 and client.id not in queues[client.id]
        sources = [n for n, state in enumerate(before) if same_weights(client.model.state_dict(), state)]
        assert len(sources) == 1 and sources[0] in queues[client.id]  # a peer's snapshot, never a chained copy
    assert result.extra["client_dropouts"] == 8 and result.extra["personalised_classifiers"] == 0
    assert ledger.round_mb == pytest.approx(8 * model_megabytes(fed.clients[0].model))  # one whole model each


def test_layer_wise_personalisation_averages_g_over_all_peers_and_h_over_close_peers() -> None:
    fed = _homogeneous(num_clients=6)
    _fill_constants(fed)
    algo = UAPDFL(threshold=0.1, num_peers=5, local_epochs=0)  # mesh of 6: every other client is a peer
    algo.setup(fed)
    group = {n: n % 2 for n in range(6)}  # crafted: same parity = close (Div 0), other parity = far
    crafted = {0: torch.tensor([0.7, 0.1, 0.1, 0.1]), 1: torch.tensor([0.1, 0.1, 0.1, 0.7])}
    aux_size = len(algo.representations(fed, RUNNER, algo.make_unit_input(fed))[0][1])
    algo.representations = lambda federation, runner, x_unit: {n: (crafted[group[n]], torch.zeros(aux_size))
                                                               for n in group}
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, RUNNER, ledger)
    sizes = [c.num_train for c in fed.clients]
    for client in fed.clients:
        everyone = range(6)
        close = [n for n in everyone if group[n] == group[client.id]]
        g_expected = sum(sizes[n] * (n + 1.0) for n in everyone) / sum(sizes[n] for n in everyone)
        h_expected = sum(sizes[n] * (n + 1.0) for n in close) / sum(sizes[n] for n in close)
        state = client.model.state_dict()
        for key in algo.feature_keys:
            torch.testing.assert_close(state[key], torch.full_like(state[key], g_expected))
        for key in algo.classifier_keys:
            torch.testing.assert_close(state[key], torch.full_like(state[key], h_expected))
    assert result.extra["client_dropouts"] == 0 and result.extra["personalised_classifiers"] == 6
    assert result.extra["merged_classifiers"] == 6 * 2
    model = fed.clients[0].model
    g_mb = sum(model.state_dict()[k].numel() * 4 for k in algo.feature_keys) / 2**20
    h_mb = model_megabytes(model) - g_mb
    assert ledger.round_mb == pytest.approx(6 * 5 * g_mb + 6 * 2 * h_mb)  # g from every peer, h from close ones


def test_tiny_threshold_keeps_own_classifier() -> None:
    fed = _homogeneous(num_clients=6, seed=1)
    for client in fed.clients:  # distinct models so that every divergence is positive
        with torch.no_grad():
            for p in client.model.parameters():
                p.add_(0.1 * client.id * torch.randn_like(p))
    before = snapshot(fed)
    algo = UAPDFL(threshold=1e-12, num_peers=3, local_epochs=0)
    algo.setup(fed)
    queues = _spy_queues(algo)
    result = algo.run_round(1, fed, RUNNER, CommunicationLedger())
    assert result.extra["client_dropouts"] == 0 and result.extra["mean_divergence"] > 0
    for client in fed.clients:
        state = client.model.state_dict()
        sources = [client.id, *queues[client.id]]
        weights = [fed.clients[n].num_train for n in sources]
        for key in algo.classifier_keys:
            assert torch.equal(state[key], before[client.id][key])
        for key in algo.feature_keys:
            expected = sum(w * before[n][key].double() for n, w in zip(sources, weights)) / sum(weights)
            torch.testing.assert_close(state[key], expected.float())


def test_aux_term_has_zero_gradient_at_the_mean_and_pulls_otherwise() -> None:
    model = create_model("cnn_4_8", (1, 8, 8), 4)
    split = ModelSplit()
    x_unit = unit_input((1, 8, 8))
    _, aux = unit_representations(RUNNER, {0: model}, x_unit, split)[0]
    step = AuxProximalTraining(model, torch.ones(4), x_unit, aux, mu=1.0, features=split.features)
    penalty = step.aux_penalty()
    penalty.backward()
    assert float(penalty.detach()) == 0.0
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in model.parameters())
    model.zero_grad()
    shifted = AuxProximalTraining(model, torch.ones(4), x_unit, aux + 0.5, mu=0.01, features=split.features)
    penalty = shifted.aux_penalty()
    assert float(penalty.detach()) == pytest.approx(0.01 * 0.25 * aux.numel(), rel=1e-5)  # mu * ||0.5||^2 summed
    penalty.backward()
    assert any(p.grad is not None and torch.count_nonzero(p.grad) > 0 for p in model.parameters())
    classifier = model.get_submodule("classifier")
    assert all(p.grad is None or torch.count_nonzero(p.grad) == 0 for p in classifier.parameters())  # g only


def test_learning_rate_decays_per_round() -> None:
    fed = _homogeneous(num_clients=4)
    algo = UAPDFL(num_peers=2)
    algo.setup(fed)
    used = []

    class SpyRunner:
        def run_phase(self, works):  # noqa: ANN001, ANN202
            if isinstance(works[0], PredictWork):  # the unit representations
                return RUNNER.run_phase(works)
            used.extend(w.step.configure_optimizers().param_groups[0]["lr"] for w in works)
            return [WorkResult(0.0) for _ in works]

    for round_ in (1, 2, 3):
        result = algo.run_round(round_, fed, SpyRunner(), CommunicationLedger())
        assert result.extra["lr"] == pytest.approx(0.05 * 0.95 ** (round_ - 1))
    assert used == pytest.approx([lr for lr in (0.05, 0.0475, 0.045125) for _ in range(4)])  # 0.05 * 0.95^(r - 1)
    assert used[0] == 0.05  # round 1 trains at the paper's initial learning rate
    assert algo.optimizer.momentum == 0.5 and algo.batch_size == 50 and algo.loss == "ce"


# -- baselines -------------------------------------------------------------------------------------------------------


def test_local_sends_nothing_and_only_trains() -> None:
    fed = _homogeneous(num_clients=4)
    before = snapshot(fed)
    ledger = CommunicationLedger()
    Local(local_epochs=0).run_round(1, fed, RUNNER, ledger)
    assert all(same_weights(c.model.state_dict(), s) for c, s in zip(fed.clients, before))
    result = Local().run_round(1, fed, RUNNER, ledger)
    assert ledger.total_mb == 0.0 and math.isfinite(result.train_loss)
    assert all(not same_weights(c.model.state_dict(), s) for c, s in zip(fed.clients, before))


def test_fedper_averages_only_feature_keys() -> None:
    fed = _homogeneous(num_clients=5)
    _fill_constants(fed)
    algo = FedPer(num_peers=4, local_epochs=0)
    algo.setup(fed)
    ledger = CommunicationLedger()
    algo.run_round(1, fed, RUNNER, ledger)
    sizes = [c.num_train for c in fed.clients]
    g_expected = sum(s * (n + 1.0) for n, s in enumerate(sizes)) / sum(sizes)
    for client in fed.clients:
        state = client.model.state_dict()
        for key in algo.feature_keys:
            torch.testing.assert_close(state[key], torch.full_like(state[key], g_expected))
        for key in algo.classifier_keys:
            assert torch.equal(state[key], torch.full_like(state[key], client.id + 1.0))
    g_mb = sum(fed.clients[0].model.state_dict()[k].numel() * 4 for k in algo.feature_keys) / 2**20
    assert ledger.round_mb == pytest.approx(5 * 4 * g_mb)


def test_classifier_modules_are_configurable_and_checked() -> None:
    model = create_model("cnn_4_8", (1, 8, 8), 4)
    assert ModelSplit(["classifier"]).keys(model) == ModelSplit().keys(model)
    with pytest.raises(ValueError, match="not submodules"):
        ModelSplit(["head"]).keys(model)
