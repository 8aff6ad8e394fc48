"""FedKEMF (Yu et al., arXiv 2208.07978): the ensemble target and the knowledge-network fusion on hand cases; one
round replayed by hand in float64 (DML between local model and knowledge network, the sample-weighted average, the
ensemble distillation on public batches); the ledger (knowledge networks only); the shipped config; an exact resume.

The replays write every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from test_ktpfl import ATOL, hand_ce, permuted, public_federation
from test_resume import assert_resumed_run_equals_uninterrupted
from torch import Tensor

from lit_fl.algorithms import FedKEMF
from lit_fl.algorithms.fedkemf import GLOBAL, ensemble_soft_target, fuse_knowledge
from lit_fl.federation.ledger import MB, CommunicationLedger, model_megabytes
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def test_ensemble_target_by_hand() -> None:
    """Weights 1 and 3 -> 1/4 and 3/4; logits (0, 0) and (ln 3, 0) at T = 1: softmax (1/2, 1/2) and (3/4, 1/4), so
    the target is (1/8 + 9/16, 1/8 + 3/16) = (11/16, 5/16); at T = 2 the second is softmax(ln 3 / 2, 0)."""
    z1 = torch.zeros(1, 2, dtype=torch.float64)
    z2 = torch.tensor([[np.log(3.0), 0.0]], dtype=torch.float64)
    got = ensemble_soft_target([z1, z2], [1.0, 3.0], 1.0)
    assert torch.allclose(got, torch.tensor([[11 / 16, 5 / 16]], dtype=torch.float64), atol=1e-15)
    r = np.sqrt(3.0)
    got2 = ensemble_soft_target([z1, z2], [1.0, 3.0], 2.0)
    assert torch.allclose(got2, torch.tensor([[1 / 8 + 0.75 * r / (r + 1), 1 / 8 + 0.75 / (r + 1)]],
                                             dtype=torch.float64), atol=1e-15)


def test_fusion_is_the_sample_weighted_average() -> None:
    """``(1 * a + 3 * b) / 4`` per tensor, weights 1 and 3."""
    a = {"w": torch.tensor([1.0, 2.0]), "b": torch.tensor([0.0])}
    b = {"w": torch.tensor([5.0, 6.0]), "b": torch.tensor([4.0])}
    got = fuse_knowledge([a, b], [1.0, 3.0])
    assert torch.allclose(got["w"], torch.tensor([4.0, 5.0])) and torch.allclose(got["b"], torch.tensor([3.0]))


def hand_kl_peer(z_own: Tensor, z_peer: Tensor) -> Tensor:
    """``mean_b KL(softmax(z_peer) || softmax(z_own))`` with the peer detached."""
    p = torch.softmax(z_peer.detach(), dim=1)
    log_q = z_own - torch.logsumexp(z_own, dim=1, keepdim=True)
    return (p * (torch.log(p) - log_q)).sum(1).mean()


def test_round_is_dml_average_and_ensemble_distillation_by_hand() -> None:
    """One round, ``|S| = 2`` of 4 clients, plain SGD: by hand in float64, DML on each client's batches (both
    models' logits first, ``CE + KL(p_peer || p_own)`` each, one SGD step each), the knowledge networks averaged with
    weights ``n_i``, then 2 epochs of ``T^2 CE(sum_i w_i softmax(f_i / T), f_g / T)`` SGD on public batches."""
    lr, server_lr, temp, batch, server_batch = 0.05, 0.1, 2.0, 32, 64
    fed = public_federation()
    algo = FedKEMF(client_fraction=0.5, local_epochs=1, server_epochs=2, server_batch_size=server_batch,
                   server_lr=server_lr, server_momentum=0.0, temperature=temp, lr=lr, momentum=0.0, batch_size=batch)
    algo.setup(fed)
    assert algo.global_arch == "cnn_8"  # the smaller of the pool by parameter count
    server = fed.server[GLOBAL]
    start = copy.deepcopy(server).double()
    models = [copy.deepcopy(c.model).double() for c in fed.clients]
    selection = copy.deepcopy(fed.rng.selection.bit_generator.state)
    order = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())

    rng = np.random.default_rng()
    rng.bit_generator.state = selection
    chosen = sorted(int(n) for n in rng.choice(4, size=2, replace=False))
    assert list(result.senders) == chosen
    generator = torch.Generator()
    generator.set_state(order)
    x_all, y_all = fed.data.train_x.double(), fed.data.train_y
    nets = {}
    for cid in chosen:
        local, net = models[cid], copy.deepcopy(start)
        idx = fed.clients[cid].train_idx
        for x, y in permuted(x_all[idx], y_all[idx], batch, 1, generator):
            za, zb = local(x), net(x)
            la = hand_ce(za, y) + hand_kl_peer(za, zb)
            lb = hand_ce(zb, y) + hand_kl_peer(zb, za)
            ga = torch.autograd.grad(la, list(local.parameters()))
            gb = torch.autograd.grad(lb, list(net.parameters()))
            with torch.no_grad():
                for p, g in zip(local.parameters(), ga):
                    p -= lr * g
                for p, g in zip(net.parameters(), gb):
                    p -= lr * g
        nets[cid] = net
    weights = [float(fed.clients[c].num_train) for c in chosen]
    student = copy.deepcopy(start)
    with torch.no_grad():
        for name, p in student.named_parameters():
            p.copy_(sum(w * dict(nets[c].named_parameters())[name] for w, c in zip(weights, chosen)) / sum(weights))
    x_pub = fed.proxy.double()  # data.proxy: the held-out slice by default
    for x, _ in permuted(x_pub, torch.zeros(len(x_pub)), server_batch, 2, generator):
        with torch.no_grad():
            target = sum(w / sum(weights) * torch.softmax(nets[c](x) / temp, dim=1) for w, c in zip(weights, chosen))
        zs = student(x) / temp
        loss = -(target * (zs - torch.logsumexp(zs, dim=1, keepdim=True))).sum(1).mean() * temp**2
        grads = torch.autograd.grad(loss, list(student.parameters()))
        with torch.no_grad():
            for p, g in zip(student.parameters(), grads):
                p -= server_lr * g
    for key, value in student.state_dict().items():
        torch.testing.assert_close(server.state_dict()[key].double(), value, atol=ATOL, rtol=0, msg=key)
    moved = max(float((a - b).detach().abs().max()) for a, b in zip(student.parameters(), start.parameters()))
    assert moved > 1e3 * ATOL  # the server model moved visibly
    for cid in range(4):
        for key, value in models[cid].state_dict().items():
            torch.testing.assert_close(fed.clients[cid].model.state_dict()[key].double(), value, atol=ATOL, rtol=0,
                                       msg=key)


def test_ledger_moves_the_knowledge_network_only() -> None:
    """Per selected client: the knowledge network down, then up; the local models never travel."""
    fed = public_federation()
    algo = FedKEMF(client_fraction=0.5, local_epochs=1, server_epochs=1)
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    mb = model_megabytes(fed.server[GLOBAL])
    assert mb < min(model_megabytes(c.model) for c in fed.clients if c.arch == "cnn_4_8")
    assert mb == pytest.approx(sum(p.numel() * 4 for p in fed.server[GLOBAL].parameters()) / MB)
    want = [(-1, cid) for cid in result.senders] + [(cid, -1) for cid in result.senders]
    assert [(s, t) for s, t, _ in ledger.transfers] == want
    assert all(m == pytest.approx(mb, rel=1e-12) for _, _, m in ledger.transfers)


def test_shipped_config_learns_in_three_rounds(tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/fedkemf.yaml --rounds 3``: the server's knowledge network
    (``server_acc/global``) is far above chance (10 classes) and rises every round."""
    result = run_cli("fit", "--config", ROOT / "experiments" / "mnist5k" / "fedkemf.yaml", "--rounds", "3",
                     "--logger.wandb", "false", "--logger.progress", "false", "--run_dir", tmp_path, "--name", "f")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "f" / "metrics.csv")
    acc = [row["server_acc/global"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.3 and acc[0] < acc[1] < acc[2], acc
    assert all(row["num_participants"] == 3 for row in rows)
    assert json.loads((tmp_path / "f" / "summary.json").read_text())["status"] == "completed"


def test_resume_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, client models and the knowledge network equal an
    uninterrupted 3-round run exactly."""
    config = tiny_config("FedKEMF", rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "local_epochs": 1, "server_epochs": 1, "lr": 0.05}
    config["data"]["server_fraction"] = 0.2
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
