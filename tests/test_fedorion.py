"""FedORION (papers/fedorion.txt): noise distillation (Eq. 3) with current BatchNorm statistics, the round
(selective DML, aggregation, server distillation), the Figure 1 toy, and DFML's data-free noise extension."""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from federations import full_state, same_weights, snapshot, tiny_federation
from torch import nn

from lit_fl.algorithms import DFML, FedORION
from lit_fl.algorithms.fedorion import GLOBAL
from lit_fl.federation.ledger import CommunicationLedger, model_megabytes
from lit_fl.steps import MutualNoiseDistillation, NoiseBatches, NoiseDistillation, SGDConfig, StepRunner
from lit_fl.steps.noise_distillation import teacher_mode


def mlp(hidden: list[int], inputs: int = 2, classes: int = 3, dropout: float = 0.0) -> nn.Sequential:
    """Linear -> ReLU -> BatchNorm per hidden layer (the Figure 1 models), optional dropout, linear head."""
    layers: list[nn.Module] = []
    previous = inputs
    for width in hidden:
        layers += [nn.Linear(previous, width), nn.ReLU(), nn.BatchNorm1d(width)]
        if dropout:
            layers.append(nn.Dropout(dropout))
        previous = width
    layers.append(nn.Linear(previous, classes))
    return nn.Sequential(*layers)


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


# -- NoiseDistillation ------------------------------------------------------------------------------------


def _trained_teacher(hidden: list[int], seed: int, dropout: float = 0.0) -> nn.Module:
    """A teacher whose running statistics are far from those of N(0, I) (trained on shifted data)."""
    torch.manual_seed(seed)
    model = mlp(hidden, dropout=dropout)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    for _ in range(5):
        x = 3.0 + 2.0 * torch.randn(64, 2)
        loss = F.cross_entropy(model(x), (x[:, 0] > 3.0).long())
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.zero_grad(set_to_none=True)
    return model


@pytest.mark.parametrize("bn_stats", ["current", "running"])
def test_noise_distillation_leaves_teachers_untouched_and_moves_the_student(bn_stats: str) -> None:
    teachers = [_trained_teacher([8], 1), _trained_teacher([16, 8], 2, dropout=0.5)]
    before = [full_state(t) for t in teachers]
    torch.manual_seed(3)
    student = mlp([8])
    student_before = full_state(student)
    step = NoiseDistillation(student, teachers, [10, 30], bn_stats=bn_stats, optimizer=SGDConfig(lr=0.1))
    cpu().run_server_step(step, NoiseBatches((2,), 32, 5, torch.Generator().manual_seed(0)))
    for teacher, state in zip(teachers, before):
        after = teacher.state_dict()
        for key, value in state.items():  # weights, running_mean/var and num_batches_tracked
            assert torch.equal(after[key], value), key
        assert all(p.grad is None for p in teacher.parameters())
    assert step.num_batches == 5 and math.isfinite(float(step.loss_sum))
    assert not same_weights(student_before, student.state_dict())
    # the runner put the step in train mode; teacher_mode restored exactly that after every forward
    assert all(m.training for t in teachers for m in t.modules())
    assert all(m.track_running_stats for t in teachers for m in t.modules() if isinstance(m, nn.BatchNorm1d))


def test_teacher_mode_current_uses_batch_statistics_without_dropout() -> None:
    teacher = _trained_teacher([16, 8], 4, dropout=0.5)
    z = torch.randn(64, 2, generator=torch.Generator().manual_seed(1))
    reference = copy.deepcopy(teacher)
    for m in reference.modules():  # batch statistics, dropout off
        m.train(isinstance(m, nn.BatchNorm1d))
    with torch.no_grad():
        expected_current = reference(z)
        expected_running = teacher.eval()(z)
        teacher.train()
        with teacher_mode(teacher, "current"):
            current = teacher(z)
            current_again = teacher(z)  # dropout off: deterministic
        with teacher_mode(teacher, "running"):
            running = teacher(z)
    assert torch.allclose(current, expected_current, atol=1e-6) and torch.equal(current, current_again)
    assert torch.allclose(running, expected_running, atol=1e-6)
    assert not torch.allclose(current, running, atol=1e-3)  # the teacher's running stats are not N(0, I)'s
    assert teacher.training and all(m.training for m in teacher.modules())


def test_kd_loss_is_eq3_on_a_hand_checkable_case() -> None:
    """Bias-only linear models: teacher 1 predicts (1/2, 1/2), teacher 2 (3/4, 1/4), the student (3/4, 1/4).

    L = 1/4 * CE((1/2, 1/2), q) + 3/4 * CE((3/4, 1/4), q) with n = (10, 30) and q = (3/4, 1/4)."""

    def linear(bias: list[float]) -> nn.Linear:
        layer = nn.Linear(3, 2)
        with torch.no_grad():
            layer.weight.zero_()
            layer.bias.copy_(torch.tensor(bias))
        return layer

    log3 = math.log(3.0)
    step = NoiseDistillation(linear([0.0, 0.0]), [linear([0.0, 0.0]), linear([log3, 0.0])], [10, 30])
    z = torch.randn(5, 3, generator=torch.Generator().manual_seed(0))
    loss = step.training_step((z, torch.empty(0)), 0).detach()
    ce_uniform = -(0.5 * math.log(0.5) + 0.5 * math.log(0.5))  # student (1/2, 1/2)
    ce_skewed = -(0.75 * math.log(0.5) + 0.25 * math.log(0.5))
    assert float(loss) == pytest.approx(0.25 * ce_uniform + 0.75 * ce_skewed)  # = log 2
    step.student = linear([log3, 0.0])
    loss = step.training_step((z, torch.empty(0)), 1).detach()
    ce1 = -(0.5 * math.log(0.75) + 0.5 * math.log(0.25))
    ce2 = -(0.75 * math.log(0.75) + 0.25 * math.log(0.25))
    assert float(loss) == pytest.approx(0.25 * ce1 + 0.75 * ce2, rel=1e-6)


@pytest.mark.parametrize("mode", ["keep", "update"])
def test_student_running_statistics_keep_or_update(mode: str) -> None:
    teacher = _trained_teacher([8], 5)
    torch.manual_seed(6)
    student = mlp([8])
    before = full_state(student)
    step = NoiseDistillation(student, [teacher], [1], student_running_stats=mode)
    cpu().run_server_step(step, NoiseBatches((2,), 16, 3, torch.Generator().manual_seed(0)))
    buffers = [k for k in before if "running" in k or "num_batches" in k]
    unchanged = all(torch.equal(before[k], student.state_dict()[k]) for k in buffers)
    assert unchanged == (mode == "keep")


def test_noise_batches_are_reproducible_gaussian_noise() -> None:
    a = [z for z, _ in NoiseBatches((1, 4, 4), 256, 3, torch.Generator().manual_seed(7))]
    b = [z for z, _ in NoiseBatches((1, 4, 4), 256, 3, torch.Generator().manual_seed(7))]
    assert len(a) == 3 and all(z.shape == (256, 1, 4, 4) for z in a)
    assert all(torch.equal(x, y) for x, y in zip(a, b)) and not torch.equal(a[0], a[1])
    allz = torch.cat(a)
    assert abs(float(allz.mean())) < 0.05 and abs(float(allz.std()) - 1.0) < 0.05


@pytest.mark.parametrize("kind", ["gaussian", "dead_leaves"])
def test_planned_noise_is_the_noise_iterating_draws(kind: str) -> None:
    """As a client work's batches (DFML's noise distillation): the plan draws what iterating draws, and leaves the
    generator where iterating leaves it; cutting a planned batch puts it on the device, channels last when asked."""
    iterated, planned = torch.Generator().manual_seed(7), torch.Generator().manual_seed(7)
    a = list(NoiseBatches((3, 8, 8), 4, 3, iterated, channels_last=True, kind=kind))
    noise = NoiseBatches((3, 8, 8), 4, 3, planned, channels_last=True, kind=kind)
    b = [noise.cut(p) for p in noise.plan()]
    assert torch.equal(iterated.get_state(), planned.get_state())
    for (za, ya), (zb, yb) in zip(a, b, strict=True):
        assert torch.equal(za, zb) and zb.is_contiguous(memory_format=torch.channels_last)
        assert ya.numel() == yb.numel() == 0


def test_mutual_noise_distillation_trains_everyone_and_keeps_running_statistics() -> None:
    models = [_trained_teacher([8], 7), _trained_teacher([16, 8], 8), _trained_teacher([4], 9)]
    before = [full_state(m) for m in models]
    step = MutualNoiseDistillation(models, [100, 300, 50], trainable=[True, True, False], optimizer=SGDConfig(lr=0.1))
    cpu().run_server_step(step, NoiseBatches((2,), 32, 3, torch.Generator().manual_seed(0)))
    for n, (model, state) in enumerate(zip(models, before)):
        after = model.state_dict()
        buffers = [k for k in state if "running" in k or "num_batches" in k]
        assert all(torch.equal(after[k], state[k]) for k in buffers)
        assert same_weights(state, after) == (n == 2)


# -- the Figure 1 toy ---------------------------------------------------------------------------------------


def _blobs(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Three 2-D Gaussian blobs at 120 degrees (radius 2, std 0.7), one per class."""
    y = torch.randint(0, 3, (n,), generator=generator)
    angle = y.float() * 2 * math.pi / 3
    centers = 2.0 * torch.stack([torch.cos(angle), torch.sin(angle)], dim=1)
    return centers + 0.7 * torch.randn(n, 2, generator=generator), y


def _accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    model.eval()
    with torch.no_grad():
        return float((model(x).argmax(1) == y).float().mean())


def test_figure1_toy_server_distilled_from_noise_only_matches_the_ensemble() -> None:
    """Three clients with different MLPs (BatchNorm after every hidden layer) learn a 2-D, 3-class problem
    from their own third of the data; a server MLP of yet another shape learns ONLY from N(0, I) noise.

    The data is standardised (as inputs always are), so the noise covers the region where the decision
    boundaries meet. The server model is fresh, so its own running statistics track the noise
    (``student_running_stats="update"``); in FedORION they come from the aggregated copies instead."""
    g = torch.Generator().manual_seed(0)
    torch.manual_seed(0)
    x_train, y_train = _blobs(600, g)
    x_test, y_test = _blobs(3000, g)
    mean, std = x_train.mean(0), x_train.std(0)
    x_train, x_test = (x_train - mean) / std, (x_test - mean) / std

    clients = []
    for i, hidden in enumerate([[8], [16, 8], [32, 16, 8]]):
        model = mlp(hidden)
        own = torch.arange(i, 600, 3)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
        model.train()
        for _ in range(10):
            order = own[torch.randperm(len(own), generator=g)]
            for start in range(0, len(order), 32):
                batch = order[start : start + 32]
                loss = F.cross_entropy(model(x_train[batch]), y_train[batch])
                opt.zero_grad()
                loss.backward()
                opt.step()
        clients.append(model)
    client_accs = [_accuracy(m, x_test, y_test) for m in clients]
    with torch.no_grad():
        ensemble = torch.stack([F.softmax(m.eval()(x_test), dim=1) for m in clients]).mean(0)
    ensemble_acc = float((ensemble.argmax(1) == y_test).float().mean())

    server_accs = {}
    for bn_stats in ("current", "running"):
        torch.manual_seed(1)
        server = mlp([16, 16])
        step = NoiseDistillation(
            server,
            clients,
            [200, 200, 200],
            bn_stats=bn_stats,
            student_running_stats="update",
            optimizer=SGDConfig(lr=0.1, momentum=0.9, weight_decay=0.0),
        )
        cpu().run_server_step(step, NoiseBatches((2,), 128, 100, torch.Generator().manual_seed(2)))
        server_accs[bn_stats] = _accuracy(server, x_test, y_test)
    print(
        f"\nFigure 1 toy: clients {[round(a, 4) for a in client_accs]}, ensemble {ensemble_acc:.4f}, "
        f"server from noise with current BN stats {server_accs['current']:.4f}, "
        f"with running BN stats {server_accs['running']:.4f}"
    )
    assert ensemble_acc > 0.9
    assert server_accs["current"] >= 0.9 * ensemble_acc
    # running statistics are not asserted against: on standardised 2-D data N(0, I) already matches the data's
    # statistics, so both variants come out close (see the printed numbers)


# -- FedORION rounds ----------------------------------------------------------------------------------------


def _fed():  # noqa: ANN202
    return tiny_federation(num_clients=6, pool=("cnn_4_8", "cnn_8"))  # cnn_8 is the smaller


def _fedorion(**kwargs) -> FedORION:  # noqa: ANN003
    options = {"client_fraction": 0.5, "local_epochs": 1, "server_epochs": 1, "noise_steps": 3}
    options.update(noise_batch_size=16, lr=0.05, server_lr=0.01, **kwargs)
    return FedORION(**options)


def test_setup_picks_the_smallest_architecture_and_its_clients_initialisation() -> None:
    fed = _fed()
    algo = _fedorion()
    algo.setup(fed)
    assert algo.global_arch == "cnn_8"
    owner = next(c for c in fed.clients if c.arch == "cnn_8")
    assert same_weights(fed.server[GLOBAL].state_dict(), owner.model.state_dict())
    assert fed.server[GLOBAL] is not owner.model


def test_round_trains_selected_clients_and_the_server_only() -> None:
    fed = _fed()
    algo = _fedorion()
    algo.setup(fed)
    before, server_before = snapshot(fed), full_state(fed.server[GLOBAL])
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, cpu(), ledger)
    selected = set(result.senders)
    assert len(selected) == 3 and result.aggregator is None and math.isfinite(result.extra["kd_loss"])
    for client, old in zip(fed.clients, before):
        assert (not same_weights(old, client.model.state_dict())) == (client.id in selected)
    assert not same_weights(server_before, fed.server[GLOBAL].state_dict())
    global_mb = model_megabytes(fed.server[GLOBAL])
    local_mb = sum(model_megabytes(fed.clients[n].model) for n in selected)
    assert ledger.round_returned_mb == pytest.approx(3 * global_mb)  # broadcast
    assert ledger.round_sent_mb == pytest.approx(3 * global_mb + local_mb)  # copies + local models
    assert {t[1] for t in ledger.transfers if t[0] == -1} == selected


def test_without_distillation_the_server_is_the_plain_average_of_the_copies() -> None:
    fed = _fed()
    algo = _fedorion(server_epochs=0, aggregation="samples")
    algo.setup(fed)
    copies = []
    original = algo.dml_work

    def spy(client, global_copy, federation):  # noqa: ANN001, ANN202
        copies.append((client.num_train, global_copy))
        return original(client, global_copy, federation)

    algo.dml_work = spy
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())
    captured = [(n, full_state(global_copy)) for n, global_copy in copies]  # the copies after the clients' DML
    assert math.isnan(result.extra["kd_loss"]) and len(captured) == 3
    total = sum(n for n, _ in captured)
    for key, value in fed.server[GLOBAL].state_dict().items():
        if torch.is_floating_point(value):
            expected = sum(n / total * state[key].double() for n, state in captured)
            assert torch.allclose(value.double(), expected, atol=1e-6), key


def test_selective_dml_clients_train_the_received_global_model() -> None:
    fed = _fed()
    algo = _fedorion(no_dml="global_arch", client_fraction=1.0)
    algo.setup(fed)
    assert algo.no_dml == {c.id for c in fed.clients if c.arch == "cnn_8"} and algo.no_dml
    captured = {}
    original = algo.no_dml_work

    def spy(client, federation):  # noqa: ANN001, ANN202
        captured[client.id] = full_state(client.model)  # what it trains: the received global model
        return original(client, federation)

    algo.no_dml_work = spy
    server_before = full_state(fed.server[GLOBAL])
    ledger = CommunicationLedger()
    result = algo.run_round(1, fed, cpu(), ledger)
    assert set(captured) == algo.no_dml and result.extra["dml_clients"] == 6 - len(algo.no_dml)
    assert all(same_weights(server_before, state) for state in captured.values())
    dml = [c for c in fed.clients if c.id not in algo.no_dml]
    expected_sent = len(fed.clients) * model_megabytes(fed.server[GLOBAL]) + sum(model_megabytes(c.model) for c in dml)
    assert ledger.round_sent_mb == pytest.approx(expected_sent)


def test_no_dml_validation() -> None:
    fed = _fed()
    wrong = next(c for c in fed.clients if c.arch != "cnn_8")
    with pytest.raises(
        ValueError,
        match=rf"algorithm.no_dml: client {wrong.id} has arch cnn_4_8, selective DML "
        r"needs the global architecture cnn_8",
    ):
        _fedorion(no_dml=[wrong.id]).setup(fed)
    with pytest.raises(ValueError, match="algorithm.client_fraction"):
        _fedorion(client_fraction=0.0)


def test_global_model_survives_a_checkpoint() -> None:
    fed = _fed()
    algo = _fedorion()
    algo.setup(fed)
    algo.run_round(1, fed, cpu(), CommunicationLedger())
    state, algo_state = fed.state_dict(), algo.state_dict()
    fresh, fresh_algo = _fed(), _fedorion()
    fresh_algo.setup(fresh)
    fresh.load_state_dict(state)
    fresh_algo.load_state_dict(algo_state)
    assert same_weights(fresh.server[GLOBAL].state_dict(), fed.server[GLOBAL].state_dict())


def test_round_is_reproducible() -> None:
    runs = []
    for _ in range(2):
        fed = _fed()
        algo = _fedorion()
        algo.setup(fed)
        algo.run_round(1, fed, cpu(), CommunicationLedger())
        runs.append((snapshot(fed), full_state(fed.server[GLOBAL])))
    assert all(same_weights(a, b) for a, b in zip(runs[0][0], runs[1][0]))
    assert same_weights(runs[0][1], runs[1][1])


# -- DFML's data-free extension -----------------------------------------------------------------------------


def _dfml_round(**kwargs):  # noqa: ANN003, ANN202
    fed = tiny_federation(num_clients=4)
    algo = DFML(mutual_epochs=1, sender_fraction=0.5, lr=0.05, **kwargs)
    algo.setup(fed)
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())
    return fed, result


def test_dfml_without_noise_batches_is_unchanged() -> None:
    """``noise_batches = 0`` (the default) is DFML as published (papers/dfml.txt, Algorithm 1): its round ends
    exactly where a ``noise_batches = 3`` round starts its noise step (same weights, same data-order stream, so
    no noise is drawn), and the noise step is the only thing the extension adds."""
    assert DFML().noise_batches == 0
    fed_plain, plain = _dfml_round()
    fed = tiny_federation(num_clients=4)
    algo = DFML(mutual_epochs=1, sender_fraction=0.5, lr=0.05, noise_batches=3, noise_batch_size=16)
    algo.setup(fed)
    at_noise = {}
    original = algo.noise_distillation

    def spy(clients, federation, runner):  # noqa: ANN001, ANN202
        at_noise["weights"], at_noise["rng"] = snapshot(federation), federation.rng.data_order.get_state()
        return original(clients, federation, runner)

    algo.noise_distillation = spy
    noisy = algo.run_round(1, fed, cpu(), CommunicationLedger())
    assert all(same_weights(a, b) for a, b in zip(snapshot(fed_plain), at_noise["weights"]))
    assert torch.equal(fed_plain.rng.data_order.get_state(), at_noise["rng"])
    assert "noise_kd_loss" not in plain.extra and math.isfinite(noisy.extra.pop("noise_kd_loss"))
    assert plain.extra == pytest.approx(noisy.extra)
    participants = {noisy.aggregator, *noisy.senders}
    for client, a, b in zip(fed.clients, at_noise["weights"], snapshot(fed)):
        assert (not same_weights(a, b)) == (client.id in participants)


def test_dfml_with_noise_batches_distils_participants_on_noise() -> None:
    fed_plain, plain = _dfml_round()
    fed_noise, noisy = _dfml_round(noise_batches=3, noise_batch_size=16)
    assert math.isfinite(noisy.extra["noise_kd_loss"])
    participants = {noisy.aggregator, *noisy.senders}
    assert participants == {plain.aggregator, *plain.senders}
    for client, a, b in zip(fed_noise.clients, snapshot(fed_plain), snapshot(fed_noise)):
        assert (not same_weights(a, b)) == (client.id in participants)
    with pytest.raises(ValueError, match="algorithm.noise_batches"):
        DFML(noise_batches=-1)


def test_resumed_run_equals_an_uninterrupted_one(tmp_path) -> None:  # noqa: ANN001
    """Through ``lit-fl fit``: 2 rounds + ``--resume`` to 4 equals 4 rounds (the global model, selection and
    noise streams are all in the checkpoint)."""
    from conftest import TINY_OPTIONS, TINY_POOL, run_cli, write_config
    from test_resume import assert_runs_equal

    config = {
        "seed": 0,
        "rounds": 4,
        "algorithm": {
            "class_path": "lit_fl.algorithms.FedORION",
            "init_args": {
                "client_fraction": 0.5,
                "local_epochs": 1,
                "server_epochs": 1,
                "noise_steps": 2,
                "noise_batch_size": 16,
                "no_dml": "global_arch",
            },
        },
        "data": {"dataset": "synthetic", "num_clients": 4, "beta": 0.5, "options": dict(TINY_OPTIONS)},
        "models": {"pool": list(TINY_POOL)},
        "logger": {"wandb": False, "progress": False},
    }
    path = write_config(tmp_path / "fedorion.yaml", config)
    runs = tmp_path / "runs"
    for argv in (["--name", "full"], ["--name", "part", "--rounds", "2"], ["--resume", runs / "part"]):
        result = run_cli("fit", "--config", path, "--run_dir", runs, *argv)
        assert result.rc == 0, result.err
    assert_runs_equal(runs / "part", runs / "full")


# -- paper fidelity: two learning rates, one noise batch per server epoch -------------------------------------


@pytest.mark.parametrize("global_label_loss", [True, False])
def test_client_trains_the_global_copy_at_eta_g_and_the_local_model_at_eta_i(global_label_loss: bool) -> None:
    """Algorithm 1, client side: theta_i -= eta_i grad L_CMi, theta_gi -= eta_g grad L_GMi (eta_g = 0.001); the
    Table 3 "w/o DML" ablation drops the labels from L_GMi and keeps its distillation part."""
    from lit_fl.data.batches import ClientBatches
    from lit_fl.losses import kl_divergence

    fed = _fed()
    algo = FedORION(local_epochs=1, batch_size=1000, lr=0.05, global_lr=0.001, no_dml=None,
                    global_label_loss=global_label_loss)
    algo.setup(fed)
    client = next(c for c in fed.clients if c.arch == "cnn_4_8")
    global_copy = copy.deepcopy(fed.server[GLOBAL])
    local_start, copy_start = copy.deepcopy(client.model), copy.deepcopy(global_copy)
    generator_state = fed.rng.data_order.get_state()
    cpu().run_phase([algo.dml_work(client, global_copy, fed)])
    fed.rng.data_order.set_state(generator_state)  # the same single batch, by hand
    batch = ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, 1000, fed.rng.data_order)
    (x, y), = list(batch)
    z_local, z_copy = local_start(x), copy_start(x)
    ce = torch.nn.functional.cross_entropy
    loss_local = ce(z_local, y) + kl_divergence(z_copy.detach(), z_local)
    loss_copy = ce(z_copy, y) * global_label_loss + kl_divergence(z_local.detach(), z_copy)
    (loss_local + loss_copy).backward()
    for model, trained, lr in ((local_start, client.model, 0.05), (copy_start, global_copy, 0.001)):
        for (name, p), q in zip(model.named_parameters(), trained.parameters()):
            assert torch.allclose(p.detach() - lr * p.grad, q.detach(), atol=1e-6), name  # first SGD step


def test_server_distillation_runs_one_noise_batch_per_server_epoch_by_default() -> None:
    """Algorithm 1, server side: for each epoch r_s = 1..T_s, sample A batch of noise (T_s = 5)."""
    fed = _fed()
    algo = FedORION(local_epochs=1, noise_batch_size=16)
    assert algo.server_epochs == 5 and algo.noise_steps == 1
    algo.setup(fed)
    counted = []
    runner = cpu()
    original = runner.run_server_step

    def counting_fit(step, batches):  # noqa: ANN001, ANN202
        if type(step).__name__ == "NoiseDistillation":
            counted.append(len(batches))
        return original(step, batches)

    runner.run_server_step = counting_fit
    algo.run_round(1, fed, runner, CommunicationLedger())
    assert counted == [5]
    assert FedORION(noise_steps=4).noise_steps == 4  # still a key


@pytest.mark.parametrize(("no_dml_lr", "expected"), [("lr", 0.01), ("global_lr", 0.001)])
def test_no_dml_clients_train_at_the_rate_no_dml_lr_names(no_dml_lr: str, expected: float) -> None:
    """The paper leaves the rate of a client without DML open: ``lr`` (eta_i, sec. 4.1) or ``global_lr`` (eta_g);
    the other clients' DML keeps eta_i for the local model and eta_g for the global copy either way."""
    fed = _fed()
    algo = FedORION(no_dml="global_arch", client_fraction=1.0, local_epochs=1, lr=0.01, global_lr=0.001,
                    no_dml_lr=no_dml_lr)
    algo.setup(fed)
    client = next(c for c in fed.clients if c.id in algo.no_dml)
    work = algo.no_dml_work(client, fed)
    assert work is not None
    groups = work.step.configure_optimizers().param_groups
    assert [g["lr"] for g in groups] == [expected]
    dml = next(c for c in fed.clients if c.id not in algo.no_dml)
    dml_work = algo.dml_work(dml, copy.deepcopy(fed.server[GLOBAL]), fed)
    assert dml_work is not None
    assert sorted(g["lr"] for g in dml_work.step.configure_optimizers().param_groups) == [0.001, 0.01]
