"""Evaluation: the SPEC's global/local/per-architecture accuracy, and only changed models re-evaluated."""

from __future__ import annotations

import pytest
import torch
from federations import tiny_federation

from lit_fl.algorithms import DFML
from lit_fl.federation.evaluation import Evaluator
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.steps import StepRunner


def test_global_accuracy_is_the_mean_over_all_clients_on_the_whole_test_set() -> None:
    fed = tiny_federation(num_clients=4, pool=("cnn_4", "cnn_8"))
    evaluator = Evaluator()
    metrics = evaluator.evaluate(fed)
    per_client = []
    for c in fed.clients:
        with torch.no_grad():
            c.model.eval()
            per_client.append((c.model(fed.data.test_x).argmax(1) == fed.data.test_y).float().mean().item())
    assert metrics["global_acc"] == pytest.approx(sum(per_client) / 4)
    assert metrics["global_acc_regular"] == metrics["global_acc"]  # no peak models yet
    assert metrics["acc/cnn_4"] == pytest.approx((per_client[0] + per_client[1]) / 2)
    assert metrics["acc/cnn_8"] == pytest.approx((per_client[2] + per_client[3]) / 2)
    own = []
    for c in fed.clients:
        x, y = fed.data.train_x[c.val_idx], fed.data.train_y[c.val_idx]
        with torch.no_grad():
            own.append((c.model(x).argmax(1) == y).float().mean().item())
    assert metrics["local_acc"] == pytest.approx(sum(own) / 4)


def test_only_changed_models_are_re_evaluated() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=0.34)  # aggregator + 2 senders
    algo.setup(fed)
    evaluator = Evaluator()
    evaluator.evaluate(fed)
    # six clients, one architecture, one initialisation, peak = regular model: one set of weights, one pass
    assert evaluator.evaluated == 1
    evaluator.evaluate(fed)
    assert evaluator.evaluated == 1  # nothing changed, nothing re-evaluated
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    evaluator.evaluated = 0
    metrics = evaluator.evaluate(fed)
    # 3 participants changed; their peaks were copied from the new regular models (shared entries)
    assert evaluator.evaluated == 3
    assert metrics["global_acc"] == pytest.approx(metrics["global_acc_regular"])
    assert len({result.aggregator, *result.senders}) == 3


def test_peak_and_regular_are_reported_separately() -> None:
    fed = tiny_federation(num_clients=3, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=1.0, lr=0.1)
    algo.setup(fed)
    for c in fed.clients:
        c.alpha_peak = 2.0  # above any alpha: peaks stay the initial models
    algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    metrics = Evaluator().evaluate(fed)
    initial = tiny_federation(num_clients=3, pool=("cnn_4",))
    assert metrics["global_acc"] == pytest.approx(Evaluator().evaluate(initial)["global_acc"])
    assert metrics["global_acc_regular"] != metrics["global_acc"]


def test_vanilla_transfer_updates_and_returns_nothing_but_the_aggregator() -> None:
    fed = tiny_federation(num_clients=4, pool=("cnn_4",))
    algo = DFML(mutual_epochs=1, sender_fraction=1.0, mutual=False)
    algo.setup(fed)
    ledger = CommunicationLedger()
    versions = [c.version for c in fed.clients]
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    assert ledger.round_returned_mb == 0.0 and ledger.round_sent_mb > 0.0
    # everybody trained locally (+1); only the aggregator also learned at the aggregator (+1 more)
    bumps = [c.version - v for c, v in zip(fed.clients, versions)]
    assert bumps[result.aggregator] == 2
    assert all(b == 1 for n, b in enumerate(bumps) if n != result.aggregator)
