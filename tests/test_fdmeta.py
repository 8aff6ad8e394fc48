"""FDmeta (Liu, Zhang, Song, Letaief, ICC 2022, arXiv 2203.06900: the federated distillation meta-algorithm, with
FedORION's global server model): the pure functions on hand cases, one round replayed by hand in float64, who moves,
the ledger, a CLI run of the shipped config, an exact resume.

The replay writes every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from test_resume import assert_resumed_run_equals_uninterrupted
from test_scaffold import assert_close, hand_batches
from test_server_baselines import local_sgd
from torch import Tensor, nn

from lit_fl.algorithms import FDmeta
from lit_fl.algorithms.fdmeta import GLOBAL, aggregate_logits, public_sample
from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.ledger import MB, CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
#: float32 weights against a float64 replay of a few dozen steps on weights of magnitude <= 1: float32's relative
#: precision (6e-8) times a few dozen rounded operations per weight, with a margin of 10 (as tests/test_scaffold.py)
ATOL = 1e-5
POOL = ("cnn_bn_4_8", "cnn_8")  # heterogeneous, one with BatchNorm (eval-mode logits, running statistics)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


def public_federation(num_clients: int = 4, server_fraction: float = 0.2) -> Federation:
    """``num_clients`` clients over 400 synthetic 1x8x8 images of 4 classes, ``server_fraction`` held out as the
    public data; clients of one architecture initialised independently (FDmeta's default)."""
    options = {"num_classes": 4, "input_shape": (1, 8, 8), "num_train": 400, "num_test": 100}
    data = DataConfig(dataset="synthetic", num_clients=num_clients, partition="dirichlet", beta=0.5, options=options,
                      server_fraction=server_fraction)
    dataset = load_dataset("synthetic", seed=0, **options)
    return build_federation(dataset, data, ModelsConfig(pool=list(POOL), same_init=False), 0)


# -- the pure functions by hand ----------------------------------------------------------------------------------


def test_aggregate_logits_is_the_weighted_mean() -> None:
    """``z_1 = [[1, 2], [0, -4]]``, ``z_2 = [[3, 6], [4, 0]]`` with weights 1 and 3: ``(z_1 + 3 z_2) / 4 =
    [[2.5, 5], [3, -1]]``; equal weights give the plain mean ``[[2, 4], [2, -2]]``; the dtype is the inputs'."""
    z1 = torch.tensor([[1.0, 2.0], [0.0, -4.0]])
    z2 = torch.tensor([[3.0, 6.0], [4.0, 0.0]])
    assert torch.equal(aggregate_logits([z1, z2], [1.0, 3.0]), torch.tensor([[2.5, 5.0], [3.0, -1.0]]))
    assert torch.equal(aggregate_logits([z1, z2], [7.0, 7.0]), torch.tensor([[2.0, 4.0], [2.0, -2.0]]))
    assert aggregate_logits([z1], [2.0]).dtype == torch.float32 and torch.equal(aggregate_logits([z1], [2.0]), z1)
    for logits, weights in (([], []), ([z1], [1.0, 2.0]), ([z1, z2], [0.0, 0.0]), ([z1, z2], [-1.0, 2.0])):
        with pytest.raises(ValueError):
            aggregate_logits(logits, weights)


def test_public_sample_draws_distinct_sorted_indices_or_takes_all() -> None:
    """None or a size >= the public set: all indices, no draw; else ``size`` distinct sorted indices, the draw of
    ``rng.choice(n, size, replace=False)``."""
    rng = np.random.default_rng(5)
    state = copy.deepcopy(rng.bit_generator.state)
    assert public_sample(6, None, rng).tolist() == [0, 1, 2, 3, 4, 5]
    assert public_sample(6, 6, rng).tolist() == [0, 1, 2, 3, 4, 5]
    assert rng.bit_generator.state == state  # no draw
    got = public_sample(10, 4, rng)
    again = np.random.default_rng(5)
    assert got.tolist() == sorted(again.choice(10, size=4, replace=False).tolist())
    assert len(set(got.tolist())) == 4 and got.tolist() == sorted(got.tolist())
    with pytest.raises(ValueError):
        public_sample(0, None, rng)




# -- (a) one round by hand -------------------------------------------------------------------------------------


def hand_soft_ce(target: Tensor, student: Tensor, t: float) -> Tensor:
    """``-T^2 mean_x sum_c softmax(target / T)_c log softmax(student / T)_c``."""
    p = torch.softmax(target / t, dim=1)
    return -(p * torch.log_softmax(student / t, dim=1)).sum(dim=1).mean() * t * t


def hand_distill(model: nn.Module, x: Tensor, z: Tensor, batch: int, epochs: int, generator: torch.Generator,
                 lr: float, momentum: float, weight_decay: float, t: float) -> None:
    """Steps 6 and 7 written out: each epoch a fresh permutation of the public subset from ``generator``, batches
    of ``batch``, heavy-ball SGD (``d = g + wd w``, ``b = d`` then ``m b + d``, ``w <- w - lr b``) on the soft
    cross-entropy, the model in train mode."""
    params = list(model.parameters())
    buffers: list[Tensor | None] = [None] * len(params)
    model.train()
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(order), batch):
            idx = order[start:start + batch]
            grads = torch.autograd.grad(hand_soft_ce(z[idx], model(x[idx]), t), params)
            with torch.no_grad():
                for k, (p, g) in enumerate(zip(params, grads)):
                    d = g + weight_decay * p
                    buffers[k] = d.clone() if buffers[k] is None else momentum * buffers[k] + d
                    p -= lr * buffers[k]


def test_round_is_the_meta_algorithm_by_hand() -> None:
    """``|S| = 2`` of ``N = 4`` heterogeneous clients, a public subset of 50 of the 80 held-out images, ``T = 2``,
    logits weighted by the clients' sample counts: local SGD (2 epochs of 16, momentum 0.9, weight decay 0.01,
    lr 0.05), eval-mode logits on the subset, ``z = sum n_k z_k / sum n_k``, the server model's 2 epochs of 16 on
    ``softmax(z / T)`` (SGD lr 0.03, momentum 0.5, weight decay 0.001), each client's 2 digest epochs of 16 on the
    same targets at its SGD settings; all in float64, from the round's draws."""
    lr, momentum, wd, batch, t = 0.05, 0.9, 0.01, 16, 2.0
    s_lr, s_momentum, s_wd, s_batch = 0.03, 0.5, 0.001, 16
    fed = public_federation()
    algo = FDmeta(client_fraction=0.5, public_size=50, aggregation="samples", temperature=t, distill_epochs=2,
                  server_epochs=2, server_batch_size=s_batch, server_lr=s_lr, server_momentum=s_momentum,
                  server_weight_decay=s_wd, local_epochs=2, batch_size=batch, lr=lr, momentum=momentum,
                  weight_decay=wd)
    algo.setup(fed)
    server = fed.server[GLOBAL]
    with torch.no_grad():  # the server model differs from every client's
        for p in server.parameters():
            p.mul_(0.9).add_(0.01)
    g = copy.deepcopy(server).double()
    g_start = copy.deepcopy(g)
    clients = {c.id: copy.deepcopy(c.model).double() for c in fed.clients}
    selection = copy.deepcopy(fed.rng.selection.bit_generator.state)
    drawn = copy.deepcopy(fed.rng.algorithm.bit_generator.state)
    order = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())

    rng = np.random.default_rng()
    rng.bit_generator.state = selection
    selected = sorted(int(n) for n in rng.choice(4, size=2, replace=False))
    assert list(result.senders) == selected
    rng.bit_generator.state = drawn
    subset = np.sort(rng.choice(len(fed.proxy), size=50, replace=False))
    x = fed.proxy[torch.from_numpy(subset)].double()
    generator = torch.Generator()
    generator.set_state(order)

    logits, sizes = [], []
    for cid in selected:  # 3. local update, 4. logits in eval mode
        client = fed.clients[cid]
        batches = hand_batches(fed, client.train_idx, batch, 2, generator)
        assert len(batches) >= 4  # momentum matters
        local_sgd("ServerFedAvg", clients[cid], batches, lr, momentum, wd)
        with torch.no_grad():
            logits.append(copy.deepcopy(clients[cid]).eval()(x))
        sizes.append(client.num_train)
    assert sizes[0] != sizes[1]  # the weights matter
    z = (sizes[0] * logits[0] + sizes[1] * logits[1]) / (sizes[0] + sizes[1])  # 5.
    hand_distill(g, x, z, s_batch, 2, generator, s_lr, s_momentum, s_wd, t)  # 6.
    for cid in selected:  # 7.
        hand_distill(clients[cid], x, z, batch, 2, generator, lr, momentum, wd, t)

    for key, value in g.state_dict().items():
        assert_close(server.state_dict()[key], value, ATOL, f"server {key}")
    moved = max(float((a - b).detach().abs().max()) for a, b in zip(g.parameters(), g_start.parameters()))
    assert moved > 100 * ATOL  # the server model moved far more than the tolerance
    for cid in range(4):
        want = clients[cid].state_dict()
        for key, value in fed.clients[cid].model.state_dict().items():
            if value.is_floating_point():
                assert_close(value, want[key], ATOL, f"client {cid} {key}")
            else:
                assert torch.equal(value, want[key]), (cid, key)
    assert result.extra["kd_loss"] > 0 and result.extra["distill_loss"] > 0


# -- (b) who moves, and the public labels are never read ------------------------------------------------------------


def test_unsampled_clients_keep_their_models_and_public_labels_are_unread() -> None:
    """Two rounds on 5 clients at 40%: every client outside ``S_t`` holds bit for bit what it held before, every
    client of ``S_t`` and the server model something else. The same two rounds with the public images' labels
    scrambled give bit for bit the same models (the public data is unlabeled)."""
    feds = [public_federation(num_clients=5) for _ in range(2)]
    idx = feds[1].server_idx
    feds[1].data.train_y[idx] = (feds[1].data.train_y[idx] + 1) % 4
    for fed in feds:
        algo = FDmeta(client_fraction=0.4, local_epochs=1, batch_size=16, lr=0.05, server_epochs=1)
        algo.setup(fed)
        for round_ in (1, 2):
            before = [copy.deepcopy(c.model.state_dict()) for c in fed.clients]
            server_before = copy.deepcopy(fed.server[GLOBAL].state_dict())
            result = algo.run_round(round_, fed, cpu(), CommunicationLedger())
            assert len(result.senders) == 2 and result.num_participants == 2
            for client, old in zip(fed.clients, before):
                same = all(torch.equal(client.model.state_dict()[k], v) for k, v in old.items())
                assert same == (client.id not in result.senders), (round_, client.id)
            assert not all(torch.equal(fed.server[GLOBAL].state_dict()[k], v) for k, v in server_before.items())
    models = [[c.model for c in f.clients] + [f.server[GLOBAL]] for f in feds]
    for a, b in zip(*models):
        for key, value in a.state_dict().items():
            assert torch.equal(b.state_dict()[key], value), key


# -- (c) the ledger ---------------------------------------------------------------------------------------------


def test_ledger_records_logits_up_and_the_aggregate_down_per_sampled_client() -> None:
    """Up: each sampled client's ``|P_t| x C`` float32 logits; down: the aggregated logits, the same size; no
    model ever moves."""
    fed = public_federation(num_clients=5)
    algo = FDmeta(client_fraction=0.6, public_size=30, local_epochs=1, batch_size=1000, server_epochs=1)
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, cpu(), ledger)
    assert len(result.senders) == 3
    logits_mb = 30 * 4 * 4 / MB  # 30 samples x 4 classes x 4 bytes
    expected = [(cid, -1) for cid in result.senders] + [(-1, cid) for cid in result.senders]
    assert [(s, t) for s, t, _ in ledger.transfers] == expected
    assert all(mb == pytest.approx(logits_mb, rel=1e-12) for _, _, mb in ledger.transfers)
    assert ledger.round_sent_mb == pytest.approx(3 * logits_mb, rel=1e-12)
    assert ledger.round_returned_mb == pytest.approx(3 * logits_mb, rel=1e-12)
    assert ledger.round_mb == pytest.approx(6 * logits_mb, rel=1e-12)


# -- (d) the shipped config --------------------------------------------------------------------------------------


def test_shipped_config_learns_in_three_rounds(tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/fdmeta.yaml --rounds 3`` with 2 local epochs instead of 10 (time):
    the server model (``server_acc/global``) is far above chance (10 classes) and rises every round."""
    config = ROOT / "experiments" / "mnist5k" / "fdmeta.yaml"
    result = run_cli("fit", "--config", config, "--rounds", "3", "--algorithm.local_epochs", "2",
                     "--logger.wandb", "false", "--logger.progress", "false", "--run_dir", tmp_path, "--name", "s")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "s" / "metrics.csv")
    acc = [row["server_acc/global"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.3 and acc[0] < acc[1] < acc[2], acc
    assert all(row["num_participants"] == 3 for row in rows)  # 30% of 10 clients
    assert json.loads((tmp_path / "s" / "summary.json").read_text())["status"] == "completed"


# -- (e) resume -------------------------------------------------------------------------------------------------


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, client models, the server model and the streams equal an
    uninterrupted 3-round run exactly."""
    config = tiny_config("FDmeta", rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "public_size": 40, "local_epochs": 1, "lr": 0.05,
                                        "server_epochs": 2, "server_lr": 0.01}
    config["data"]["server_fraction"] = 0.2
    config["models"]["pool"] = list(POOL)
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
    assert read_metrics(full / "metrics.csv")[-1]["server_acc/global"] > 0.25  # 4 classes: above chance
