"""Client faults: dropped senders and lost returns; no crash, no lost state, exact resume."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
from conftest import run_cli, tiny_config, write_config
from federations import same_weights, tiny_federation
from test_resume import assert_runs_equal

from lit_fl.algorithms import DFML, DecentralizedFedAvg
from lit_fl.federation.faults import FaultsConfig
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.steps import StepRunner
from lit_fl.tracking import read_metrics


def test_every_sender_dropped_leaves_the_aggregator_alone() -> None:
    fed = tiny_federation(num_clients=5, pool=("cnn_4",))
    fed.faults = FaultsConfig(drop_prob=1.0)
    algo = DFML(mutual_epochs=1, sender_fraction=0.5)
    algo.setup(fed)
    ledger = CommunicationLedger.of(fed)
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), ledger)
    assert ledger.round_faults.dropped_senders == len(result.senders) > 0
    assert ledger.round_mb == 0.0
    for s in result.senders:  # trained locally, never reached the aggregator: no peak update
        assert fed.clients[s].alpha_peak == 0.0


def test_lost_returns_keep_the_locally_trained_model() -> None:
    fed = tiny_federation(num_clients=5, pool=("cnn_4",))
    twin = copy.deepcopy(fed)
    fed.faults = FaultsConfig(return_drop_prob=1.0)
    runner = StepRunner(accelerator="cpu")
    lossy, clean = DecentralizedFedAvg(sender_fraction=0.5), DecentralizedFedAvg(sender_fraction=0.5)
    ledger = CommunicationLedger.of(fed)
    result = lossy.run_round(1, fed, runner, ledger)
    # the twin federation runs local training only (no averaging) for the same clients and batches
    clean.select(1, twin)
    for n in (result.aggregator, *result.senders):
        clean.local_phase([twin.clients[n]], twin, runner)
    for s in result.senders:
        assert same_weights(fed.clients[s].model.state_dict(), twin.clients[s].model.state_dict())
    assert ledger.round_faults.lost_returns == len(result.senders)
    assert ledger.round_returned_mb > 0  # lost models were still transmitted


@pytest.mark.parametrize("algorithm", ["DFML", "DecentralizedFedAvg"])
def test_faulty_run_logs_drops_and_resumes_exactly(algorithm: str, tmp_path) -> None:  # noqa: ANN001
    config = tiny_config(algorithm, rounds=4)
    config["faults"] = {"drop_prob": 0.3, "return_drop_prob": 0.3}
    cfg = write_config(tmp_path / "faulty.yaml", config)
    base = ("fit", "--config", cfg, "--run_dir", tmp_path / "runs")
    assert run_cli(*base, "--name", "full").rc == 0
    assert run_cli(*base, "--name", "part", "--rounds", "2").rc == 0
    assert run_cli(*base, "--resume", tmp_path / "runs" / "part", "--rounds", "4").rc == 0
    rows = read_metrics(tmp_path / "runs" / "full" / "metrics.csv")
    assert sum(r["dropped_senders"] + r["lost_returns"] for r in rows) > 0
    assert_runs_equal(tmp_path / "runs" / "part", tmp_path / "runs" / "full")


@pytest.mark.parametrize(
    ("algorithm", "argv", "key"),
    [
        ("Local", ["--faults.drop_prob", "0.5"], "faults"),
        ("Local", ["--topology.name", "ring"], "topology"),
        ("PeriodicCodist", ["--topology.name", "ring"], "topology"),
    ],
)
def test_a_key_the_method_cannot_use_is_refused_in_one_line(
    algorithm: str, argv: list[str], key: str, tmp_path: Path
) -> None:
    cfg = tiny_config(algorithm)
    cfg["algorithm"]["init_args"] = {}
    config = write_config(tmp_path / "c.yaml", cfg)
    result = run_cli("fit", "--config", config, "--run_dir", tmp_path / "runs", *argv)
    assert result.rc == 2 and result.err.count("\n") == 1, result.err
    assert result.err.startswith(f"lit-fl: error: {key}: {algorithm} "), result.err
    assert not (tmp_path / "runs").exists()
