"""The baselines of FedORION's and UA-PDFL's tables at ``--trainer.devices 2 --trainer.fuse on``: each rank runs the
client works it owns (fused where the step fuses), the server steps run on every rank alike, and every method's
metrics after 3 rounds equal one fused process within float32 rounding (the tolerance's derivation is in
``test_multi_process_fused``'s docstring: a rank sums the same numbers in groups of another size).

The settings are those of each method's own exact-resume test (its test file), on 8 clients so that a round's
clients split over both ranks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import tiny_config
from test_multi_process_fused import assert_two_processes_equal_one, fit_two_and_one

pytestmark = pytest.mark.slow

BN_POOL = ["cnn_bn_4_8", "cnn_bn_8"]
SERVER = {"client_fraction": 0.5, "local_epochs": 1, "lr": 0.05}
PEERS = {"num_peers": 2, "batch_size": 32}

#: method -> (init_args, data keys, pool); None: conftest's tiny pool
METHODS: dict[str, tuple[dict[str, Any], dict[str, Any], list[str] | None]] = {
    "DFedAvgM": (PEERS, {}, ["cnn_8"]),
    "DisPFL": ({**PEERS, "anneal_rounds": 3}, {}, ["cnn_8"]),
    "CriticalFL": ({**PEERS, "window": 1}, {}, ["cnn_8"]),
    "ServerFedAvg": (SERVER, {}, ["cnn_4_8"]),
    "ServerFedProx": ({**SERVER, "mu": 1.0}, {}, ["cnn_4_8"]),
    "SCAFFOLD": (SERVER, {}, ["cnn_4_8"]),
    "FedNTD": (SERVER, {}, ["cnn_4_8"]),
    "FedDF": ({"client_fraction": 0.5, "local_epochs": 1, "distill_steps": 5, "distill_batch_size": 16},
              {"server_fraction": 0.2, "proxy": {"size": 50}}, BN_POOL),
    "FedMD": ({**SERVER, "public_size": 50}, {"server_fraction": 0.25}, None),
    "DSFL": ({**SERVER, "public_size": 50, "distill_epochs": 1, "server_epochs": 1}, {"server_fraction": 0.25}, None),
    "KTpFL": (SERVER, {"server_fraction": 0.2}, None),
    "FedKEMF": ({**SERVER, "server_epochs": 1}, {"server_fraction": 0.2}, None),
    "FDmeta": ({**SERVER, "public_size": 40, "server_epochs": 2, "server_lr": 0.01}, {"server_fraction": 0.2},
               ["cnn_bn_4_8", "cnn_8"]),
}


def configs() -> dict[str, dict[str, Any]]:
    out = {}
    for name, (args, data, pool) in METHODS.items():
        config = tiny_config(name, rounds=3)
        config["algorithm"]["init_args"] = dict(args)
        config["data"] = {**config["data"], "num_clients": 8, **data}
        if pool is not None:
            config["models"]["pool"] = list(pool)
        config["trainer"] = {"fuse": "on", "accelerator": "cpu"}
        out[name] = config
    return out


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Every baseline at 2 processes and at 1 process, all fused."""
    return fit_two_and_one(tmp_path_factory.mktemp("baselines"), configs())


@pytest.mark.parametrize("name", list(METHODS))
def test_two_fused_processes_equal_one_fused_process(root: Path, name: str) -> None:
    assert_two_processes_equal_one(root, name)
