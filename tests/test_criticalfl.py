"""CriticalFL (Yan, Wang, Li, KDD 2023, arXiv 2109.05613; a UA-PDFL baseline, papers/ua-pdfl.txt sec. 5.1.3).

The critical-period rule on hand-made FGN histories; a round replayed by hand in float64 (momentum SGD, FedAvg over
self + the drawn peers, the FGN each client measures, the next peer counts); the ledger carries exactly the models
the round's peer counts imply; the mnist5k config learns; a resumed run equals an uninterrupted one.
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
from test_dfedavgm import _heavy_ball
from test_resume import assert_runs_equal

from lit_fl.algorithms import CriticalFL
from lit_fl.algorithms.criticalfl import (
    federated_gradient_norm,
    is_critical,
    next_peer_count,
    relative_change,
)
from lit_fl.data.batches import ClientBatches
from lit_fl.errors import ConfigError
from lit_fl.federation.faults import FaultsConfig
from lit_fl.federation.ledger import CommunicationLedger, model_megabytes
from lit_fl.federation.state import Federation
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "experiments" / "mnist5k" / "criticalfl.yaml"
EPS32, EPS64 = float(torch.finfo(torch.float32).eps), float(torch.finfo(torch.float64).eps)

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


@pytest.fixture(scope="module")
def runner() -> StepRunner:
    return StepRunner(accelerator="cpu")


def _homogeneous(num_clients: int) -> Federation:
    return tiny_federation(num_clients=num_clients, pool=("cnn_4_8",))


# -- (a) the critical-period rule on hand-made FGN histories ----------------------------------------------------------


def test_relative_change_of_two_windows_one_value_apart_by_hand() -> None:
    """W = 2, F = (1, 2, 3, 5): old = (2 + 3) / 2 = 2.5, new = (3 + 5) / 2 = 4, change (4 - 2.5) / 2.5 = 0.6."""
    assert relative_change([1.0, 2.0, 3.0, 5.0], 2) == pytest.approx(0.6, rel=4 * EPS64)
    assert relative_change([4.0, 5.0], 1) == 0.25  # exact in binary
    assert relative_change([1.0, 2.0], 2) is None  # fewer than W + 1 values
    assert relative_change([0.0, 0.0, 3.0], 2) == math.inf and relative_change([0.0, 0.0], 1) == 0.0


def test_a_rising_fgn_doubles_the_peers_up_to_the_cap() -> None:
    rising = [1.0, 1.0, 1.0, 1.0, 2.0]  # W = 3: old 1, new 4/3, change 1/3 >= 0.01
    assert is_critical(rising, 3, 0.01)
    assert next_peer_count(rising, 2, 3, 0.01, 1, 8) == 4
    assert next_peer_count(rising, 5, 3, 0.01, 5, 8) == 8  # 10, capped at n_max
    assert next_peer_count(rising, 8, 3, 0.01, 5, 8) == 8


def test_a_flat_or_falling_fgn_halves_the_peers_down_to_the_floor() -> None:
    flat, falling = [1.0] * 5, [5.0, 4.0, 3.0, 2.0, 1.0]
    for history in (flat, falling):
        assert not is_critical(history, 3, 0.01)
        assert next_peer_count(history, 8, 3, 0.01, 1, 8) == 4
        assert next_peer_count(history, 5, 3, 0.01, 1, 8) == 3  # ceil(5 / 2)
        assert next_peer_count(history, 8, 3, 0.01, 5, 8) == 5  # 4, floored at n_min
        assert next_peer_count(history, 1, 3, 0.01, 1, 8) == 1


def test_the_threshold_is_inclusive_and_the_early_phase_is_critical() -> None:
    """F = (4, 5), W = 1: change exactly 0.25; critical at delta = 0.25, not above it. Before W + 1 values exist
    every round is critical (the paper: the early phase of training is the critical one)."""
    assert is_critical([4.0, 5.0], 1, 0.25) and not is_critical([4.0, 5.0], 1, 0.25 + 2 * EPS64)
    assert next_peer_count([4.0, 5.0], 3, 1, 0.26, 1, 10) == 2
    for history in ([], [7.0], [7.0, 1.0, 0.5]):  # W = 3: at most W values
        assert is_critical(history, 3, 0.01) and next_peer_count(history, 3, 3, 0.01, 1, 10) == 6


def test_fgn_is_the_mean_of_the_update_norms() -> None:
    assert federated_gradient_norm([1.0, 2.0, 6.0]) == 3.0 and federated_gradient_norm([0.5]) == 0.5


def test_bad_peer_limits_are_refused_and_the_cap_is_a_fraction_of_the_clients() -> None:
    with pytest.raises(ConfigError, match="min_peers"):
        CriticalFL(num_peers=2, min_peers=3)
    assert CriticalFL().max_peers(30) == 22  # int(0.75 * 30), the reference code's upper limit
    assert CriticalFL(num_peers=5).max_peers(4) == 5  # never below n_min


# -- (b) one round replayed by hand ------------------------------------------------------------------------------------


def test_round_replays_momentum_sgd_fedavg_over_the_drawn_peers_and_the_rule(runner: StepRunner) -> None:
    """Round 2 (lr 0.05 * 0.95, momentum 0.5), 2 epochs of batch 50, 5 clients with peer counts (1, 2, 3, 2, 1)
    and window 1: even clients' history is (1e9) (their FGN falls: halve), odd clients' (0) (it rises: double, at
    most n_max = int(0.8 * 5) = 4). Models, FGNs and next counts equal the float64 replay."""
    fed = _homogeneous(5)
    algo = CriticalFL(num_peers=3, min_peers=1, max_peer_fraction=0.8, window=1, local_epochs=2)
    algo.setup(fed)
    counts = [1, 2, 3, 2, 1]
    algo.peer_counts = list(counts)
    algo.fgn_history = [[1e9] if n % 2 == 0 else [0.0] for n in range(5)]
    start = {c.id: copy.deepcopy(c.model) for c in fed.clients}
    graph_rng = copy.deepcopy(fed.rng.algorithm)
    order = torch.Generator()
    order.set_state(fed.rng.data_order.get_state())
    ledger = CommunicationLedger()
    result = algo.run_round(2, fed, runner, ledger)

    lr, theta = 0.05 * 0.95, 0.5
    z, u, steps = {}, {}, 0
    for client in fed.clients:  # the phase draws the clients' batch orders in client order
        batches = list(ClientBatches(fed.data.train_x, fed.data.train_y, client.train_idx, 50, order, epochs=2))
        steps = max(steps, len(batches))
        z[client.id] = _heavy_ball(start[client.id], batches, lr, theta)
        x0 = {k: v.detach().double() for k, v in start[client.id].named_parameters()}
        u[client.id] = math.sqrt(sum(float(((z[client.id][k] - x0[k]) ** 2).sum()) for k in x0))
    assert steps >= 3  # momentum acts from the second step on
    peers = {}
    for client in fed.clients:  # S_i: min(n_i, #neighbours) distinct neighbours, client order
        candidates = fed.topology.neighbours(client.id)
        peers[client.id] = [int(j) for j in graph_rng.choice(candidates, size=min(counts[client.id],
                                                                                   len(candidates)), replace=False)]
    assert [len(p) for p in peers.values()] == counts
    # float32 training against a float64 reference: each of the <= `steps` updates rounds the weight, the momentum
    # buffer and the gradient, whose reductions (pairwise sums of at most 50 * 64 < 2^12 terms) lose up to
    # log2(2^12) = 12 eps32; 4 more for the update's own operations: 16 eps32 per step, relative to the largest
    # entry (test_dfedavgm's bound); the average's normalised weights add 8 eps32 of that scale
    scale = max(float(v.abs().max()) for state in z.values() for v in state.values())
    tolerance = (steps * 16 + 8) * EPS32 * scale
    size = sum(v.numel() for v in z[0].values())
    for client in fed.clients:
        sources = [client.id, *peers[client.id]]
        weights = [float(fed.clients[j].num_train) for j in sources]
        expected = {k: sum(w * z[j][k] for j, w in zip(sources, weights)) / sum(weights) for k in z[client.id]}
        for key, value in client.model.state_dict().items():
            torch.testing.assert_close(value.double(), expected[key], atol=tolerance, rtol=0,
                                       msg=lambda m, k=key, n=client.id: f"client {n} {k}: {m}")
        fgn = sum(u[j] for j in sources) / len(sources)
        # | ||a|| - ||b|| | <= ||a - b|| <= sqrt(#entries) * the per-entry bound, twice (start and end are exact)
        assert algo.fgn_history[client.id][-1] == pytest.approx(fgn, rel=0, abs=math.sqrt(size) * tolerance)
    assert algo.peer_counts == [1, 4, 2, 4, 1]  # even: ceil(n / 2) >= 1; odd: min(2 n, 4)
    assert result.extra["mean_peers"] == pytest.approx(sum(counts) / 5, rel=EPS64)
    assert result.extra["critical_fraction"] == pytest.approx(2 / 5, rel=EPS64)
    # averaging is visible at this tolerance: a client's own z differs from its averaged model
    key = "classifier.weight"
    assert any((z[n][key] - fed.clients[n].model.state_dict()[key].double()).abs().max() > 10 * tolerance
               for n in z)


# -- (c) the ledger ---------------------------------------------------------------------------------------------------


def test_the_ledger_carries_exactly_the_models_the_peer_counts_imply(runner: StepRunner) -> None:
    """8 clients with counts (1, 7, 2, 5, 3, 3, 4, 6) on the full topology (7 neighbours each): sum_i n_i
    transfers, one whole model each, every one from a distinct drawn neighbour to its drawer."""
    fed = _homogeneous(8)
    algo = CriticalFL(num_peers=1, min_peers=1, max_peer_fraction=1.0, local_epochs=1)
    algo.setup(fed)
    counts = [1, 7, 2, 5, 3, 3, 4, 6]
    algo.peer_counts = list(counts)
    ledger = CommunicationLedger.of(fed)
    ledger.start_round()
    algo.run_round(1, fed, runner, ledger)
    assert len(ledger.transfers) == sum(counts)
    for i, n in enumerate(counts):
        sources = [s for s, t, _ in ledger.transfers if t == i]
        assert len(sources) == n == len(set(sources)) and i not in sources
    model_mb = model_megabytes(fed.clients[0].model)
    assert all(mb == model_mb for _, _, mb in ledger.transfers)
    assert ledger.total_mb == pytest.approx(sum(counts) * model_mb, rel=sum(counts) * EPS64)


def test_drop_prob_one_averages_nothing_and_each_fgn_is_the_clients_own_norm(runner: StepRunner) -> None:
    fed = _homogeneous(6)
    fed.faults = FaultsConfig(drop_prob=1.0)
    algo = CriticalFL(num_peers=2)
    algo.setup(fed)
    before = {c.id: {k: v.detach().clone() for k, v in c.model.named_parameters()} for c in fed.clients}
    ledger = CommunicationLedger.of(fed)
    ledger.start_round()
    algo.run_round(1, fed, runner, ledger)
    assert ledger.total_mb == 0.0 and ledger.round_faults.dropped_senders > 0
    for client in fed.clients:
        after = dict(client.model.named_parameters())
        own = math.sqrt(sum(float(((after[k].detach().double() - v.double()) ** 2).sum())
                            for k, v in before[client.id].items()))
        # the same float32 weights, norms summed in float64 in another order: a few eps64
        assert algo.fgn_history[client.id] == [pytest.approx(own, rel=64 * EPS64)]


# -- (d) the mnist5k config, (e) resume --------------------------------------------------------------------------------


def test_mnist5k_config_learns_in_three_rounds(tmp_path: Path) -> None:
    result = run_cli("fit", "--config", CONFIG, "--rounds", "3", "--logger.wandb", "false", "--logger.progress",
                     "false", "--run_dir", tmp_path, "--name", "criticalfl")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "criticalfl" / "metrics.csv")
    accuracy = [r["global_acc"] for r in rows]
    assert len(accuracy) == 3 and min(accuracy) > 0.1  # 10 classes: chance is 0.1
    assert accuracy[0] < accuracy[1] < accuracy[2]
    # the early phase is critical: N_com = 5, then doubled to the cap int(0.75 * 10) = 7
    assert [r["mean_peers"] for r in rows] == [5, 7, 7] and all(r["critical_fraction"] == 1 for r in rows)
    assert all(r["round_comm_mb"] > 0 for r in rows)
    summary = json.loads((tmp_path / "criticalfl" / "summary.json").read_text())
    assert summary["status"] == "completed"


def _fit(config: Path, run_dir: Path, *argv: str) -> None:
    result = run_cli("fit", "--config", config, "--run_dir", run_dir, *argv)
    assert result.rc == 0, result.err


def test_resume_equals_uninterrupted_run(tmp_path: Path) -> None:
    """Stopped after 2 of 4 rounds and resumed: metrics, weights, RNG streams and ledger equal the uninterrupted
    run's (test_resume's comparison). N_com = 1 and window 1 on 4 clients: the counts move every round, so a
    resume that lost them (or the FGN histories) would draw other peers."""
    config = tiny_config("CriticalFL", rounds=4, num_peers=1, window=1, batch_size=32)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"]["pool"] = ["cnn_8"]
    path = write_config(tmp_path / "criticalfl.yaml", config)
    runs = tmp_path / "runs"
    _fit(path, runs, "--name", "full")
    _fit(path, runs, "--name", "part", "--rounds", "2")
    _fit(path, runs, "--resume", str(runs / "part"), "--rounds", "4")
    assert_runs_equal(runs / "part", runs / "full")
    peers = [r["mean_peers"] for r in read_metrics(runs / "full" / "metrics.csv")]
    assert peers[0] == 1 and len(set(peers)) > 1


def test_state_dict_round_trips() -> None:
    algo = CriticalFL()
    algo.peer_counts, algo.fgn_history = [5, 7], [[0.5, 0.25], [1.0]]
    other = CriticalFL()
    other.load_state_dict(algo.state_dict())
    assert other.peer_counts == [5, 7] and other.fgn_history == [[0.5, 0.25], [1.0]]
    np.testing.assert_equal(other.state_dict(), algo.state_dict())
