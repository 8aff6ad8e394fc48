"""FedMD (Li & Wang 2019, arXiv 1910.03581), Algorithm 1: the consensus by hand, one round replayed in float64
(communicate, aggregate, digest with the L1 distance on logits, revisit), the ledger's logits, a CLI run of the
shipped config and an exact resume.

The replay writes every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
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
    hand_l1,
    momentum_sgd,
    public_federation,
    shuffled_batches,
)
from test_resume import assert_resumed_run_equals_uninterrupted

from lit_fl.algorithms import FedMD
from lit_fl.algorithms.fedmd import consensus
from lit_fl.federation.ledger import MB, CommunicationLedger
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


def test_consensus_is_the_mean_of_the_class_scores() -> None:
    """Two clients, two public samples, two classes: ``(f_1 + f_2) / 2`` entry by entry; one client: itself."""
    f1 = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    f2 = torch.tensor([[3.0, 0.0], [5.0, -4.0]])
    assert torch.equal(consensus([f1, f2]), torch.tensor([[2.0, 1.0], [4.0, 0.0]]))
    assert torch.equal(consensus([f1]), f1)
    f3 = torch.tensor([[-1.0, 1.0], [1.0, 3.0]])
    assert torch.allclose(consensus([f1, f2, f3]), torch.tensor([[1.0, 1.0], [3.0, 1.0]]))
    with pytest.raises(ValueError):
        consensus([])


def test_round_is_algorithm_1_by_hand() -> None:
    """``|S| = 2`` of 4 clients (two architectures): each computes its logits on the 100 public samples, the
    consensus is their mean, each digests it for 2 epochs (L1 on logits, batches of 32) and revisits its private
    data for 2 epochs (CE), both by heavy-ball SGD (lr 0.05, momentum 0.9, weight decay 0.01); the other clients
    are untouched."""
    lr, momentum, wd, batch = 0.05, 0.9, 0.01, 32
    fed = public_federation()
    algo = FedMD(client_fraction=0.5, digest_epochs=2, local_epochs=2, batch_size=batch, lr=lr, momentum=momentum,
                 weight_decay=wd)
    algo.setup(fed)
    start = [copy.deepcopy(c.model).double() for c in fed.clients]
    selection = copy.deepcopy(fed.rng.selection.bit_generator.state)
    order = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())

    selected = drawn_selection(selection, 4, 2)
    assert list(result.senders) == selected
    generator = torch.Generator()
    generator.set_state(order)
    x = fed.proxy.double()
    assert len(x) == 100
    scores = [start[k](x).detach() for k in selected]  # CNNs without BatchNorm or dropout: eval = train
    target = sum(scores) / len(scores)
    models = {k: copy.deepcopy(start[k]) for k in selected}
    for k in selected:  # digest: every work's batches are drawn before the revisit's
        momentum_sgd(models[k], shuffled_batches(x, target, batch, 2, generator), hand_l1, lr, momentum, wd)
    for k in selected:  # revisit
        batches = client_batches(fed, fed.clients[k].train_idx, batch, 2, generator)
        momentum_sgd(models[k], batches, hand_ce, lr, momentum, wd)
    for k in range(4):
        want = models[k] if k in selected else start[k]
        for key, value in want.state_dict().items():
            assert_close(fed.clients[k].model.state_dict()[key], value, ATOL, f"client {k} {key}")
    moved = [float((a - b).detach().abs().max()) for a, b in zip(models[selected[0]].parameters(),
                                                        start[selected[0]].parameters())]
    assert max(moved) > 1e3 * ATOL
    assert result.extra["public_size"] == 100.0 and result.num_participants == 2


def test_ledger_records_the_logits_both_ways_and_no_model() -> None:
    """Up: each sampled client's ``P x classes`` float32 logits; down: the consensus, of the same size. No weights."""
    fed = public_federation()
    algo = FedMD(client_fraction=0.75, digest_epochs=1, local_epochs=1)
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, cpu(), ledger)
    size = 100 * 4 * 4 / MB  # 100 public samples x 4 classes x 4 bytes
    selected = list(result.senders)
    assert len(selected) == 3
    expected = [(k, -1) for k in selected] + [(-1, k) for k in selected]
    assert [(s, t) for s, t, _ in ledger.transfers] == expected
    assert all(mb == pytest.approx(size, rel=1e-12) for _, _, mb in ledger.transfers)
    assert ledger.round_sent_mb == pytest.approx(3 * size, rel=1e-12)
    assert ledger.round_returned_mb == pytest.approx(3 * size, rel=1e-12)


def test_public_subset() -> None:
    """``public_size`` draws that many distinct public samples a round."""
    fed = public_federation()
    algo = FedMD(client_fraction=0.5, public_size=40, digest_epochs=1, local_epochs=0)
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    assert algo.run_round(1, fed, cpu(), ledger).extra["public_size"] == 40.0
    assert ledger.transfers[0][2] == pytest.approx(40 * 4 * 4 / MB, rel=1e-12)


def test_shipped_config_learns_in_three_rounds(tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/fedmd.yaml --rounds 3`` (local epochs cut to 1 for time): the
    clients' mean test accuracy (global_acc) is above chance (10 classes) and rises every round."""
    result = run_cli("fit", "--config", ROOT / "experiments" / "mnist5k" / "fedmd.yaml", "--rounds", "3",
                     "--algorithm.init_args.local_epochs", "1", "--logger.wandb", "false", "--logger.progress",
                     "false", "--run_dir", tmp_path, "--name", "m")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "m" / "metrics.csv")
    acc = [row["global_acc"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.1 and acc[0] < acc[1] < acc[2], acc
    assert all(row["num_participants"] == 3 for row in rows)  # 30% of 10 clients
    assert json.loads((tmp_path / "m" / "summary.json").read_text())["status"] == "completed"


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, every client model, the streams and the ledger equal an
    uninterrupted 3-round run exactly (a public subset drawn each round)."""
    config = tiny_config("FedMD", rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "public_size": 50, "local_epochs": 1, "lr": 0.05}
    config["data"]["server_fraction"] = 0.25
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
