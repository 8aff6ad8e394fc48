"""DS-FL (Itahara et al., IEEE TMC 2023, arXiv 2008.06180): entropy reduction aggregation by hand, one round
replayed in float64 (update, prediction, ERA, the global model's and the clients' distillation), the ledger's soft
labels, a CLI run of the shipped config and an exact resume.

The replay writes every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from public_federations import (
    ATOL,
    assert_close,
    client_batches,
    drawn_selection,
    hand_ce,
    hand_kl,
    momentum_sgd,
    public_federation,
    shuffled_batches,
)
from test_resume import assert_resumed_run_equals_uninterrupted

from lit_fl.algorithms import DSFL
from lit_fl.algorithms.dsfl import GLOBAL, era
from lit_fl.federation.ledger import MB, CommunicationLedger
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


def test_era_sharpens_the_mean_of_the_soft_labels() -> None:
    """``p_1 = (0.5, 0.5)``, ``p_2 = (0.9, 0.1)``: mean ``(0.7, 0.3)``; at T = 0.1 the scores are ``(7, 3)`` and the
    soft label ``(1, e^-4) / (1 + e^-4)``; at T = 1 ``(e^0.7, e^0.3) / (e^0.7 + e^0.3)``; a one-hot mean stays the
    most likely class with lower entropy than the mean."""
    p1 = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    p2 = torch.tensor([[0.9, 0.1]], dtype=torch.float64)
    sharp = era([p1, p2], 0.1)
    assert sharp[0, 0].item() == pytest.approx(1 / (1 + math.exp(-4)), rel=1e-12)
    assert sharp[0, 1].item() == pytest.approx(math.exp(-4) / (1 + math.exp(-4)), rel=1e-12)
    soft = era([p1, p2], 1.0)
    assert soft[0, 0].item() == pytest.approx(math.exp(0.7) / (math.exp(0.7) + math.exp(0.3)), rel=1e-12)
    mean = (p1 + p2) / 2

    def entropy(p: torch.Tensor) -> float:
        return float(-(p * p.log()).sum())

    assert entropy(sharp) < entropy(mean)
    three = torch.tensor([[0.2, 0.3, 0.5]], dtype=torch.float64)
    got = era([three], 0.5)
    want = torch.exp(three / 0.5) / torch.exp(three / 0.5).sum()
    assert torch.allclose(got, want, rtol=1e-12, atol=0)
    with pytest.raises(ValueError):
        era([], 0.1)


def test_round_is_ds_fl_by_hand() -> None:
    """``|S| = 2`` of 4 clients (two architectures): update (2 epochs CE), softmax outputs on the 100 public
    samples, ERA at T = 0.5; the global model (a copy of the smallest architecture's initialisation) distils them
    for 2 epochs in batches of 64 at lr 0.02 momentum 0.5, then each client for 2 epochs in batches of 32 (KL), all
    by heavy-ball SGD written out (clients: lr 0.05, momentum 0.9, weight decay 0.01)."""
    lr, momentum, wd, batch, temperature = 0.05, 0.9, 0.01, 32, 0.5
    fed = public_federation()
    algo = DSFL(client_fraction=0.5, temperature=temperature, distill_epochs=2, server_epochs=2, server_lr=0.02,
                server_momentum=0.5, server_batch_size=64, local_epochs=2, batch_size=batch, lr=lr,
                momentum=momentum, weight_decay=wd)
    algo.setup(fed)
    server_start = copy.deepcopy(fed.server[GLOBAL]).double()
    smallest = min({c.arch for c in fed.clients}, key=lambda a: sum(
        p.numel() for p in next(c for c in fed.clients if c.arch == a).model.parameters()))
    first = next(c for c in fed.clients if c.arch == smallest)
    assert all(torch.equal(a, b) for a, b in zip(fed.server[GLOBAL].state_dict().values(),
                                                 first.model.state_dict().values()))
    start = [copy.deepcopy(c.model).double() for c in fed.clients]
    selection = copy.deepcopy(fed.rng.selection.bit_generator.state)
    order = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())

    selected = drawn_selection(selection, 4, 2)
    assert list(result.senders) == selected
    generator = torch.Generator()
    generator.set_state(order)
    x = fed.proxy.double()
    models = {k: copy.deepcopy(start[k]) for k in selected}
    for k in selected:  # update
        momentum_sgd(models[k], client_batches(fed, fed.clients[k].train_idx, batch, 2, generator), hand_ce, lr,
                     momentum, wd)
    probs = [torch.softmax(models[k](x).detach(), dim=1) for k in selected]  # no BatchNorm: eval = train
    mean = sum(probs) / len(probs)
    target = torch.exp(mean / temperature) / torch.exp(mean / temperature).sum(1, keepdim=True)  # ERA
    momentum_sgd(server_start, shuffled_batches(x, target, 64, 2, generator), hand_kl, 0.02, 0.5, 0.0)
    for k in selected:  # distillation
        momentum_sgd(models[k], shuffled_batches(x, target, batch, 2, generator), hand_kl, lr, momentum, wd)
    for key, value in server_start.state_dict().items():
        assert_close(fed.server[GLOBAL].state_dict()[key], value, ATOL, f"global {key}")
    for k in range(4):
        want = models[k] if k in selected else start[k]
        for key, value in want.state_dict().items():
            assert_close(fed.clients[k].model.state_dict()[key], value, ATOL, f"client {k} {key}")
    moved = max(float((a - b).detach().abs().max()) for a, b in zip(fed.server[GLOBAL].parameters(),
                                                                    first.model.parameters()))
    assert moved > 1e3 * ATOL or first.id in selected


def test_ledger_records_the_soft_labels_both_ways_and_no_model() -> None:
    """Up: each sampled client's ``P x classes`` float32 softmax outputs; down: the ERA soft labels, same size."""
    fed = public_federation()
    algo = DSFL(client_fraction=0.75, distill_epochs=1, server_epochs=1, local_epochs=1)
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, cpu(), ledger)
    size = 100 * 4 * 4 / MB  # 100 public samples x 4 classes x 4 bytes
    selected = list(result.senders)
    assert len(selected) == 3
    assert [(s, t) for s, t, _ in ledger.transfers] == [(k, -1) for k in selected] + [(-1, k) for k in selected]
    assert all(mb == pytest.approx(size, rel=1e-12) for _, _, mb in ledger.transfers)
    assert ledger.round_sent_mb == pytest.approx(3 * size, rel=1e-12)
    assert ledger.round_returned_mb == pytest.approx(3 * size, rel=1e-12)


def test_shipped_config_learns_in_three_rounds(tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/dsfl.yaml --rounds 3`` (local, distillation and server epochs cut
    to 1 for time): the server model (``server_acc/global``) is above chance (10 classes) and rises every round."""
    result = run_cli("fit", "--config", ROOT / "experiments" / "mnist5k" / "dsfl.yaml", "--rounds", "3",
                     "--algorithm.init_args.local_epochs", "1", "--algorithm.init_args.distill_epochs", "1",
                     "--algorithm.init_args.server_epochs", "1", "--logger.wandb", "false", "--logger.progress",
                     "false", "--run_dir", tmp_path, "--name", "d")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "d" / "metrics.csv")
    acc = [row["server_acc/global"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.1 and acc[0] < acc[1] < acc[2], acc
    assert all(row["num_participants"] == 3 for row in rows)  # 30% of 10 clients
    assert json.loads((tmp_path / "d" / "summary.json").read_text())["status"] == "completed"


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, the clients' and the global model, the streams and the
    ledger equal an uninterrupted 3-round run exactly."""
    config = tiny_config("DSFL", rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "public_size": 50, "local_epochs": 1,
                                        "distill_epochs": 1, "server_epochs": 1, "lr": 0.05}
    config["data"]["server_fraction"] = 0.25
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
    assert "server_acc/global" in expected[-1]
