"""Next-token prediction end to end: PAD-masked losses and FedJAX's accuracy without PAD and EOS on hand-computed
padded batches, the LSTM language models (App. E's parameter counts, fused = unfused), and ``lit-fl fit`` on
fixture files in the real TFF/FedJAX format with ``data.partition natural``."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import run_cli, write_config
from fedjax_files import femnist_files, stackoverflow_files

from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data.dataset import ImageDataset
from lit_fl.data.tokens import correct_counts, counted_totals
from lit_fl.federation.builder import build_federation
from lit_fl.federation.evaluation import Evaluator
from lit_fl.losses import batched_supervised_losses, cross_entropy, peer_losses, wsm_loss
from lit_fl.models import create_model, num_parameters
from lit_fl.tracking import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")
#: float64 unit roundoff (1.1e-16) x 10^6 amplification, as tests/test_fusion.py
RTOL = 1e-10


def test_loss_masks_padding_by_hand() -> None:
    """Targets [[3, 2, 0], [4, 0, 0]] (a word, EOS, PAD): the loss is the mean of -log softmax over the 3 non-PAD
    positions only."""
    logits = torch.tensor([[[0.0, 1, 2, 3, 4], [1, 0, 5, 0, 0], [9, 9, 9, 9, -9]],
                           [[2.0, 0, 0, 0, 1], [0, 0, 0, 0, 0], [5, 0, 0, 0, 0]]], dtype=torch.float64)
    y = torch.tensor([[3, 2, 0], [4, 0, 0]])

    def nll(z: list[float], k: int) -> float:
        return math.log(sum(math.exp(v) for v in z)) - z[k]

    expected = (nll([0, 1, 2, 3, 4], 3) + nll([1, 0, 5, 0, 0], 2) + nll([2, 0, 0, 0, 1], 4)) / 3
    assert cross_entropy(logits, y).item() == pytest.approx(expected, rel=RTOL)
    assert wsm_loss(logits, y, torch.ones(5, dtype=torch.float64)).item() == pytest.approx(expected, rel=RTOL)
    stacked = torch.stack([logits, 2 * logits])
    assert peer_losses(stacked, y, None, loss="ce")[0].item() == pytest.approx(expected, rel=RTOL)
    # batched (per-client batches): client 0 holds both rows, client 1 only row 1 (row 0 is its padding)
    weight = torch.tensor([[0.5, 0.5], [0.0, 1.0]], dtype=torch.float64)
    per_client = batched_supervised_losses(torch.stack([logits, logits]), torch.stack([y, y]), weight,
                                           torch.ones(2, 5, dtype=torch.float64), "ce")
    assert per_client.tolist() == pytest.approx([expected, nll([2, 0, 0, 0, 1], 4)], rel=RTOL)


def test_accuracy_counts_neither_pad_nor_eos_by_hand() -> None:
    """Predictions [[3, 2, 1], [4, 9, 0]] against [[3, 2, 0], [5, 9, 0]]: counted targets are 3, 5, 9 (EOS 2 and
    PAD 0 left out, FedJAX accuracy_no_eos), of which 3 and 9 are right: 2 of 3."""
    y = torch.tensor([[3, 2, 0], [5, 9, 0]])
    logits = torch.nn.functional.one_hot(torch.tensor([[3, 2, 1], [4, 9, 0]]), 10).double()
    assert correct_counts(logits, y, sequence=True).tolist() == [1, 1]
    assert counted_totals(y, sequence=True).tolist() == [1, 2]


def _sequence_federation(fuse_pool: tuple[str, ...] = ("lstm_6_5_1",), num_clients: int = 3) -> Any:
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(3, 12, (40, 7), generator=g)
    lengths = torch.randint(1, 7, (40,), generator=g)
    positions = torch.arange(7).expand(40, 7)
    y = torch.where(positions < lengths[:, None], tokens, 0)
    y[torch.arange(40), lengths - 1] = 2  # EOS, then PAD
    x = torch.cat([torch.ones(40, 1, dtype=torch.long), y[:, :-1]], dim=1) * (positions < lengths[:, None])
    data = ImageDataset("seq", x[:30], y[:30], x[30:], y[30:], num_classes=12)
    config = DataConfig(dataset="synthetic", num_clients=num_clients, partition="iid")
    return build_federation(data, config, ModelsConfig(pool=list(fuse_pool)), seed=0, same_init=False)


@pytest.mark.parametrize("fuse", [False, True])
def test_evaluator_token_accuracy_matches_a_hand_count(fuse: bool) -> None:
    fed = _sequence_federation()
    metrics = Evaluator(fuse=fuse).evaluate(fed)
    expected_global, expected_local = [], []
    for client in fed.clients:
        with torch.no_grad():
            for x, y, out in ((fed.data.test_x, fed.data.test_y, expected_global),
                              (fed.data.train_x[client.val_idx], fed.data.train_y[client.val_idx], expected_local)):
                pred = client.model.eval()(x).argmax(-1)
                counted = (y != 0) & (y != 2)
                out.append(((pred == y) & counted).sum().item() / counted.sum().item())
    assert metrics["global_acc"] == pytest.approx(sum(expected_global) / 3, rel=1e-6)
    assert metrics["local_acc"] == pytest.approx(sum(expected_local) / 3, rel=1e-6)


def test_codistillation_lstm_parameter_counts() -> None:
    """App. E: small (embedding 96, hidden 70, one layer) 1,984,348 parameters, large (192, 140, two layers)
    4,278,644, at FedJAX's StackOverflow outputs (10,000 words + PAD, BOS, EOS, OOV)."""
    assert num_parameters(create_model("codist_lstm_small", (20,), 10_004)) == 1_984_348
    assert num_parameters(create_model("codist_lstm_large", (20,), 10_004)) == 4_278_644
    # FedJAX's Shakespeare model: embedding 90 x 8, LSTM (8 + 256) x 1024 + 1024 and (256 + 256) x 1024 + 1024,
    # head 256 x 90 + 90
    expected = 90 * 8 + (264 * 1024 + 1024) + (512 * 1024 + 1024) + (256 * 90 + 90)
    assert num_parameters(create_model("char_lstm", (80,), 90)) == expected


def test_lstm_cell_is_haikus_by_hand() -> None:
    """One step from zero state: c = sigmoid(i) tanh(g) (the forget gate meets c = 0), h = sigmoid(o) tanh(c)."""
    from lit_fl.models.lstm import LSTMLayer

    layer = LSTMLayer(2, 1).double()
    with torch.no_grad():
        layer.gates.weight.copy_(torch.tensor([[1.0, 0, 5], [0, 1, 5], [2, 2, 5], [1, -1, 5]]))  # rows i, g, f, o
        layer.gates.bias.copy_(torch.tensor([0.0, 0.5, 0, 0]))
    x = torch.tensor([[[0.3, -0.2]]], dtype=torch.float64)
    i, g, o = 0.3, -0.2 + 0.5, 0.5
    c = 1 / (1 + math.exp(-i)) * math.tanh(g)
    assert layer(x).item() == pytest.approx(1 / (1 + math.exp(-o)) * math.tanh(c), rel=RTOL)


def test_lstm_client_work_fused_equals_unfused() -> None:
    """Local training of three LSTM clients, fused (vmap over stacked weights) and one by one, in float64."""
    from lit_fl.algorithms import Local
    from lit_fl.steps import StepRunner

    runs = []
    for fuse in ("off", "on"):
        fed = _sequence_federation()
        for client in fed.clients:
            client.model.double()
        Local(lr=0.5, batch_size=4).local_phase(fed.clients, fed, StepRunner(accelerator="cpu", fuse=fuse))
        runs.append([copy.deepcopy(c.model.state_dict()) for c in fed.clients])
    start = _sequence_federation()
    for fused, alone, initial in zip(runs[1], runs[0], start.clients):
        assert not torch.equal(alone["head.weight"], initial.model.state_dict()["head.weight"].double())
        for key in alone:
            torch.testing.assert_close(fused[key], alone[key], rtol=RTOL, atol=RTOL)


# -- lit-fl fit on fixture files ---------------------------------------------------------------------------------

SO_OPTIONS = {"vocab_size": 8, "max_length": 5}


def _config(root: Path, algorithm: str, args: dict[str, Any], dataset: str, pool: list[str],
            options: dict[str, Any], **data: Any) -> dict[str, Any]:
    return {"seed": 0, "rounds": 2, "algorithm": {"class_path": f"lit_fl.algorithms.{algorithm}", "init_args": args},
            "data": {"dataset": dataset, "root": str(root), "partition": "natural", "num_clients": 3,
                     "options": options, **data},
            "models": {"pool": pool}, "logger": {"wandb": False, "progress": False}, "run_dir": str(root / "runs")}


DECENTRALIZED = {"sender_fraction": 0.5, "batch_size": 2}
DFML_ARGS = {**DECENTRALIZED, "mutual_epochs": 1, "period": 2}
CODIST = {"large_clients": [0], "clients_per_round": 1, "distill_steps": 2, "distill_batch_size": 2, "batch_size": 2}


@pytest.mark.parametrize(("name", "algorithm", "args", "dataset", "pool", "data"), [
    ("fedavg-femnist", "DecentralizedFedAvg", DECENTRALIZED, "femnist", ["cnn_4"], {}),
    ("dfml-femnist", "DFML", DFML_ARGS, "femnist", ["cnn_4", "cnn_8"], {}),
    ("fedavg-so", "DecentralizedFedAvg", DECENTRALIZED, "stackoverflow", ["lstm_6_5_1"], {}),
    ("dfml-so", "DFML", DFML_ARGS, "stackoverflow", ["lstm_6_5_1", "lstm_6_4_2"], {}),
    ("codist1-so", "PeriodicCodist", {**CODIST, "period": 1, "small_arch": "lstm_6_5_1", "large_arch": "lstm_8_6_1"},
     "stackoverflow", ["lstm_6_5_1"], {"server_fraction": 0.3}),
    ("fedprox-so", "DecentralizedFedProx", {**DECENTRALIZED, "mu": 0.1}, "stackoverflow", ["lstm_6_5_1"], {}),
    ("local-so", "Local", {"batch_size": 2}, "stackoverflow", ["lstm_6_5_1"], {}),
    ("serverfedavg-so", "ServerFedAvg", {"batch_size": 2}, "stackoverflow", ["lstm_6_5_1"], {}),
    ("serverfedprox-so", "ServerFedProx", {"batch_size": 2, "mu": 0.1}, "stackoverflow", ["lstm_6_5_1"], {}),
    ("codist2-so", "MergedCodist", {**CODIST, "small_arch": "lstm_6_5_1", "large_arch": "lstm_8_6_2"},
     "stackoverflow", ["lstm_6_5_1"], {"server_fraction": 0.3}),
])
def test_fit_two_rounds_natural(tmp_path: Path, name: str, algorithm: str, args: dict[str, Any], dataset: str,
                                pool: list[str], data: dict[str, Any]) -> None:
    femnist_files(tmp_path) if dataset == "femnist" else stackoverflow_files(tmp_path)
    options = SO_OPTIONS if dataset == "stackoverflow" else {}
    path = write_config(tmp_path / "c.yaml", _config(tmp_path, algorithm, dict(args), dataset, pool, options, **data))
    result = run_cli("fit", "--config", path, "--name", name)
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "runs" / name / "metrics.csv")
    assert [int(r["round"]) for r in rows] == [1, 2]
    assert all(0.0 <= r["global_acc"] <= 1.0 and math.isfinite(r["train_loss"]) for r in rows)


@pytest.mark.parametrize(("algorithm", "args", "match"), [
    ("FedORION", {}, "FedORION cannot run on stackoverflow: its samples are token sequences"),
    ("DFML", {**DFML_ARGS, "noise_batches": 1}, "algorithm.noise_batches: the noise distillation draws Gaussian"),
])
def test_methods_that_need_images_refuse_sequences(tmp_path: Path, algorithm: str, args: dict[str, Any],
                                                   match: str) -> None:
    stackoverflow_files(tmp_path)
    path = write_config(tmp_path / "c.yaml", _config(tmp_path, algorithm, args, "stackoverflow", ["lstm_6_5_1"],
                                                     SO_OPTIONS))
    result = run_cli("fit", "--config", path, "--name", "refused")
    assert result.rc == 2 and match in result.err and len(result.err.strip().splitlines()) == 1, result.err


def test_image_model_on_sequences_is_refused(tmp_path: Path) -> None:
    stackoverflow_files(tmp_path)
    path = write_config(tmp_path / "c.yaml", _config(tmp_path, "DecentralizedFedAvg", DECENTRALIZED, "stackoverflow",
                                                     ["cnn_4"], SO_OPTIONS))
    result = run_cli("fit", "--config", path, "--name", "refused")
    assert result.rc == 2 and "models.pool: cnn_4 is an image model and stackoverflow holds token sequences" in (
        result.err), result.err


@pytest.mark.parametrize("config", ["table1_so_fedavg", "table1_so_periodic_codist", "table1_so_merged_codist"])
def test_stackoverflow_table1_configs_run_a_round_on_the_fixture(tmp_path: Path, config: str) -> None:
    """The configurations of sweeps/codistillation_table1_so.yaml, shrunk to the fixture: its 3 users, a vocabulary of
    8 words, client 0 as the high-capacity pool; the paper's LSTMs (App. E widths) at the fixture's 12 tokens."""
    stackoverflow_files(tmp_path)
    path = Path(__file__).resolve().parents[1] / "experiments" / "codistillation" / f"{config}.yaml"
    result = run_cli("fit", "--config", path, "--rounds", "1", "--eval_every", "1",
                     "--data.num_clients", "3", "--data.root", tmp_path,
                     "--data.server_fraction", "0.3", "--data.options", '{"vocab_size": 8, "max_length": 5}',
                     "--algorithm.init_args.large_clients", "[0]", "--algorithm.init_args.clients_per_round", "1",
                     "--algorithm.init_args.distill_steps", "2", "--logger.wandb", "false", "--logger.progress",
                     "false", "--run_dir", tmp_path / "runs", "--name", config)
    assert result.rc == 0, result.err
    row = read_metrics(tmp_path / "runs" / config / "metrics.csv")[0]
    assert 0.0 <= row["server_acc/small"] <= 1.0 and 0.0 <= row["server_acc/large"] <= 1.0
