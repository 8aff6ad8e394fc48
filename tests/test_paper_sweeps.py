"""The paper-scale sweeps of the figures and of the tables issue 31 added: one configuration of each runs one round
through ``lit-fl fit`` with the sweep's own parameters (W&B's command line for that run), shrunk to synthetic or
fixture data, a few clients and small models. Their dry runs and claims are checked by tests/test_sweep.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import run_cli
from fedjax_files import write_file
from test_image_datasets import pathmnist_arrays

from lit_fl.configs import ROOT
from lit_fl.suite.engine import agent_args, expand
from lit_fl.suite.sweep_file import load_sweep_file

SYNTHETIC = ["--data.dataset", "synthetic", "--data.download", "false", "--data.num_clients", "4",
             "--data.options", '{"num_classes": 4, "input_shape": [3, 32, 32], "num_train": 64, "num_test": 16}']
SMALL_POOL = ["--models.pool", "[cnn_4_8, cnn_2_4]"]
DECENTRALIZED = SYNTHETIC + SMALL_POOL
FEDORION = SYNTHETIC + ["--algorithm.init_args.local_epochs", "1", "--algorithm.init_args.server_epochs", "1",
                        "--algorithm.init_args.noise_batch_size", "4"]

H_HET = ["resnet18", "timm:resnet34", "shufflenetv2", "mobilenetv2"]  # FedORION's pool beside its global model

#: sweep -> (the parameters that pick its run, the overrides that shrink it)
CASES: dict[str, tuple[dict[str, Any], list[str]]] = {
    "dfml_table5_images": ({"config": "experiments/dfml_tables/table5_heterofl.yaml"},
                           DECENTRALIZED + ["--algorithm.init_args.batch_size", "16"]),
    "dfml_table7": ({"config": "experiments/dfml_tables/table7_dfml.yaml"},
                    DECENTRALIZED + ["--algorithm.init_args.mutual_epochs", "1"]),
    "dfml_table8": ({"config": "experiments/dfml_tables/table6_fedavg.yaml"}, DECENTRALIZED),
    "dfml_fig12": ({"config": "experiments/dfml_tables/fig12_serverfedavg.yaml"},
                   SYNTHETIC + ["--models.pool", "[cnn_4]"]),
    "dfml_ablations": ({"algorithm.init_args": {"fixed_aggregator": 0}},
                       DECENTRALIZED + ["--algorithm.init_args.mutual_epochs", "1"]),
    "dfml_fig19": ({"config": "experiments/dfml_tables/fig19_dfml_s20.yaml"},
                   DECENTRALIZED + ["--data.num_clients", "10", "--algorithm.init_args.mutual_epochs", "1"]),
    "fedorion_table3": ({"algorithm.init_args": {"server_epochs": 5, "aggregate": False, "global_label_loss": True}},
                        FEDORION + ["--models.pool", "[cnn_bn_4, cnn_bn_2]"]),
    "fedorion_table4": ({"models.pool": H_HET + ["wrn_16_1"]},  # the sweep's WRN16 global model, small company
                        FEDORION + ["--models.pool", "[resnet18_2_4_8_16, wrn_16_1]"]),
    "fedorion_table4_noise": ({"algorithm.init_args.noise": "dead_leaves"},
                              FEDORION + ["--models.pool", "[cnn_bn_4, cnn_bn_2]"]),
    "fedorion_fig3": ({"models.pool": H_HET + ["wrn_40_1"] * 8},
                      FEDORION + ["--data.num_clients", "6",
                                  "--models.pool", "[resnet18_2_4_8_16, wrn_10_1, wrn_10_1]"]),  # a repeated model
    "uapdfl_table3": ({"config": "experiments/uapdfl/cnn_uapdfl.yaml", "algorithm.init_args.num_peers": 1},
                      SYNTHETIC + ["--models.pool", "[cnn_4]"]),
    "uapdfl_table4": ({"config": "experiments/uapdfl/cnn_uapdfl.yaml", "algorithm.init_args.num_peers": 1},
                      SYNTHETIC + ["--models.pool", "[cnn_4]"]),
    "uapdfl_fig13": ({"algorithm.init_args": {"client_dropout": False, "layer_wise": True}},
                     SYNTHETIC + ["--models.pool", "[cnn_4]", "--algorithm.init_args.num_peers", "2"]),
    "codistillation_fig4": ({"config": "experiments/codistillation/table1_merged_codist.yaml", "data.proxy.size": 150},
                            [*SYNTHETIC, "--data.partition", "iid", "--data.options",
                             '{"num_classes": 4, "input_shape": [3, 32, 32], "num_train": 600, "num_test": 16}',
                             "--algorithm.init_args.clients_per_round", "1",
                             "--algorithm.init_args.distill_steps", "2"]),
    "defkt_fig4": ({"config": "experiments/defkt/mnist_defkt.yaml"}, SYNTHETIC + ["--models.pool", "[cnn_4]"]),
    "defkt_fig5": ({"config": "experiments/defkt/fmnist_combo.yaml"}, SYNTHETIC + ["--models.pool", "[cnn_4]"]),
    "defkt_fig5_zeta4": ({"config": "experiments/defkt/fmnist_fullavg.yaml"}, SYNTHETIC + ["--models.pool", "[cnn_4]"]),
    "defkt_fig6": ({"config": "experiments/defkt/cifar10_defkt.yaml"}, SYNTHETIC + ["--models.pool", "[cnn_4]"]),
}


def _run_args(sweep: str, pick: dict[str, Any]) -> list[str]:
    """W&B's command-line arguments of the sweep's first run whose parameters include ``pick``."""
    runs = expand(load_sweep_file(ROOT / "sweeps" / f"{sweep}.yaml"))
    params = next(p for p in runs if all(p.get(k) == v for k, v in pick.items()))
    return agent_args(params)


def _fit(tmp_path: Path, name: str, args: list[str], overrides: list[str]) -> dict[str, Any]:
    result = run_cli("fit", *args, "--rounds", "1", "--eval_every", "1", "--logger.wandb", "false",
                     "--logger.progress", "false", *overrides, "--run_dir", tmp_path / "runs", "--name", name)
    assert result.rc == 0, result.err
    return json.loads((tmp_path / "runs" / name / "summary.json").read_text())


def test_every_figure_and_new_table_sweep_has_a_one_round_case() -> None:
    new = {"dfml_table5_images", "dfml_table7", "dfml_table8", "dfml_fig12", "dfml_ablations", "dfml_fig19",
           "fedorion_table3", "fedorion_table4", "fedorion_table4_noise", "fedorion_fig3", "uapdfl_table3",
           "uapdfl_table4", "uapdfl_table5",
           "uapdfl_fig13", "defkt_fig4", "defkt_fig5", "defkt_fig5_zeta4", "defkt_fig6", "codistillation_table1_fed",
           "codistillation_fig4"}
    assert all((ROOT / "sweeps" / f"{name}.yaml").is_file() for name in new)
    assert new == set(CASES) | {"uapdfl_table5", "codistillation_table1_fed"}  # those two have their own tests below


@pytest.mark.parametrize("sweep", sorted(CASES))
def test_a_configuration_of_the_sweep_runs_one_round(sweep: str, tmp_path: Path) -> None:
    pick, overrides = CASES[sweep]
    summary = _fit(tmp_path, sweep, _run_args(sweep, pick), overrides)
    assert summary["status"] == "completed" and summary["rounds"] == 1


def test_uapdfl_table5_runs_one_round_on_a_pathmnist_file_in_label_shards(tmp_path: Path) -> None:
    """Table 5's extreme non-IID cell on a MedMNIST ``.npz`` the test writes (9 classes, 3 x 28 x 28)."""
    np.savez_compressed(tmp_path / "pathmnist.npz", **pathmnist_arrays(sizes=(36, 9, 9)))
    args = _run_args("uapdfl_table5", {"config": "experiments/uapdfl/cnn_uapdfl.yaml",
                                       "data": {"dataset": "pathmnist", "partition": "shards", "zeta": 2}})
    summary = _fit(tmp_path, "pathmnist", args, ["--data.root", str(tmp_path), "--data.num_clients", "4",
                                                 "--models.pool", "[cnn_4]", "--algorithm.init_args.num_peers", "2"])
    assert summary["status"] == "completed"


def test_codistillation_table1_fed_runs_one_round_on_a_federated_cifar100_file(tmp_path: Path) -> None:
    """The federated CIFAR-100 cell on a FedJAX-format SQLite file of 3 clients the test writes."""
    rng = np.random.default_rng(0)

    def client(n: int) -> dict[str, np.ndarray]:
        return {"image": rng.integers(0, 256, (n, 32, 32, 3)).astype(np.uint8),
                "label": rng.integers(0, 100, n).astype(np.int64)}

    write_file(tmp_path / "federated_cifar100_train.sqlite", [(f"{k}".encode(), client(10)) for k in range(3)])
    write_file(tmp_path / "federated_cifar100_test.sqlite", [(b"0", client(8))])
    pick = {"config": "experiments/codistillation/table1_fed_merged_codist.yaml"}
    args = _run_args("codistillation_table1_fed", pick)
    summary = _fit(tmp_path, "fed_cifar100", args, [
        "--data.root", str(tmp_path), "--data.num_clients", "3", "--data.server_fraction", "0.3",
        "--algorithm.init_args.large_clients", "[0]", "--algorithm.init_args.clients_per_round", "1",
        "--algorithm.init_args.distill_steps", "2"])
    assert summary["status"] == "completed"
