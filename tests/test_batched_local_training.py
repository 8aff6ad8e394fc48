"""Batched local training and fused evaluation (``trainer.fuse``): the participants of one architecture train as one
phase, each on its own batches in the order it draws alone, and every model's update, loss and accuracy is the
unfused one within float32 rounding; uneven client sizes (clients that run out of batches early), FedProx's term,
augmentation and CE included. Models with BatchNorm (padding would change their statistics) and methods that
override ``local_training`` keep the per-client phase."""

from __future__ import annotations

import copy
from collections.abc import Iterator

import pytest
import torch
from federations import snapshot, tiny_federation
from torch import nn

from lit_fl.algorithms import DFML, DecentralizedFedAvg, DecentralizedFedProx
from lit_fl.algorithms.base import Algorithm
from lit_fl.data.batches import ClientBatches, StackedBatches
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.state import Federation
from lit_fl.steps import LocalTraining, StepRunner
from lit_fl.steps.batched_local_training import per_sample
from lit_fl.steps.fusion import FusedModels, native_cpu_convolutions

RTOL = 1e-5


@pytest.fixture(autouse=True)
def native_convolutions(one_thread: None) -> Iterator[None]:
    """PyTorch's own CPU convolutions on both sides (as in test_fusion: oneDNN's float32 drift would hide the
    comparison; a fused phase uses them on a CPU anyway)."""
    with native_cpu_convolutions(torch.device("cpu")):
        yield


def local_phase(algo: Algorithm, fed: Federation, fuse: str, clients: list[int] | None = None) -> list[float]:
    chosen = [fed.clients[n] for n in (clients if clients is not None else range(fed.num_clients))]
    return algo.local_phase(chosen, fed, StepRunner("cpu", fuse=fuse))


def assert_close_weights(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]]) -> None:
    for n, (x, y) in enumerate(zip(a, b)):
        for key in x:
            diff = float((x[key].double() - y[key].double()).norm())
            assert diff <= RTOL * max(float(y[key].double().norm()), 1e-12), f"client {n} {key}: {diff}"


def fused_and_unfused(make_algo, pool, clients=None, **fed_args):  # noqa: ANN001, ANN201
    results = {}
    for fuse in ("on", "off"):
        fed = tiny_federation(num_clients=6, pool=pool, **fed_args)
        before = snapshot(fed)
        losses = local_phase(make_algo(), fed, fuse, clients)
        results[fuse] = (losses, snapshot(fed), before, fed)
    return results["on"], results["off"]


@pytest.mark.parametrize(
    ("make_algo", "pool"),
    [
        (lambda: DFML(local_epochs=2, batch_size=16), ("cnn_4_8", "cnn_8")),
        (lambda: DFML(local_epochs=1, batch_size=16, loss="ce"), ("cnn_4_8",)),
        (lambda: DecentralizedFedProx(mu=2.0, local_epochs=2, batch_size=16), ("cnn_4_8",)),
    ],
    ids=["wsm-two-archs", "ce", "fedprox"],
)
def test_batched_local_training_equals_each_client_training_alone(make_algo, pool) -> None:  # noqa: ANN001
    """Client sizes 28..85 at batch 16: 2 to 6 batches per epoch, so clients finish at different steps."""
    (fused_losses, fused, _, fed_on), (losses, unfused, _, fed_off) = fused_and_unfused(make_algo, pool)
    sizes = [c.num_train for c in fed_on.clients]
    assert len({-(-n // 16) for n in sizes}) > 2, sizes  # uneven batch counts, several partial last batches
    torch.testing.assert_close(torch.tensor(fused_losses), torch.tensor(losses), rtol=RTOL, atol=1e-6)
    assert_close_weights(fused, unfused)
    assert torch.equal(fed_on.rng.data_order.get_state(), fed_off.rng.data_order.get_state())


def test_batched_local_training_moves_the_participants_only() -> None:
    (_, fused, before, _), (_, unfused, _, _) = fused_and_unfused(lambda: DFML(batch_size=16), ("cnn_4_8",),
                                                                  clients=[4, 1, 3])
    for n in range(6):
        moved = any(not torch.equal(fused[n][k], before[n][k]) for k in before[n])
        assert moved == (n in (1, 3, 4)), n
    assert_close_weights(fused, unfused)


@pytest.mark.parametrize("augment", ["crop_flip", "crop_flip_per_batch"])
def test_augmented_batches_are_the_ones_each_client_draws_alone(augment: str) -> None:
    def with_crop_flip(fed: Federation) -> Federation:
        fed.data.augment = augment
        return fed

    results = {}
    for fuse in ("on", "off"):
        fed = with_crop_flip(tiny_federation(num_clients=4, pool=("cnn_4_8",)))
        results[fuse] = (local_phase(DFML(batch_size=16), fed, fuse), snapshot(fed))
    torch.testing.assert_close(torch.tensor(results["on"][0]), torch.tensor(results["off"][0]), rtol=RTOL,
                               atol=1e-6)
    assert_close_weights(results["on"][1], results["off"][1])


def test_batchnorm_models_and_steps_without_a_fusion_key_keep_the_per_client_phase() -> None:
    """BatchNorm: padding would change batch statistics, so a ResNet trains per client, bit for bit as unfused."""
    assert not per_sample(nn.Sequential(nn.Conv2d(1, 2, 3), nn.BatchNorm2d(2)))
    assert per_sample(nn.Sequential(nn.Conv2d(1, 2, 3), nn.GroupNorm(1, 2)))
    (losses_on, fused, _, _), (losses_off, unfused, _, _) = fused_and_unfused(
        lambda: DFML(batch_size=16), ("resnet18_2_2_4_4",), clients=[0, 1, 2])
    assert losses_on == losses_off
    for a, b in zip(fused, unfused):
        assert all(torch.equal(a[k], b[k]) for k in a)

    calls: list[int] = []

    class OwnStep(LocalTraining):  # a step of the user's own: its class defines no fusion
        fusion_key = None

        def training_step(self, batch, batch_idx):  # noqa: ANN001, ANN201
            if batch_idx == 0:
                calls.append(int(self.model.client))
            return super().training_step(batch, batch_idx)

    class Own(DecentralizedFedAvg):
        def local_work(self, client, federation):  # noqa: ANN001, ANN201
            client.model.client = client.id
            step = OwnStep(client.model, client.class_proportions, self.loss, self.optimizer)
            return self.work(client, step, federation, self.local_epochs)

    fed = tiny_federation(num_clients=4, pool=("cnn_4_8",))
    local_phase(Own(batch_size=16), fed, "on", [2, 0])
    assert calls == [2, 0]


def test_stacked_batches_give_every_client_its_own_batches_with_batch_mean_weights() -> None:
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(50, 1, 2, 2), torch.randint(0, 3, (50,))
    clients = [ClientBatches(x, y, torch.arange(0, 7), 3, g), ClientBatches(x, y, torch.arange(10, 25), 4, g,
                                                                             epochs=2)]
    alone = [list(ClientBatches(x, y, c.indices, c.batch_size, torch.Generator().manual_seed(0), epochs=c.epochs))
             for c in clients[:1]]
    plans = [c.plan() for c in clients]
    stacked = list(StackedBatches(clients, plans))
    assert len(stacked) == 8 and StackedBatches(clients, plans).num_batches == [3, 8]
    for t, (xs, ys, weight) in enumerate(stacked):
        for c, plan in enumerate(plans):
            if t >= len(plan):
                assert weight[c].sum() == 0
                continue
            b = len(plan[t].indices)
            bx, by = clients[c].cut(plan[t])
            assert torch.equal(xs[c, :b], bx) and torch.equal(ys[c, :b], by)
            assert torch.equal(weight[c], torch.tensor([1 / b] * b + [0.0] * (4 - b)))
    assert [len(b[1]) for b in alone[0]] == [3, 3, 1]  # the first client's plan is what it draws alone
    assert all(torch.equal(a[1], y[p.indices]) for a, p in zip(alone[0], plans[0]))


def test_stacked_batches_refuse_clients_over_different_tensors() -> None:
    """One stacked index cuts every client's samples from the first client's tensors: clients over other tensors (two
    rounds' FDmeta targets, say) would silently train on the wrong samples, so they are refused."""
    g = torch.Generator().manual_seed(0)
    x, y = torch.randn(10, 1, 2, 2), torch.randn(10, 3)
    clients = [ClientBatches(x, y, torch.arange(10), 4, g), ClientBatches(x, y.clone(), torch.arange(10), 4, g)]
    with pytest.raises(ValueError, match="same x_all and y_all"):
        StackedBatches(clients, [c.plan() for c in clients])


def test_fused_models_on_per_model_inputs_equal_each_model_on_its_own() -> None:
    """Both paths: the hand-fused CNN and vmap (here an MLP and a ResNet in eval mode)."""
    from lit_fl.models import create_model

    torch.manual_seed(0)
    cases = [
        ([create_model("cnn_4_8", (3, 8, 8), 5) for _ in range(3)], (3, 8, 8), True),
        ([create_model("codist_small", (1, 12, 12), 5) for _ in range(3)], (1, 12, 12), True),
        ([nn.Sequential(nn.Flatten(), nn.Linear(12, 7), nn.GELU(), nn.Linear(7, 5)) for _ in range(3)], (3, 2, 2),
         True),
        ([create_model("resnet18_2_2_4_4", (3, 8, 8), 5).eval() for _ in range(3)], (3, 8, 8), False),
    ]
    for models, shape, train in cases:
        xs = torch.randn(3, 4, *shape)
        fused = FusedModels(models).train(train)
        got = fused(xs, per_model=True)
        for g, model in enumerate(models):
            torch.testing.assert_close(got[g], model(xs[g]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("pool", [("cnn_4_8", "cnn_8"), ("resnet18_2_2_4_4", "cnn_4_8")])
def test_fused_evaluation_reports_the_unfused_metrics(pool: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    """Trained, distinct models (4 clients trained, the rest share their initial weights) and a peak that differs
    from its regular model (a pass over the validation split only)."""
    from lit_fl.federation import fused_evaluation

    fed = tiny_federation(num_clients=6, pool=pool)
    algo = DFML(batch_size=16)
    algo.setup(fed)
    local_phase(algo, fed, "off", [0, 1, 2, 3])
    fed.clients[1].update_peak(0.5)
    local_phase(algo, fed, "off", [1])
    fused_models: list[int] = []
    correct = fused_evaluation.fused_correct

    def spy(models, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        fused_models.append(len(models))
        return correct(models, *args, **kwargs)

    monkeypatch.setattr(fused_evaluation, "fused_correct", spy)
    unfused, fused = Evaluator(batch_size=7), Evaluator(batch_size=7, fuse=True)
    expected = unfused.evaluate(copy.deepcopy(fed))
    assert fused.evaluate(fed) == expected
    assert fused.evaluated == unfused.evaluated
    assert sum(fused_models) >= 4, fused_models  # the trained models of each architecture ran fused
