"""Every reported accuracy against an evaluation written out here, independently of the ``Evaluator``: the peak
and regular models (DFML), the extra ``meme`` model (FML), the server model (FedORION), per architecture, on a pool
with a BatchNorm model (evaluation must run in eval mode), round after round (the caches must follow the models)."""

from __future__ import annotations

import math

import pytest
import torch
from federations import tiny_federation
from torch import Tensor, nn

from lit_fl.algorithms import DFML, DecentralizedFML, FedORION
from lit_fl.algorithms.fedorion import GLOBAL
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner

POOL = ("cnn_4_8", "resnet18_2_2_4_4")  # a GroupNorm CNN and a BatchNorm ResNet


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def accuracy(model: nn.Module, x: Tensor, y: Tensor) -> float:
    """Top-1 accuracy of ``model`` in eval mode (BatchNorm on running statistics); NaN for no sample."""
    if len(y) == 0:
        return math.nan
    was_training = model.training
    model.eval()
    with torch.no_grad():
        correct = (model(x).argmax(dim=1) == y).sum().item()
    model.train(was_training)
    return correct / len(y)


def mean(values: list[float]) -> float:
    kept = [v for v in values if not math.isnan(v)]
    return sum(kept) / len(kept)


def expected_metrics(fed: Federation) -> dict[str, float]:
    """SPEC "Data": global = mean over clients on the whole test set, local = mean over clients on their own
    validation split, of the reported model (the peak where there is one); the same for the regular model, per
    architecture, for every extra model and every server model."""
    data = fed.data
    test = lambda m: accuracy(m, data.test_x, data.test_y)  # noqa: E731
    val = lambda m, c: accuracy(m, data.train_x[c.val_idx], data.train_y[c.val_idx])  # noqa: E731
    shown = [c.peak if c.peak is not None else c.regular_model for c in fed.clients]
    out = {
        "global_acc": mean([test(m) for m in shown]),
        "global_acc_regular": mean([test(c.regular_model) for c in fed.clients]),
        "local_acc": mean([val(m, c) for m, c in zip(shown, fed.clients)]),
        "local_acc_regular": mean([val(c.regular_model, c) for c in fed.clients]),
    }
    for arch in {c.arch for c in fed.clients}:
        out[f"acc/{arch}"] = mean([test(m) for m, c in zip(shown, fed.clients) if c.arch == arch])
    for name in {n for c in fed.clients for n in c.extras}:
        holders = [c for c in fed.clients if name in c.extras]
        out[f"global_acc_{name}"] = mean([test(c.extras[name]) for c in holders])
        out[f"local_acc_{name}"] = mean([val(c.extras[name], c) for c in holders])
    for name, model in fed.server.items():
        out[f"server_acc/{name}"] = test(model)
    return out


def assert_metrics(got: dict[str, float], fed: Federation) -> None:
    expected = expected_metrics(fed)
    assert set(expected) <= set(got)
    for key, value in expected.items():
        assert got[key] == pytest.approx(value, abs=1e-6), key


def test_peak_regular_and_per_architecture_accuracy_round_after_round() -> None:
    """DFML: after each round, and after local training that moves regular models away from their peaks."""
    fed = tiny_federation(num_clients=4, pool=POOL)
    algo = DFML(mutual_epochs=1, local_epochs=1, sender_fraction=0.5, alpha_schedule="fixed", lr=0.1)
    algo.setup(fed)
    evaluator, runner = Evaluator(), StepRunner("cpu")
    for round_ in (1, 2):
        algo.run_round(round_, fed, runner, CommunicationLedger())
        assert_metrics(evaluator.evaluate(fed), fed)
    for client in fed.clients[:2]:
        algo.local_phase([client], fed, runner)
    metrics = evaluator.evaluate(fed)
    assert metrics["global_acc"] != metrics["global_acc_regular"]  # the peaks are reported, not the regular models
    assert_metrics(metrics, fed)


def test_meme_accuracy_is_the_meme_models() -> None:
    """FML: ``global_acc_meme`` / ``local_acc_meme`` evaluate every client's meme, not its local model."""
    fed = tiny_federation(num_clients=4, pool=POOL)
    algo = DecentralizedFML(sender_fraction=1.0, lr=0.1)
    algo.setup(fed)
    evaluator = Evaluator()
    algo.run_round(1, fed, StepRunner("cpu"), CommunicationLedger())
    metrics = evaluator.evaluate(fed)
    assert metrics["global_acc_meme"] != metrics["global_acc"]
    assert_metrics(metrics, fed)


def test_server_accuracy_follows_the_server_model_every_round() -> None:
    """FedORION: ``server_acc/global`` is the global model's test accuracy after each round."""
    fed = tiny_federation(num_clients=4, pool=POOL)
    algo = FedORION(client_fraction=0.5, local_epochs=1, server_epochs=1, noise_batch_size=16, lr=0.1,
                    global_lr=0.1, server_lr=0.1)
    algo.setup(fed)
    evaluator, seen = Evaluator(), []
    for round_ in (1, 2, 3):
        algo.run_round(round_, fed, StepRunner("cpu"), CommunicationLedger())
        metrics = evaluator.evaluate(fed)
        assert_metrics(metrics, fed)
        seen.append(metrics["server_acc/global"])
    assert fed.server[GLOBAL] is not None and len(set(seen)) > 1  # the server model's accuracy moved

