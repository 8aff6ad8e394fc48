"""Fusion and several processes together: with ``--trainer.fuse on --trainer.devices 2`` each rank fuses the client
works it owns (and, in DFML's mutual learning, the students it owns); every method's metrics after 3 rounds equal
one fused process within float32 rounding.

Why a tolerance and not bit for bit: a rank fuses a subset of the clients one process fuses, so its grouped
convolutions and stacked reductions sum the same numbers in groups of another size. The metrics compared are
accuracies (counts of exact argmax decisions) and losses averaged over clients; after three rounds of float32 SGD
on 6 clients, a reordered sum moves a weight by a few float32 ulps (~1e-7 relative) per step, which moves a loss
by about the same. :data:`RTOL` (1e-5) is the issue's bound: 100x that, and 10^4x below what a wrong client or a
skipped update moves (percent-level changes of loss and accuracy)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli, tiny_config, write_config
from test_codistillation import codist_config
from test_multi_process import fit_two_processes, one_thread
from test_resume import TIMING as RESUME_TIMING

from lit_fl.tracking import read_metrics

pytestmark = pytest.mark.slow

RTOL = 1e-5
#: columns that differ between runs by more than arithmetic: wall time
TIMING = RESUME_TIMING

#: every built-in method, in a setting where its client phases have two clients of a kind on each rank
METHODS: dict[str, dict[str, Any]] = {
    "DFML": {"sender_fraction": 1.0, "mutual_epochs": 1, "period": 2, "period_increment": 2, "noise_batches": 2,
             "noise_batch_size": 8},
    "DecentralizedFedAvg": {"sender_fraction": 1.0},
    "DecentralizedFedProx": {"sender_fraction": 1.0, "mu": 1.0},
    "HeteroFL": {"sender_fraction": 1.0},
    "FedRolex": {"sender_fraction": 1.0},
    "FederatedDropout": {"sender_fraction": 1.0},
    "DecentralizedFML": {"sender_fraction": 1.0},
    "DefKT": {"sender_fraction": 0.5},
    "FullAvg": {"sender_fraction": 0.5},
    "Combo": {"sender_fraction": 0.5},
    "Local": {},
    "FedPer": {"num_peers": 2},
    "UAPDFL": {"num_peers": 2},
    "FedORION": {"client_fraction": 1.0, "local_epochs": 1, "server_epochs": 1, "noise_batch_size": 8},
}
CODIST = {"small_arch": "cnn_4_8", "large_arch": "cnn_8", "large_clients": [0, 2, 4, 5], "clients_per_round": 4,
          "distill_steps": 2, "distill_batch_size": 16, "batch_size": 16}


def configs() -> dict[str, dict[str, Any]]:
    out = {}
    for name, args in METHODS.items():
        config = tiny_config(name, rounds=3, **args)
        config["algorithm"]["init_args"] = {**args, "batch_size": 16}
        config["data"]["num_clients"] = 8
        config["models"]["pool"] = ["cnn_4_8", "cnn_8_16"] if name in ("HeteroFL", "FedRolex", "FederatedDropout",
                                                                       "DFML") else ["cnn_4_8"]
        out[name] = config
    for name in ("PeriodicCodist", "MergedCodist"):
        config = codist_config(name, rounds=3, **CODIST)
        config["data"]["num_clients"] = 8
        config["models"]["pool"] = ["cnn_4_8"]
        out[name] = config
    for config in out.values():
        config["trainer"] = {"fuse": "on", "accelerator": "cpu"}
    return out


def fit_two_and_one(root: Path, configs: dict[str, dict[str, Any]]) -> Path:
    """Every config at 2 processes (one torchrun launch, into ``root/two``) and at 1 process (``root/one``)."""
    runs: list[list[str]] = []
    for name, config in configs.items():
        cfg = write_config(root / f"{name}.yaml", config)
        runs.append(["fit", "--config", str(cfg), "--run_dir", str(root / "two"), "--name", name,
                     "--trainer.devices", "2"])
    fit_two_processes(runs, timeout=420)
    with one_thread():
        for name in configs:
            result = run_cli("fit", "--config", root / f"{name}.yaml", "--run_dir", root / "one", "--name", name)
            assert result.rc == 0, result.err
    return root


def assert_two_processes_equal_one(root: Path, name: str) -> None:
    """Run ``name``'s metrics at 2 processes equal 1 process's within :data:`RTOL`, round by round (wall time
    aside)."""
    two, one = (read_metrics(root / side / name / "metrics.csv") for side in ("two", "one"))
    assert len(two) == len(one) == 3
    for round_, (a, b) in enumerate(zip(two, one), start=1):
        assert set(a) == set(b)
        for key in sorted(set(a) - TIMING):
            x, y = float(a[key]), float(b[key])
            if math.isnan(y):
                assert math.isnan(x), f"{name} round {round_} {key}: {x} vs NaN"
                continue
            assert abs(x - y) <= RTOL * max(abs(y), 1e-3), f"{name} round {round_} {key}: {x} vs {y}"


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every method at 2 processes and at 1 process, all fused."""
    return fit_two_and_one(tmp_path_factory.mktemp("fused"), configs())


@pytest.mark.parametrize("name", list(configs()))
def test_two_fused_processes_equal_one_fused_process(root: Path, name: str) -> None:
    assert_two_processes_equal_one(root, name)
