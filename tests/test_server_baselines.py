"""The server-based homogeneous baselines of FedORION's appendix D besides SCAFFOLD: FedAvg (McMahan et al. 2017,
arXiv 1602.05629, Algorithm 1), FedProx (Li et al. 2020, arXiv 1812.06127, Eq. 2) and FedNTD (Lee et al. 2022, arXiv
2106.03097, Eq. 5-7). Per method: one round replayed by hand in float64 (momentum-SGD steps on the written-out loss,
the sample-weighted average), who moves and who is left, the ledger, a CLI run of the shipped config, an exact
resume; and the not-true distillation loss on hand-computed cases.

The replays write every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from federations import tiny_federation
from test_resume import assert_resumed_run_equals_uninterrupted
from test_scaffold import assert_close, hand_batches, hand_ce
from torch import Tensor, nn

from lit_fl.algorithms import FedNTD, ServerFedAvg, ServerFedProx
from lit_fl.algorithms.server_fedavg import GLOBAL
from lit_fl.federation.ledger import MB, CommunicationLedger
from lit_fl.losses import not_true_kl
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics

BN_NET = "resnet18_2_2_4_4"  # a tiny pre-activation ResNet18: BatchNorm buffers in the average
ROOT = Path(__file__).resolve().parents[1]
#: float32 weights against a float64 replay of a few dozen steps on weights of magnitude <= 1: float32's relative
#: precision (6e-8) times a few dozen rounded operations per weight, with a margin of 10 (as tests/test_scaffold.py)
ATOL = 1e-5
MU, TAU, BETA = 0.3, 2.0, 0.7  # not the defaults, so that a default in place of the key shows

#: class name -> (the config file's name, the algorithm with the replay's keys)
METHODS: dict[str, Callable[..., ServerFedAvg]] = {
    "ServerFedAvg": lambda **kw: ServerFedAvg(**kw),
    "ServerFedProx": lambda **kw: ServerFedProx(mu=MU, **kw),
    "FedNTD": lambda **kw: FedNTD(tau=TAU, beta=BETA, **kw),
}

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


# -- the not-true distillation loss by hand -----------------------------------------------------------------------


def test_not_true_kl_on_hand_computed_cases() -> None:
    """Student ``[1, 2, 0]``, teacher ``[0, 1, 1]``, label 1: the not-true logits are ``[1, 0]`` and ``[0, 1]``, so
    ``q = (s, 1 - s)`` and ``p = (1 - s, s)`` with ``s = sigmoid(1 / tau)``, and ``KL(p || q) = (2s - 1) / tau``
    (``log(q_1 / q_2) = 1 / tau``): 0.4621172 at tau = 1, 0.1224593 at tau = 2. A sample whose not-true logits are
    uniform in both models has KL 0 whatever its true logit, and the true logit gets no gradient."""
    student = torch.tensor([[1.0, 2.0, 0.0], [5.0, 1.0, 1.0]], dtype=torch.float64, requires_grad=True)
    teacher = torch.tensor([[0.0, 1.0, 1.0], [-3.0, 2.0, 2.0]], dtype=torch.float64)
    target = torch.tensor([1, 0])
    for tau, want in ((1.0, 0.46211715726000974), (2.0, 0.12245933120185459)):
        s = 1 / (1 + math.exp(-1 / tau))
        assert (2 * s - 1) / tau == pytest.approx(want, rel=1e-15)
        got = not_true_kl(student, teacher, target, tau).detach()
        assert got.shape == (2,)
        assert float(got[0]) == pytest.approx(want, rel=1e-12)
        assert abs(float(got[1])) < 1e-15
    not_true_kl(student, teacher, target, 1.0).sum().backward()
    assert float(student.grad[0, 1]) == 0.0 and float(student.grad[1, 0]) == 0.0  # true classes: no gradient
    assert float(student.grad[0].abs().sum()) > 0.1
    batched = not_true_kl(student.detach().expand(3, 2, 3), teacher.expand(3, 2, 3), target.expand(3, 2), 2.0)
    assert batched.shape == (3, 2) and torch.equal(batched[2], not_true_kl(student.detach(), teacher, target, 2.0))


def hand_ntd(student: Tensor, teacher: Tensor, target: Tensor, tau: float) -> Tensor:
    """FedNTD Eq. 5-6 one sample at a time: the true class's column dropped, softmax at ``tau`` of both,
    ``sum p (log p - log q)``; mean over the batch."""
    losses = []
    for z, zg, y in zip(student, teacher, target.tolist()):
        keep = [c for c in range(len(z)) if c != y]
        log_q = torch.log_softmax(z[keep] / tau, dim=0)
        log_p = torch.log_softmax(zg[keep].detach() / tau, dim=0)
        losses.append((log_p.exp() * (log_p - log_q)).sum())
    return torch.stack(losses).mean()


def local_sgd(name: str, model: nn.Module, batches: list[tuple[Tensor, Tensor]], lr: float, momentum: float,
              weight_decay: float) -> None:
    """The method's ClientUpdate written out: heavy-ball SGD (``d = g + wd * w``, ``b = d`` then ``m b + d``,
    ``w <- w - lr b``) on CE, plus ``mu/2 ||w - w^t||^2`` (FedProx) or ``beta * L_NTD`` against the frozen received
    model in eval mode (FedNTD)."""
    start = copy.deepcopy(model).eval()
    params = list(model.parameters())
    anchors = [p.detach().clone() for p in params]
    buffers: list[Tensor | None] = [None] * len(params)
    model.train()
    for x, y in batches:
        logits = model(x)
        loss = hand_ce(logits, y)
        if name == "ServerFedProx":
            loss = loss + MU / 2 * sum(((p - a) ** 2).sum() for p, a in zip(params, anchors))
        elif name == "FedNTD":
            with torch.no_grad():
                teacher = start(x)
            loss = loss + BETA * hand_ntd(logits, teacher, y, TAU)
        grads = torch.autograd.grad(loss, params)
        with torch.no_grad():
            for k, (p, g) in enumerate(zip(params, grads)):
                d = g + weight_decay * p
                buffers[k] = d.clone() if buffers[k] is None else momentum * buffers[k] + d
                p -= lr * buffers[k]


# -- (a) one round by hand -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(METHODS))
def test_round_is_the_papers_round_by_hand(name: str) -> None:
    """``|S| = 2`` of ``N = 4`` BatchNorm ResNets, 2 epochs of batches of 32, momentum 0.9, weight decay 0.01, lr
    0.05: every sampled client starts at the server's ``w^t`` and makes the method's local steps (written out in
    float64); the server becomes ``sum_k n_k w_k / sum_k n_k`` over the sampled clients, buffers included."""
    lr, momentum, wd, epochs, batch = 0.05, 0.9, 0.01, 2, 32
    fed = tiny_federation(num_clients=4, pool=(BN_NET,))
    algo = METHODS[name](client_fraction=0.5, local_epochs=epochs, batch_size=batch, lr=lr, momentum=momentum,
                         weight_decay=wd)
    algo.setup(fed)
    server = fed.server[GLOBAL]
    with torch.no_grad():  # the server model differs from every client's: the clients must be overwritten by it
        for p in server.parameters():
            p.mul_(0.9).add_(0.01)
    x_start = copy.deepcopy(server).double()
    selection = copy.deepcopy(fed.rng.selection.bit_generator.state)
    order = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())

    rng = np.random.default_rng()
    rng.bit_generator.state = selection
    selected = sorted(int(n) for n in rng.choice(4, size=2, replace=False))
    assert list(result.senders) == selected
    generator = torch.Generator()
    generator.set_state(order)
    y_states, sizes = [], []
    for cid in selected:
        client = fed.clients[cid]
        batches = hand_batches(fed, client.train_idx, batch, epochs, generator)
        assert len(batches) >= 4  # momentum matters
        y = copy.deepcopy(x_start)
        local_sgd(name, y, batches, lr, momentum, wd)
        for key, value in y.state_dict().items():
            assert_close(client.model.state_dict()[key], value, ATOL, f"{name} w_{cid} {key}")
        y_states.append(y.state_dict())
        sizes.append(client.num_train)
    assert sizes[0] != sizes[1]  # the weights matter
    total = sum(sizes)
    for key, value in x_start.state_dict().items():
        got = server.state_dict()[key]
        if value.is_floating_point():  # parameters and BatchNorm running statistics: n_k-weighted
            assert_close(got, sum(n * s[key] for n, s in zip(sizes, y_states)) / total, ATOL, f"{name} w {key}")
        else:
            assert torch.equal(got, y_states[0][key]), key
    uniform = sum(s["features.norm.running_mean"] for s in y_states) / 2
    weighted = server.state_dict()["features.norm.running_mean"].double()
    assert (weighted - uniform).abs().max() > 1e3 * ATOL  # the sample weights are visible in the buffers too


# -- (b) who moves ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(METHODS))
def test_unsampled_clients_keep_their_models_and_the_server_moves(name: str) -> None:
    """Two rounds on 5 clients at 40%: after each, every client outside ``S_t`` holds bit for bit what it held
    before, every client of ``S_t`` holds something else, and the server model changed; with the method's extra
    term switched off (mu = 0, beta = 0) the round is ServerFedAvg's bit for bit."""
    fed = tiny_federation(num_clients=5, pool=("cnn_4_8",))
    algo = METHODS[name](client_fraction=0.4, local_epochs=1, batch_size=16, lr=0.05)
    algo.setup(fed)
    for round_ in (1, 2):
        before = [copy.deepcopy(c.model.state_dict()) for c in fed.clients]
        server_before = copy.deepcopy(fed.server[GLOBAL].state_dict())
        result = algo.run_round(round_, fed, cpu(), CommunicationLedger())
        assert len(result.senders) == 2
        for client, old in zip(fed.clients, before):
            same = all(torch.equal(client.model.state_dict()[k], v) for k, v in old.items())
            assert same == (client.id not in result.senders), (round_, client.id)
        assert not all(torch.equal(fed.server[GLOBAL].state_dict()[k], v) for k, v in server_before.items())

    off = {"ServerFedAvg": {}, "ServerFedProx": {"mu": 0.0}, "FedNTD": {"beta": 0.0}}[name]
    feds = [tiny_federation(num_clients=5, pool=("cnn_4_8",)) for _ in range(2)]
    algos = [type(algo)(client_fraction=0.4, local_epochs=1, batch_size=16, lr=0.05, **off),
             ServerFedAvg(client_fraction=0.4, local_epochs=1, batch_size=16, lr=0.05)]
    for f, a in zip(feds, algos):
        a.setup(f)
        a.run_round(1, f, cpu(), CommunicationLedger())
    for key, value in feds[1].server[GLOBAL].state_dict().items():
        assert torch.equal(feds[0].server[GLOBAL].state_dict()[key], value), key


# -- (c) the ledger ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(METHODS))
def test_ledger_records_one_model_down_and_up_per_sampled_client(name: str) -> None:
    """Down ``w^t`` to each sampled client, up its ``w_k``: one transfer of the model (parameters and buffers)
    each way per sampled client and nothing else (FedProx's anchor and FedNTD's teacher are the received model)."""
    fed = tiny_federation(num_clients=5, pool=(BN_NET,))
    algo = METHODS[name](client_fraction=0.6, local_epochs=1, batch_size=1000)  # one full batch each
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, cpu(), ledger)
    assert len(result.senders) == 3
    model = fed.server[GLOBAL]
    model_mb = sum(t.numel() * t.element_size() for t in (*model.parameters(), *model.buffers())) / MB
    expected = [(-1, cid) for cid in result.senders] + [(cid, -1) for cid in result.senders]
    assert [(s, t) for s, t, _ in ledger.transfers] == expected
    assert all(mb == pytest.approx(model_mb, rel=1e-12) for _, _, mb in ledger.transfers)
    assert ledger.round_sent_mb == pytest.approx(3 * model_mb, rel=1e-12)
    assert ledger.round_returned_mb == pytest.approx(3 * model_mb, rel=1e-12)
    assert ledger.round_mb == pytest.approx(6 * model_mb, rel=1e-12)


# -- (d) the shipped configs -----------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(METHODS))
def test_shipped_config_learns_in_three_rounds(name: str, tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/<name>.yaml --rounds 3``: the server model (``server_acc/global``)
    is far above chance (10 classes) and rises every round."""
    config = ROOT / "experiments" / "mnist5k" / f"{name.lower()}.yaml"
    result = run_cli("fit", "--config", config, "--rounds", "3", "--logger.wandb", "false",
                     "--logger.progress", "false", "--run_dir", tmp_path, "--name", "s")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "s" / "metrics.csv")
    acc = [row["server_acc/global"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.3 and acc[0] < acc[1] < acc[2], acc
    assert all(row["num_participants"] == 3 for row in rows)  # 30% of 10 clients
    assert json.loads((tmp_path / "s" / "summary.json").read_text())["status"] == "completed"


# -- (e) resume -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(METHODS))
def test_resume_equals_an_uninterrupted_run(name: str, tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, client models, the server model and the streams equal an
    uninterrupted 3-round run exactly."""
    config = tiny_config(name, rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "local_epochs": 1, "lr": 0.05}
    config["models"]["pool"] = ["cnn_4_8"]
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
    assert read_metrics(full / "metrics.csv")[-1]["server_acc/global"] > 0.25  # 4 classes: above chance
