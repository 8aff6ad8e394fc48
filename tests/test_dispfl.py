"""DisPFL (Dai et al., ICML 2022, arXiv 2206.00187; a UA-PDFL baseline, papers/ua-pdfl.txt sec. 5.1.3).

ERK densities, the masked aggregation and the prune/regrow update on hand cases; masked weights stay exactly zero
through training; a round replayed by hand in float64; the mnist5k config learns; a resumed run equals an
uninterrupted one, masks included.
"""

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
from test_resume import assert_runs_equal, load_ckpt
from torch import Tensor, nn

from lit_fl.algorithms import DisPFL
from lit_fl.algorithms.dispfl import (
    aggregate,
    erk_densities,
    masked_average,
    prune_and_regrow,
    prune_rate,
    random_masks,
)
from lit_fl.data.batches import ClientBatches
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner
from lit_fl.steps.masked_training import MaskedTraining
from lit_fl.steps.optim import SGDConfig
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "mnist5k" / "dispfl.yaml"
EPS32, EPS64 = float(torch.finfo(torch.float32).eps), float(torch.finfo(torch.float64).eps)
State = dict[str, Tensor]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


@pytest.fixture(scope="module")
def runner() -> StepRunner:
    return StepRunner(accelerator="cpu")


def _homogeneous(num_clients: int) -> Federation:
    return tiny_federation(num_clients=num_clients, pool=("cnn_4_8",))


# -- (a) ERK densities ----------------------------------------------------------------------------------------------


def test_erk_densities_by_hand() -> None:
    """Layers a: 10x10 (r = 20/100 = 0.2), b: 4x5 (r = 9/20 = 0.45), c: 2 (r = 2/2 = 1).
    density 0.5: eps = 0.5 * 122 / (0.2*100 + 0.45*20 + 1*2) = 61/31, so c (eps * 1 > 1) is dense; again over a, b:
    eps = (0.5 * 120 - 0.5 * 2) / (20 + 9) = 59/29: d_a = 0.2 * 59/29, d_b = 0.45 * 59/29 (< 1), d_c = 1."""
    shapes = {"a": (10, 10), "b": (4, 5), "c": (2,)}
    d = erk_densities(shapes, 0.5)
    eps = 59 / 29
    assert d["c"] == 1.0
    assert d["a"] == pytest.approx(0.2 * eps, rel=8 * EPS64)
    assert d["b"] == pytest.approx(0.45 * eps, rel=8 * EPS64)
    kept = d["a"] * 100 + d["b"] * 20 + d["c"] * 2
    assert kept == pytest.approx(0.5 * 122, rel=8 * EPS64)  # the overall density is kept


def test_random_masks_keep_floor_density_ones() -> None:
    shapes = {"a": (10, 10), "b": (4, 5), "c": (2,)}
    d = erk_densities(shapes, 0.5)
    masks = random_masks(shapes, d, np.random.default_rng(0))
    assert {k: int(m.sum()) for k, m in masks.items()} == {"a": int(d["a"] * 100), "b": int(d["b"] * 20), "c": 2}
    assert all(m.dtype == torch.bool and tuple(m.shape) == shapes[k] for k, m in masks.items())


# -- (b) masked aggregation -----------------------------------------------------------------------------------------


def test_masked_average_by_hand() -> None:
    """Coordinates of 3 models: 0 held by all three (mean of 3), 1 by the 1st and 3rd (mean of 2), 2 by the 2nd
    only (its value), 3 by none (0). A dense float buffer is the plain mean, an integer one the first's."""
    states = [{"w": torch.tensor([1.0, 2.0, 9.0, 7.0]), "b": torch.tensor([3.0]), "n": torch.tensor(5)},
              {"w": torch.tensor([4.0, 8.0, 6.0, 7.0]), "b": torch.tensor([6.0]), "n": torch.tensor(1)},
              {"w": torch.tensor([7.0, 5.0, 1.0, 7.0]), "b": torch.tensor([0.0]), "n": torch.tensor(2)}]
    supports = [{"w": torch.tensor([True, True, False, False])},
                {"w": torch.tensor([True, False, True, False])},
                {"w": torch.tensor([True, True, False, False])}]
    out = masked_average(states, supports)
    assert torch.equal(out["w"], torch.tensor([(1 + 4 + 7) / 3, (2 + 5) / 2, 6.0, 0.0]))
    assert torch.equal(out["b"], torch.tensor([3.0])) and torch.equal(out["n"], torch.tensor(5))


def test_aggregate_keeps_own_where_no_neighbour_holds_and_applies_own_mask() -> None:
    """Client (first) holds coordinates 0, 1, 2; neighbours: coordinate 0 is held by 2 of 3 neighbours (mean of the
    client and those 2), 1 by none (the client's own value), 2 by one; the client's new mask drops 2 and adds 3,
    which only neighbour 3 holds (its value: a regrown coordinate is filled by the neighbours)."""
    own = {"w": torch.tensor([1.0, 2.0, 3.0, 0.0])}
    neighbours = [{"w": torch.tensor([5.0, 0.0, 0.0, 0.0])}, {"w": torch.tensor([9.0, 0.0, 4.0, 0.0])},
                  {"w": torch.tensor([0.0, 0.0, 0.0, 8.0])}]
    supports = [{"w": torch.tensor([True, True, True, False])}, {"w": torch.tensor([True, False, False, False])},
                {"w": torch.tensor([True, False, True, False])}, {"w": torch.tensor([False, False, False, True])}]
    mask = {"w": torch.tensor([True, True, False, True])}
    out = aggregate([own, *neighbours], supports, mask)
    assert torch.equal(out["w"], torch.tensor([(1 + 5 + 9) / 3, 2.0, 0.0, 8.0]))


# -- (c) prune and regrow -------------------------------------------------------------------------------------------


def test_prune_and_regrow_by_hand() -> None:
    """Mask of 4 ones out of 8, rate 0.5: r = ceil(0.5 * 4) = 2. Active weights |w| = 0.5 (idx 0), 0.1 (1), 3 (4),
    0.2 (6): idx 1 and 6 are pruned. Inactive after pruning: 1, 2, 3, 5, 6, 7 with |g| 9, 1, 4, 0, 2, 7: idx 1 (9,
    just pruned, regrown) and 7 (7) join. Ones: 0, 1, 4, 7 (still 4)."""
    mask = torch.tensor([1, 1, 0, 0, 1, 0, 1, 0], dtype=torch.bool)
    weight = torch.tensor([0.5, -0.1, 0.0, 0.0, 3.0, 0.0, 0.2, 0.0])
    grad = torch.tensor([100.0, -9.0, 1.0, -4.0, 100.0, 0.0, 2.0, 7.0])
    new = prune_and_regrow(mask, weight, grad, 0.5)
    assert new.tolist() == [True, True, False, False, True, False, False, True]
    assert int(new.sum()) == int(mask.sum())


def test_prune_and_regrow_keeps_every_layers_density() -> None:
    g = torch.Generator().manual_seed(0)
    for rate in (0.5, 0.3, 0.01):
        mask = torch.rand(6, 7, generator=g) < 0.4
        new = prune_and_regrow(mask, torch.randn(6, 7, generator=g) * mask, torch.randn(6, 7, generator=g), rate)
        assert int(new.sum()) == int(mask.sum()) and new.shape == mask.shape
        moved = int((new & ~mask).sum())
        assert moved <= math.ceil(rate * int(mask.sum()))
    dense = torch.ones(5, dtype=torch.bool)  # a dense (ERK d = 1) layer stays dense
    assert prune_and_regrow(dense, torch.randn(5), torch.randn(5), 0.5).all()


def test_prune_rate_is_cosine_annealed() -> None:
    assert prune_rate(1, 0.5, 10) == 0.5
    assert prune_rate(6, 0.5, 10) == pytest.approx(0.25, abs=4 * EPS64)  # t = T/2
    assert prune_rate(11, 0.5, 10) == 0.0 and prune_rate(30, 0.5, 10) == 0.0


# -- (d) masked training ------------------------------------------------------------------------------------------


def test_masked_weights_stay_exactly_zero_through_training(runner: StepRunner) -> None:
    """Masked training with momentum and weight decay over several batches: every masked weight is exactly 0
    afterwards, every kept one moved."""
    fed = _homogeneous(2)
    client = fed.clients[0]
    gen = np.random.default_rng(1)
    shapes = {k: tuple(p.shape) for k, p in client.model.named_parameters()}
    masks = random_masks(shapes, dict.fromkeys(shapes, 0.5), gen)
    names = list(shapes)
    before = {k: p.detach().clone() for k, p in client.model.named_parameters()}
    step = MaskedTraining(client.model, client.class_proportions, [masks[n] for n in names], "ce",
                          SGDConfig(lr=0.1, momentum=0.9, weight_decay=5e-4))
    batches = ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, 16, fed.rng.data_order, epochs=2)
    assert len(batches) >= 3
    runner.run_server_step(step, batches)
    for name, p in client.model.named_parameters():
        assert (p[~masks[name]] == 0).all(), name
        assert (p[masks[name]] != before[name][masks[name]]).all(), name


# -- (e) one round replayed by hand ----------------------------------------------------------------------------------


def _ce(z: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy by hand: ``logsumexp(z) - z_y``, mean over the batch."""
    return (torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]).mean()


def _hand_aggregate(states: list[State], supports: list[dict[str, Tensor]], mask: dict[str, Tensor]) -> State:
    """Per coordinate: sum of the held values over the number of holders (0 where none), times the own mask."""
    out = {}
    for key in states[0]:
        num = torch.zeros_like(states[0][key], dtype=torch.float64)
        den = torch.zeros_like(num)
        for s, m in zip(states, supports):
            num += torch.where(m[key], s[key].double(), 0.0)
            den += m[key].double()
        out[key] = torch.where(mask[key] & (den > 0), num / torch.where(den > 0, den, 1.0), 0.0)
    return out


def _masked_sgd(model: nn.Module, masks: dict[str, Tensor], batches: list, lr: float, momentum: float) -> None:
    """Masked momentum SGD by hand in float64: ``g <- g * m``, ``b <- momentum b + g``, ``w <- (w - lr b) * m``."""
    names, params = zip(*model.named_parameters())
    buffers = [None] * len(params)
    for x, y in batches:
        grads = torch.autograd.grad(_ce(model(x.double()), y), params)
        with torch.no_grad():
            for i, (n, p, g) in enumerate(zip(names, params, grads)):
                g = g * masks[n]
                buffers[i] = g if buffers[i] is None else momentum * buffers[i] + g
                p.sub_(lr * buffers[i]).mul_(masks[n])


@pytest.mark.parametrize("fuse", ["off", "on"])
def test_round_replays_masked_aggregation_training_and_mask_update(fuse: str) -> None:
    """Round 2 (round 1 run first, so every client's mask differs from the support of its model), 5 clients,
    N_com = 2, T = 4 (alpha_2 = 0.25 (1 + cos(pi / 4))): aggregation, masked momentum SGD (lr 0.05 * 0.95) and the
    mask update equal the float64 replay; with ``trainer.fuse on`` the five masked steps run as one batched step,
    each client under its own masks (masked weights exactly 0)."""
    runner = StepRunner(accelerator="cpu", fuse=fuse)
    fed = _homogeneous(5)
    algo = DisPFL(num_peers=2, anneal_rounds=4)
    algo.setup(fed)
    algo.run_round(1, fed, runner, CommunicationLedger())
    assert any(not torch.equal(algo.masks[i][k], algo.support[i][k]) for i in algo.masks for k in algo.masks[i])
    start = {c.id: {k: v.detach().clone() for k, v in c.model.state_dict().items()} for c in fed.clients}
    masks = copy.deepcopy(algo.masks)
    support = copy.deepcopy(algo.support)
    models = {c.id: copy.deepcopy(c.model) for c in fed.clients}
    peer_rng = copy.deepcopy(fed.rng.algorithm)
    order = torch.Generator()
    order.set_state(fed.rng.data_order.get_state())
    ledger = CommunicationLedger()
    result = algo.run_round(2, fed, runner, ledger)

    lr, rate = 0.05 * 0.95, 0.25 * (1 + math.cos(math.pi / 4))
    assert result.extra["lr"] == pytest.approx(lr, rel=EPS64)
    assert result.extra["prune_rate"] == pytest.approx(rate, rel=4 * EPS64)
    peers = {c.id: [int(j) for j in peer_rng.choice(fed.topology.neighbours(c.id), size=2, replace=False)]
             for c in fed.clients}
    # the ledger carries the kept values only: 4 bytes per kept weight (the model has no buffer)
    kept = {j: sum(int(m.sum()) for m in support[j].values()) for j in support}
    expected_mb = [(j, i, kept[j] * 4 / 2**20) for i in peers for j in peers[i]]
    assert [(s, t, pytest.approx(mb, rel=EPS64)) for s, t, mb in ledger.transfers] == expected_mb
    # training: the phase draws the batch orders in client order, then the screening draws one shuffle per client
    trained, steps = {}, 0
    for client in fed.clients:
        i = client.id
        sources = [i, *peers[i]]
        state = _hand_aggregate([start[j] for j in sources], [support[j] for j in sources], masks[i])
        model = models[i].double().train()
        model.load_state_dict(state)
        batches = list(ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, 50, order))
        steps = max(steps, len(batches))
        _masked_sgd(model, {k: m.double() for k, m in masks[i].items()}, batches, lr, 0.5)
        trained[i] = model
    scale = max(float(p.detach().abs().max()) for m in trained.values() for p in m.parameters())
    # float32 training against a float64 reference: as test_dfedavgm's bound (16 eps32 per step, relative to the
    # largest weight), plus 4 eps32 for the float32 aggregation's rounding
    tolerance = (steps * 16 + 4) * EPS32 * scale
    for client in fed.clients:
        for name, value in client.model.named_parameters():
            torch.testing.assert_close(value.detach().double(), dict(trained[client.id].named_parameters())[name],
                                       atol=tolerance, rtol=0, msg=lambda m, k=name, n=client.id: f"{n} {k}: {m}")
            assert (value[~masks[client.id][name]] == 0).all()  # trained under m_i
    # mask update: the support is the trained mask; the new mask is prune/regrow at the float32 trained weights with
    # the float64 gradient on the first batch of a fresh shuffle (compared where |g| is decided beyond rounding)
    for client in fed.clients:
        i = client.id
        assert all(torch.equal(algo.support[i][k], masks[i][k]) for k in masks[i])
        x, y = next(iter(ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, 50, order)))
        model = copy.deepcopy(client.model).double().eval()
        names, params = zip(*model.named_parameters())
        grads = dict(zip(names, torch.autograd.grad(_ce(model(x.double()), y), params)))
        for name, p in client.model.named_parameters():
            expected = prune_and_regrow(masks[i][name], p.detach(), grads[name], rate)
            assert int(algo.masks[i][name].sum()) == int(masks[i][name].sum())
            assert torch.equal(algo.masks[i][name], expected), f"client {i} {name}"
    assert result.extra["mask_swaps"] > 0


# -- (f) the mnist5k config, (g) resume -------------------------------------------------------------------------------


def test_mnist5k_config_learns_in_three_rounds(tmp_path: Path) -> None:
    result = run_cli("fit", "--config", CONFIG, "--rounds", "3", "--logger.wandb", "false", "--logger.progress",
                     "false", "--run_dir", tmp_path, "--name", "dispfl")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "dispfl" / "metrics.csv")
    accuracy = [r["local_acc"] for r in rows]
    assert len(accuracy) == 3 and min(accuracy) > 0.1  # 10 classes: chance is 0.1
    assert accuracy[0] < accuracy[1] < accuracy[2]
    assert all(r["round_comm_mb"] > 0 and r["density"] == pytest.approx(rows[0]["density"]) for r in rows)
    summary = json.loads((tmp_path / "dispfl" / "summary.json").read_text())
    assert summary["status"] == "completed"


def _fit(config: Path, run_dir: Path, *argv: str) -> None:
    result = run_cli("fit", "--config", config, "--run_dir", run_dir, *argv)
    assert result.rc == 0, result.err


def test_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 4 rounds and resumed: metrics, weights, masks and supports (the algorithm's state), RNG
    streams and ledger equal the uninterrupted run's (test_resume's comparison)."""
    config = tiny_config("DisPFL", rounds=4, num_peers=1, batch_size=32, anneal_rounds=4)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"]["pool"] = ["cnn_8"]
    path = write_config(tmp_path / "dispfl.yaml", config)
    runs = tmp_path / "runs"
    _fit(path, runs, "--name", "full")
    _fit(path, runs, "--name", "part", "--rounds", "2")
    _fit(path, runs, "--resume", str(runs / "part"), "--rounds", "4")
    assert_runs_equal(runs / "part", runs / "full")
    masks = load_ckpt(runs / "full")["algorithm"]["masks"]
    assert sorted(masks) == [0, 1, 2, 3]
    assert all(m.dtype == torch.bool for mask in masks.values() for m in mask.values())
