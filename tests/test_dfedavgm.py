"""DFedAvgM (Sun, Li, Wang, TPAMI 2022, arXiv 2104.11375; a UA-PDFL baseline, papers/ua-pdfl.txt sec. 5.1.3).

A round replayed by hand in float64 (heavy-ball momentum SGD written out, then the Metropolis-Hastings mixing);
the mixing matrix is symmetric, doubly stochastic and zero off the drawn graph; a model the ledger drops is not
mixed in; the mnist5k config learns; a resumed run equals an uninterrupted one.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from federations import tiny_federation
from test_resume import assert_runs_equal
from torch import Tensor, nn

from lit_fl.algorithms import DFedAvgM
from lit_fl.algorithms.dfedavgm import metropolis_weights, mix
from lit_fl.data.batches import ClientBatches
from lit_fl.federation.faults import FaultsConfig
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner
from lit_fl.steps.phase import WorkResult
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "mnist5k" / "dfedavgm.yaml"
EPS32, EPS64 = float(torch.finfo(torch.float32).eps), float(torch.finfo(torch.float64).eps)
State = dict[str, Tensor]

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


@pytest.fixture(scope="module")
def runner() -> StepRunner:
    return StepRunner(accelerator="cpu")


def _homogeneous(num_clients: int) -> Federation:
    return tiny_federation(num_clients=num_clients, pool=("cnn_4_8",))


def _hand_graph(fed: Federation, generator: np.random.Generator, num_peers: int) -> dict[int, set[int]]:
    """The round's undirected graph by hand: client ``i`` (in order) draws ``min(N_com, #neighbours)`` distinct
    neighbours; ``i ~ j`` when either drew the other."""
    links: dict[int, set[int]] = {c.id: set() for c in fed.clients}
    for client in fed.clients:
        candidates = fed.topology.neighbours(client.id)
        for j in generator.choice(candidates, size=min(num_peers, len(candidates)), replace=False):
            links[client.id].add(int(j))
            links[int(j)].add(client.id)
    return links


def _hand_metropolis(links: dict[int, set[int]]) -> dict[int, dict[int, float]]:
    """``w_ij = 1 / (1 + max(d_i, d_j))`` on a link, ``w_ii = 1 - sum_j w_ij``, as rows {j: w_ij}."""
    rows = {}
    for i, peers in links.items():
        row = {j: 1.0 / (1.0 + max(len(peers), len(links[j]))) for j in peers}
        row[i] = 1.0 - sum(row.values())
        rows[i] = row
    return rows


def _ce(z: Tensor, y: Tensor) -> Tensor:
    """Cross-entropy by hand: ``logsumexp(z) - z_y``, mean over the batch."""
    return (torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]).mean()


def _heavy_ball(start: nn.Module, batches: list[tuple[Tensor, Tensor]], lr: float, theta: float) -> State:
    """DFedAvgM's local phase by hand in float64: ``y^{t+1} = y^t - lr g(y^t) + theta (y^t - y^{t-1})``,
    ``y^{-1} = y^0`` (no momentum carried into the round)."""
    model = copy.deepcopy(start).double().train()
    params = list(model.parameters())
    previous = [p.detach().clone() for p in params]
    for x, y in batches:
        grads = torch.autograd.grad(_ce(model(x.double()), y), params)
        with torch.no_grad():
            for p, g, q in zip(params, grads, previous):
                current = p.detach().clone()
                p.add_(-lr * g + theta * (current - q))
                q.copy_(current)
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


# -- (a) one round replayed by hand --------------------------------------------------------------------------------


def test_round_replays_heavy_ball_sgd_then_metropolis_mixing(runner: StepRunner) -> None:
    """Round 2 (lr 0.05 * 0.95), theta 0.5, K = 2 epochs of batch 50 (several momentum steps per client), 5
    clients drawing N_com = 2 peers each (degrees differ, W is not uniform). Every client's model after the round
    equals ``sum_j w_ij z_j`` of the float64 replay."""
    fed = _homogeneous(5)
    algo = DFedAvgM(num_peers=2, local_epochs=2)
    algo.setup(fed)
    start = {c.id: copy.deepcopy(c.model) for c in fed.clients}
    graph_rng = copy.deepcopy(fed.rng.algorithm)
    order = torch.Generator()
    order.set_state(fed.rng.data_order.get_state())
    result = algo.run_round(2, fed, runner, CommunicationLedger())

    lr, theta = 0.05 * 0.95, 0.5
    assert result.extra["lr"] == pytest.approx(lr, rel=EPS64)
    links = _hand_graph(fed, graph_rng, 2)
    degrees = {len(p) for p in links.values()}
    assert len(degrees) > 1 and any(len(p) < 4 for p in links.values())  # irregular and not complete
    z, steps = {}, 0
    for client in fed.clients:  # the phase draws the clients' batch orders in client order
        batches = list(ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, 50, order, epochs=2))
        steps = max(steps, len(batches))
        z[client.id] = _heavy_ball(start[client.id], batches, lr, theta)
    assert steps >= 3  # momentum acts from the second step on
    rows = _hand_metropolis(links)
    # float32 training against a float64 reference: each of the <= `steps` updates rounds the weight, the momentum
    # buffer and the gradient, whose reductions (pairwise sums of at most 50 * 64 < 2^12 terms) lose up to
    # log2(2^12) = 12 eps32; 4 more for the update's own operations: 16 eps32 per step, relative to the largest entry
    scale = max(float(v.abs().max()) for state in z.values() for v in state.values())
    tolerance = steps * 16 * EPS32 * scale
    for client in fed.clients:
        expected = {
            k: sum(w * z[j][k] for j, w in rows[client.id].items()) for k in z[client.id]
        }
        for key, value in client.model.state_dict().items():
            torch.testing.assert_close(value.double(), expected[key], atol=tolerance, rtol=0,
                                       msg=lambda m, k=key, n=client.id: f"client {n} {k}: {m}")
    # the mixing is visible at this tolerance: a client's own z differs from its mixed model
    key = "classifier.weight"
    assert any((z[n][key] - fed.clients[n].model.state_dict()[key].double()).abs().max() > 10 * tolerance
               for n in z)


def test_mix_is_the_weighted_sum_of_float_entries_and_keeps_own_counters() -> None:
    a = {"w": torch.tensor([1.0, 2.0]), "n": torch.tensor(3)}
    b = {"w": torch.tensor([5.0, -2.0]), "n": torch.tensor(9)}
    c = {"w": torch.tensor([0.0, 8.0]), "n": torch.tensor(1)}
    out = mix([a, b, c], [0.5, 0.25, 0.25])
    assert torch.equal(out["w"], torch.tensor([0.5 * 1 + 0.25 * 5 + 0.25 * 0, 0.5 * 2 - 0.25 * 2 + 0.25 * 8]))
    assert out["w"].dtype == torch.float32 and torch.equal(out["n"], torch.tensor(3))


# -- (b) the mixing matrix -------------------------------------------------------------------------------------------


def test_metropolis_weights_of_a_path_by_hand() -> None:
    """Path 0 - 1 - 2 and a lone 3: d = (1, 2, 1, 0); w_01 = w_12 = 1/3, w_00 = w_22 = 2/3, w_11 = 1/3, w_33 = 1."""
    W = metropolis_weights({0: [1], 1: [0, 2], 2: [1], 3: []})
    expected = np.array([[2, 1, 0, 0], [1, 1, 1, 0], [0, 1, 2, 0], [0, 0, 0, 3]]) / 3.0
    np.testing.assert_allclose(W, expected, rtol=0, atol=4 * EPS64)


def test_mixing_matrix_is_symmetric_doubly_stochastic_and_zero_off_the_graph() -> None:
    """Drawn graphs of 10 clients (N_com = 2 and 5, five rounds each): undirected, every client linked to at least
    N_com others, W symmetric, non-negative, rows and columns summing to 1, zero where there is no link."""
    fed = _homogeneous(10)
    for num_peers in (2, 5):
        algo = DFedAvgM(num_peers=num_peers)
        for _ in range(5):
            graph = algo.draw_graph(fed)
            assert all(i in graph[j] for i, peers in graph.items() for j in peers)  # undirected
            assert all(len(peers) >= num_peers and i not in peers for i, peers in graph.items())
            W = metropolis_weights(graph)
            n = len(graph)
            tol = 2 * n * EPS64  # a sum of n float64 terms
            np.testing.assert_array_equal(W, W.T)
            assert (W >= 0).all() and (np.diag(W) > 0).all()
            np.testing.assert_allclose(W.sum(axis=1), 1.0, rtol=0, atol=tol)
            np.testing.assert_allclose(W.sum(axis=0), 1.0, rtol=0, atol=tol)
            linked = np.eye(n, dtype=bool)
            for i, peers in graph.items():
                linked[i, peers] = True
            assert (W[~linked] == 0).all() and (W[linked] > 0).all()


# -- (c) dropped models ---------------------------------------------------------------------------------------------


class _NoTrainingRunner:
    """A phase that trains nothing: every z_j is the client's round-start model."""

    def run_phase(self, works):  # noqa: ANN001, ANN202
        return [WorkResult(0.0) for _ in works]


def _constants(fed: Federation) -> None:
    """Client ``n``'s every float weight becomes ``n + 1``."""
    with torch.no_grad():
        for client in fed.clients:
            for value in client.model.state_dict().values():
                if value.is_floating_point():
                    value.fill_(client.id + 1.0)


class _DropsFrom(CommunicationLedger):
    """A ledger on which every model sent by ``source`` is lost."""

    def __init__(self, source: int) -> None:
        super().__init__()
        self.source = source

    def reaches(self, source: int, target: int) -> bool:
        return source != self.source and super().reaches(source, target)


def _value(fed: Federation, n: int) -> float:
    return float(fed.clients[n].model.state_dict()["classifier.weight"].flatten()[0])


def test_drop_prob_one_mixes_nothing_in() -> None:
    fed = _homogeneous(6)
    fed.faults = FaultsConfig(drop_prob=1.0)
    _constants(fed)
    ledger = CommunicationLedger.of(fed)
    ledger.start_round()
    DFedAvgM(num_peers=2).run_round(1, fed, _NoTrainingRunner(), ledger)
    assert [_value(fed, n) for n in range(6)] == [n + 1.0 for n in range(6)]
    assert ledger.total_mb == 0.0 and ledger.round_faults.dropped_senders > 0


def test_a_dropped_models_weight_stays_with_the_receiver() -> None:
    """Every model client 0 sends is lost: each neighbour ``i`` of 0 gets ``(w_ii + w_i0)(i + 1) + sum_{j != 0}
    w_ij (j + 1)``; client 0 still receives its neighbours' models."""
    fed = _homogeneous(6)
    _constants(fed)
    algo = DFedAvgM(num_peers=2)
    graph_rng = copy.deepcopy(fed.rng.algorithm)
    ledger = _DropsFrom(0)
    algo.run_round(1, fed, _NoTrainingRunner(), ledger)
    links = _hand_graph(fed, graph_rng, 2)
    rows = _hand_metropolis(links)
    assert links[0]  # client 0 has neighbours whose rows change
    for i, row in rows.items():
        kept = {j: w for j, w in row.items() if not (j == 0 and i != 0)}
        kept[i] += row[0] if (0 in row and i != 0) else 0.0
        expected = sum(w * (j + 1.0) for j, w in kept.items())
        assert _value(fed, i) == pytest.approx(expected, rel=8 * EPS32, abs=0), f"client {i}"
    assert len(ledger.transfers) == sum(len(p) for p in links.values()) - len(links[0])


# -- (d) the mnist5k config, (e) resume --------------------------------------------------------------------------------


def test_mnist5k_config_learns_in_three_rounds(tmp_path: Path) -> None:
    result = run_cli("fit", "--config", CONFIG, "--rounds", "3", "--logger.wandb", "false", "--logger.progress",
                     "false", "--run_dir", tmp_path, "--name", "dfedavgm")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "dfedavgm" / "metrics.csv")
    accuracy = [r["global_acc"] for r in rows]
    assert len(accuracy) == 3 and min(accuracy) > 0.1  # 10 classes: chance is 0.1
    assert accuracy[0] < accuracy[1] < accuracy[2]
    assert all(r["mean_degree"] >= 5 and r["round_comm_mb"] > 0 for r in rows)
    summary = json.loads((tmp_path / "dfedavgm" / "summary.json").read_text())
    assert summary["status"] == "completed"


def _fit(config: Path, run_dir: Path, *argv: str) -> None:
    result = run_cli("fit", "--config", config, "--run_dir", run_dir, *argv)
    assert result.rc == 0, result.err


def test_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 4 rounds and resumed: metrics, weights, RNG streams and ledger equal the uninterrupted
    run's (test_resume's comparison; N_com = 1 on 4 clients, so the graph is a fresh random draw every round)."""
    config = tiny_config("DFedAvgM", rounds=4, num_peers=1, batch_size=32)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"]["pool"] = ["cnn_8"]
    path = write_config(tmp_path / "dfedavgm.yaml", config)
    runs = tmp_path / "runs"
    _fit(path, runs, "--name", "full")
    _fit(path, runs, "--name", "part", "--rounds", "2")
    _fit(path, runs, "--resume", str(runs / "part"), "--rounds", "4")
    assert_runs_equal(runs / "part", runs / "full")
