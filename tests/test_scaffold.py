"""SCAFFOLD (Karimireddy et al., ICML 2020, arXiv 1910.06378), Algorithm 1 with option II control variates: one round
replayed by hand in float64 (the corrected momentum-SGD steps, ``c_i+`` of option II, the server's two updates), the
plain-SGD special case ``c = c_i = 0``, the ledger's doubled traffic, a CLI run and an exact resume.

The replays write every formula out here; nothing of lit-fl's but the round under test computes the expectations."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from federations import tiny_federation
from test_resume import assert_resumed_run_equals_uninterrupted
from torch import Tensor, nn

from lit_fl.algorithms import SCAFFOLD
from lit_fl.algorithms.scaffold import GLOBAL
from lit_fl.data.batches import ClientBatches
from lit_fl.federation.ledger import MB, CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import LocalTraining, SGDConfig, StepRunner
from lit_fl.tracking import read_metrics

BN_NET = "resnet18_2_2_4_4"  # a tiny pre-activation ResNet18: BatchNorm buffers in x
ROOT = Path(__file__).resolve().parents[1]
#: float32 weights against a float64 replay of a few dozen steps on weights of magnitude <= 1: float32's relative
#: precision (6e-8) times a few dozen rounded operations per weight, with a margin of 10
ATOL = 1e-5

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def cpu() -> StepRunner:
    return StepRunner(accelerator="cpu")


def hand_ce(z: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy by hand: ``logsumexp(z) - z_y``, mean over the batch."""
    return (torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]).mean()


def hand_batches(fed: Federation, train_idx: Tensor, batch_size: int, epochs: int,
                 generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """Each epoch a fresh permutation of the client's indices from ``generator``, cut into batches (float64)."""
    batches = []
    for _ in range(epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=generator)]
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batches.append((fed.data.train_x[idx].double(), fed.data.train_y[idx]))
    return batches


def corrected_momentum_sgd(model: nn.Module, batches: list[tuple[Tensor, Tensor]], correction: list[Tensor],
                           lr: float, momentum: float, weight_decay: float) -> None:
    """SCAFFOLD line 10 with heavy-ball SGD, written out: ``d = g(y) + (c - c_i) + wd * y``, ``b = d`` at the first
    step and ``b = momentum * b + d`` after, ``y <- y - lr * b``."""
    params = list(model.parameters())
    buffers: list[Tensor | None] = [None] * len(params)
    model.train()
    for x, y in batches:
        grads = torch.autograd.grad(hand_ce(model(x), y), params)
        with torch.no_grad():
            for k, (p, g, corr) in enumerate(zip(params, grads, correction)):
                d = g + corr + weight_decay * p
                buffers[k] = d.clone() if buffers[k] is None else momentum * buffers[k] + d
                p -= lr * buffers[k]


def random_controls(fed: Federation, scale: float, seed: int) -> dict:
    """A state for :meth:`SCAFFOLD.load_state_dict`: non-zero ``c`` and ``c_i`` for every client."""
    g = torch.Generator().manual_seed(seed)
    shapes = [p.shape for p in fed.server[GLOBAL].parameters()]

    def draw() -> list[Tensor]:
        return [scale * torch.randn(s, generator=g) for s in shapes]

    return {"server_control": draw(), "client_controls": {c.id: draw() for c in fed.clients}}


def assert_close(got: Tensor, want: Tensor, atol: float, what: str) -> None:
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=0, msg=lambda m: f"{what}: {m}")


# -- (a) one round by hand -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("control_step", "net", "fuse"),
                         [("effective", BN_NET, "off"), ("lr", BN_NET, "off"), ("effective", "cnn_4_8", "on")])
def test_round_is_algorithm_1_option_ii_by_hand(control_step: str, net: str, fuse: str) -> None:
    """Algorithm 1 in float64 from non-zero ``c`` and ``c_i``: ``|S| = 2`` of ``N = 4`` BatchNorm ResNets, ``K`` =
    2 epochs of batches of 32; ``y_i`` by momentum SGD on ``g - c_i + c`` (momentum 0.9, weight decay 0.01, lr 0.05);
    ``c_i+ = c_i - c + (x - y_i) / (K eta)`` with ``eta = lr / (1 - momentum)`` (``effective``) or ``lr``; ``x <- x +
    eta_g mean(y_i - x)`` (eta_g = 0.7), buffers the mean of the clients'; ``c <- c + |S|/N mean(c_i+ - c_i)``. And
    the same with CNNs under ``trainer.fuse on``: the two clients' corrected steps as one batched step, each model
    corrected by its own client's ``c - c_i``."""
    lr, momentum, wd, eta_g, epochs, batch = 0.05, 0.9, 0.01, 0.7, 2, 32
    fed = tiny_federation(num_clients=4, pool=(net,))
    algo = SCAFFOLD(client_fraction=0.5, global_lr=eta_g, control_step=control_step, local_epochs=epochs,
                    batch_size=batch, lr=lr, momentum=momentum, weight_decay=wd)  # type: ignore[arg-type]
    algo.setup(fed)
    algo.load_state_dict(random_controls(fed, 0.05, seed=3))
    server = fed.server[GLOBAL]
    x_start = copy.deepcopy(server).double()
    c = [t.double() for t in algo.server_control]
    c_clients = {cid: [t.double() for t in ts] for cid, ts in algo.client_controls.items()}
    selection = copy.deepcopy(fed.rng.selection.bit_generator.state)
    order = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu", fuse=fuse), CommunicationLedger())

    rng = np.random.default_rng()
    rng.bit_generator.state = selection
    selected = sorted(int(n) for n in rng.choice(4, size=round(0.5 * 4), replace=False))
    assert list(result.senders) == selected
    generator = torch.Generator()
    generator.set_state(order)
    eta = lr / (1 - momentum) if control_step == "effective" else lr
    x = [p.detach() for p in x_start.parameters()]
    ys, deltas_c, counts = [], [], []
    for cid in selected:
        client = fed.clients[cid]
        batches = hand_batches(fed, client.train_idx, batch, epochs, generator)
        num_steps = len(batches)
        assert num_steps == epochs * math.ceil(client.num_train / batch) >= 4  # momentum matters
        y = copy.deepcopy(x_start)
        correction = [cc - ci for cc, ci in zip(c, c_clients[cid])]
        corrected_momentum_sgd(y, batches, correction, lr, momentum, wd)
        for key, value in y.state_dict().items():
            assert_close(client.model.state_dict()[key], value, ATOL, f"y_{cid} {key}")
        c_plus = [ci - cc + (xx - yy.detach()) / (num_steps * eta)
                  for ci, cc, xx, yy in zip(c_clients[cid], c, x, y.parameters())]
        for k, (got, want) in enumerate(zip(algo.client_controls[cid], c_plus)):
            assert_close(got, want, ATOL / (num_steps * eta), f"c_{cid}+ [{k}]")
        ys.append(y)
        counts.append(num_steps)
        deltas_c.append([new - old for new, old in zip(c_plus, c_clients[cid])])
    for cid in set(range(4)) - set(selected):  # the others keep their c_i
        assert all(torch.equal(a.double(), b) for a, b in zip(algo.client_controls[cid], c_clients[cid]))

    size, n = len(selected), 4
    names = [name for name, _ in x_start.named_parameters()]
    y_states = [y.state_dict() for y in ys]
    for key, value in x_start.state_dict().items():
        got = server.state_dict()[key]
        if key in names:
            want = value + eta_g * sum(s[key] - value for s in y_states) / size
        elif value.is_floating_point():  # BatchNorm running statistics: the clients' mean
            want = sum(s[key] for s in y_states) / size
        else:
            assert torch.equal(got, y_states[0][key]), key
            continue
        assert_close(got, want, ATOL, f"x {key}")
    for k, cc in enumerate(c):
        want = cc + size / n * (sum(d[k] for d in deltas_c) / size)
        assert_close(algo.server_control[k], want, ATOL / (min(counts) * eta), f"c [{k}]")
    assert float(torch.cat([d.flatten() for d in deltas_c[0]]).abs().max()) > 1e3 * ATOL  # c moved visibly
    if net == BN_NET:
        assert (server.state_dict()["features.norm.running_mean"] - x_start.state_dict()["features.norm.running_mean"]
                ).abs().max() > 1e3 * ATOL  # the buffers were averaged, not kept


# -- (b) c = c_i = 0: plain SGD ------------------------------------------------------------------------------


def test_zero_controls_make_the_client_steps_plain_momentum_sgd() -> None:
    """Round 1 (``c = c_i = 0``): every sampled client's ``y_i`` is bit for bit plain local SGD (lit-fl's
    :class:`LocalTraining` with the same momentum 0.9 and weight decay on the same batches), and with eta_g = 1 the
    server model is their uniform mean."""
    lr, momentum, wd, batch = 0.05, 0.9, 0.01, 32
    fed = tiny_federation(num_clients=5, pool=("cnn_4_8",))
    algo = SCAFFOLD(client_fraction=0.6, local_epochs=2, batch_size=batch, lr=lr, momentum=momentum,
                    weight_decay=wd)
    algo.setup(fed)
    assert all(float(t.abs().max()) == 0 for t in algo.server_control)
    x_start = copy.deepcopy(fed.server[GLOBAL])
    order = fed.rng.data_order.get_state()
    result = algo.run_round(1, fed, cpu(), CommunicationLedger())
    assert len(result.senders) == 3

    generator = torch.Generator()
    generator.set_state(order)
    plain = []
    for cid in result.senders:
        client = fed.clients[cid]
        model = copy.deepcopy(x_start)
        step = LocalTraining(model, client.class_proportions, "ce", SGDConfig(lr=lr, momentum=momentum,
                                                                               weight_decay=wd))
        cpu().run_server_step(step, ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, batch,
                                                  generator, epochs=2))
        for key, value in model.state_dict().items():
            assert torch.equal(client.model.state_dict()[key], value), f"client {cid} {key}"
        plain.append(model.state_dict())
    for key, value in fed.server[GLOBAL].state_dict().items():
        assert_close(value, sum(s[key].double() for s in plain) / len(plain), 1e-6, f"x {key}")


# -- (c) the ledger ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pool", ["cnn_4_8", BN_NET])
def test_ledger_records_model_and_control_variate_both_ways(pool: str) -> None:
    """Down ``(x, c)``, up ``(Delta y_i, Delta c_i)``: per sampled client two transfers each way, one of the model
    (parameters and buffers) and one of a control variate (the parameters' shapes). Without buffers that is twice
    FedAvg's traffic (the model down and up)."""
    fed = tiny_federation(num_clients=5, pool=(pool,))
    algo = SCAFFOLD(client_fraction=0.6, local_epochs=1, batch_size=1000)  # one full batch each
    algo.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = algo.run_round(1, fed, cpu(), ledger)
    model = fed.server[GLOBAL]
    params_mb = sum(p.numel() * p.element_size() for p in model.parameters()) / MB
    model_mb = params_mb + sum(b.numel() * b.element_size() for b in model.buffers()) / MB
    expected = []
    for cid in result.senders:
        expected += [(-1, cid, model_mb), (-1, cid, params_mb)]
    for cid in result.senders:
        expected += [(cid, -1, model_mb), (cid, -1, params_mb)]
    assert [(s, t) for s, t, _ in ledger.transfers] == [(s, t) for s, t, _ in expected]
    for (_, _, got), (_, _, want) in zip(ledger.transfers, expected):
        assert got == pytest.approx(want, rel=1e-12)
    fedavg_mb = 2 * len(result.senders) * model_mb
    assert ledger.round_returned_mb == pytest.approx(len(result.senders) * (model_mb + params_mb), rel=1e-12)
    assert ledger.round_sent_mb == pytest.approx(len(result.senders) * (model_mb + params_mb), rel=1e-12)
    if pool == "cnn_4_8":
        assert not list(model.buffers())
        assert ledger.round_mb == pytest.approx(2 * fedavg_mb, rel=1e-12)
    else:
        assert fedavg_mb < ledger.round_mb < 2 * fedavg_mb


# -- (d) the shipped config ------------------------------------------------------------------------------------


def test_shipped_config_learns_in_three_rounds(tmp_path: Path) -> None:
    """``lit-fl fit --config experiments/mnist5k/scaffold.yaml --rounds 3``: the server model (``server_acc/global``)
    is far above chance (10 classes) and rises every round."""
    result = run_cli("fit", "--config", ROOT / "experiments" / "mnist5k" / "scaffold.yaml", "--rounds", "3",
                     "--logger.wandb", "false", "--logger.progress", "false", "--run_dir", tmp_path, "--name", "s")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "s" / "metrics.csv")
    acc = [row["server_acc/global"] for row in rows]
    assert [row["round"] for row in rows] == [1, 2, 3]
    assert acc[0] > 0.3 and acc[0] < acc[1] < acc[2], acc
    assert all(row["num_participants"] == 3 for row in rows)  # 30% of 10 clients
    assert json.loads((tmp_path / "s" / "summary.json").read_text())["status"] == "completed"


# -- (e) resume -------------------------------------------------------------------------------------------------


def test_resume_equals_an_uninterrupted_run_control_variates_included(tmp_path: Path) -> None:
    """Stopped after 2 of 3 rounds and resumed: metrics, models, the server model and every control variate equal
    an uninterrupted 3-round run exactly."""
    config = tiny_config("SCAFFOLD", rounds=3)
    config["algorithm"]["init_args"] = {"client_fraction": 0.5, "local_epochs": 1, "lr": 0.05}
    config["models"]["pool"] = ["cnn_4_8"]
    cfg = write_config(tmp_path / "cfg.yaml", config)
    full, expected, full_state = assert_resumed_run_equals_uninterrupted(cfg, tmp_path / "runs")
    controls = full_state["algorithm"]["client_controls"]
    assert len(controls) >= 3 and all(float(t.abs().max()) > 0 for ts in controls.values() for t in ts)
    assert float(max(t.abs().max() for t in full_state["algorithm"]["server_control"])) > 0
