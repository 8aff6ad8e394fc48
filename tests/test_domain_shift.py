"""Codistillation's domain-shifted pools (papers/codistillation.txt sec. 3.3, Table 2) on the StackOverflow fixture in
FedJAX's format: posts keep their type as their domain (``data.options.domains: type``), the small pool trains on
answers only and the large pool on questions only (``algorithm.pool_domains``), and each server model is evaluated on
the whole test set and on its questions and its answers."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from conftest import run_cli, write_config
from fedjax_files import stackoverflow_files
from torch import nn

from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data.registry import load_dataset
from lit_fl.errors import ConfigError
from lit_fl.federation.builder import build_federation
from lit_fl.federation.evaluation import Evaluator
from lit_fl.tracking import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

Q, A = b"question", b"answer"
#: four users with both types (so that every pool keeps clients after the server's and validation's share)
POSTS = [
    [(b"the a", Q), (b"i is you", A), (b"zzz the", A), (b"a to", Q), (b"in in", A)],
    [(b"a a a", Q), (b"you and", A), (b"is the to", Q), (b"and i", A)],
    [(b"you", A), (b"to and in the a i is you", Q), (b"the the", A), (b"i a", Q)],
    [(b"is is", Q), (b"a you", A), (b"to to", Q), (b"the in", A), (b"and", Q)],
]
TEST_POSTS = [[(b"the to", Q), (b"qq a", A)]]
OPTIONS = {"vocab_size": 8, "max_length": 5, "domains": "type"}
SMALL, LARGE = "lstm_6_5_1", "lstm_8_6_2"


def test_loader_keeps_each_post_type_as_its_domain(tmp_path: Path) -> None:
    data = load_dataset("stackoverflow", stackoverflow_files(tmp_path, POSTS, TEST_POSTS), **OPTIONS)
    names = [[kind.decode() for _, kind in client] for client in POSTS]
    assert data.domains is not None and data.domains.names == ("question", "answer")
    assert [data.domains.names[k] for k in data.domains.train] == sum(names, [])
    assert [data.domains.names[k] for k in data.domains.test] == ["question", "answer"]


@pytest.mark.parametrize(("options", "match"), [
    ({"domains": "tags"}, "data.options.domains: 'tags' is not allowed; allowed: type"),
    ({"domains": "type", "type": "question"}, "data.options.domains: type keeps both types as domains"),
])
def test_loader_refuses_bad_domains_in_one_line(tmp_path: Path, options: dict[str, Any], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        load_dataset("stackoverflow", stackoverflow_files(tmp_path, POSTS, TEST_POSTS), vocab_size=8, **options)


class Always(nn.Module):
    """A language model that predicts token ``k`` at every position."""

    def __init__(self, k: int, vocab: int) -> None:
        super().__init__()
        self.k, self.vocab = k, vocab
        self.bias = nn.Parameter(torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.one_hot(torch.full_like(x, self.k), self.vocab).float() + self.bias


def test_server_accuracy_per_domain_by_hand(tmp_path: Path) -> None:
    """Test posts "the to" (question: targets the=3, to=4, EOS) and "qq a" (answer: targets OOV=11, a=5, EOS): a model
    always predicting 3 gets 1 of the 2 counted question targets, 0 of the 2 answer targets, 1 of 4 in all."""
    data = load_dataset("stackoverflow", stackoverflow_files(tmp_path, POSTS, TEST_POSTS), **OPTIONS)
    assert data.test_y.tolist() == [[3, 4, 2, 0, 0], [11, 5, 2, 0, 0]]
    fed = build_federation(data, DataConfig(dataset="stackoverflow", partition="natural", num_clients=4),
                           ModelsConfig(pool=[SMALL]), seed=0)
    fed.server["m"] = Always(3, data.num_classes)
    metrics = Evaluator().evaluate(fed)
    assert (metrics["server_acc/m"], metrics["server_acc/m/question"], metrics["server_acc/m/answer"]) == (
        0.25, 0.5, 0.0)


def _config(root: Path, algorithm: str, args: dict[str, Any], options: dict[str, Any]) -> dict[str, Any]:
    return {"seed": 0, "rounds": 2, "algorithm": {"class_path": f"lit_fl.algorithms.{algorithm}", "init_args": args},
            "data": {"dataset": "stackoverflow", "root": str(root), "partition": "natural", "num_clients": 4,
                     "server_fraction": 0.25, "options": options},
            "models": {"pool": [SMALL]}, "logger": {"wandb": False, "progress": False}, "run_dir": str(root / "runs")}


CODIST = {"small_arch": SMALL, "large_arch": LARGE, "large_clients": 1.0, "clients_per_round": 2, "distill_steps": 2,
          "distill_batch_size": 2, "batch_size": 2, "pool_domains": {"small": "answer", "large": "question"}}


@pytest.mark.parametrize("algorithm", ["MergedCodist", "PeriodicCodist"])
def test_each_pool_only_ever_trains_on_its_type(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                algorithm: str) -> None:
    """Two rounds of codistillation on the fixture: every batch a small-pool client trains on holds answers only,
    every large-pool batch questions only (both pools train, the distillation data holds both types), and the
    server models are evaluated on the mixed test set and on each type."""
    from lit_fl.data.batches import ClientBatches
    from lit_fl.steps.runner import StepRunner

    root = stackoverflow_files(tmp_path, POSTS, TEST_POSTS)
    domains = load_dataset("stackoverflow", root, seed=0, num_clients=4, **OPTIONS).domains
    seen: dict[str, list[int]] = {"small": [], "large": [], "distill": []}
    plan = ClientBatches.plan
    pool_of: dict[int, str] = {}

    def run_phase(self: StepRunner, works: list) -> list:  # noqa: ANN001
        for work in works:
            if work is not None:  # the pool by the model's size: the small LSTM embeds 6 dims, the large 8
                pool_of[id(work.batches)] = "small" if work.step.model.embedding.embedding_dim == 6 else "large"
        return original(self, works)

    def record(self: ClientBatches) -> list:
        batches = plan(self)
        seen[pool_of.get(id(self), "distill")] += [i for b in batches for i in b.indices.tolist()]
        return batches

    original = StepRunner.run_phase
    monkeypatch.setattr(StepRunner, "run_phase", run_phase)
    monkeypatch.setattr(ClientBatches, "plan", record)
    args = {**CODIST, **({"period": 1} if algorithm == "PeriodicCodist" else {})}
    path = write_config(tmp_path / "c.yaml", _config(tmp_path, algorithm, args, OPTIONS))
    result = run_cli("fit", "--config", path, "--name", "shift")
    assert result.rc == 0, result.err
    assert seen["small"] and seen["large"], seen
    assert {domains.names[domains.train[i]] for i in seen["small"]} == {"answer"}
    assert {domains.names[domains.train[i]] for i in seen["large"]} == {"question"}
    assert {domains.names[domains.train[i]] for i in seen["distill"]} == {"question", "answer"}
    rows = read_metrics(tmp_path / "runs" / "shift" / "metrics.csv")
    assert [int(r["round"]) for r in rows] == [1, 2]
    for model in ("small", "large"):
        for suffix in ("", "/question", "/answer"):
            assert 0.0 <= rows[-1][f"server_acc/{model}{suffix}"] <= 1.0


@pytest.mark.parametrize(("args", "options", "match"), [
    ({"pool_domains": {"medium": "answer"}}, OPTIONS,
     "algorithm.pool_domains: 'medium' is not a pool; allowed: small, large"),
    ({"pool_domains": {"small": "comment"}}, OPTIONS,
     "algorithm.pool_domains.small: 'comment' is not a domain of the data; allowed: question, answer"),
    ({}, {"vocab_size": 8, "max_length": 5},
     "algorithm.pool_domains: stackoverflow's samples have no domains; give the dataset its domains"),
])
def test_pool_domains_refused_in_one_line(tmp_path: Path, args: dict[str, Any], options: dict[str, Any],
                                          match: str) -> None:
    stackoverflow_files(tmp_path, POSTS, TEST_POSTS)
    path = write_config(tmp_path / "c.yaml", _config(tmp_path, "MergedCodist", {**CODIST, **args}, options))
    result = run_cli("fit", "--config", path, "--name", "refused")
    assert result.rc == 2 and match in result.err and len(result.err.strip().splitlines()) == 1, result.err


@pytest.mark.parametrize("config", ["table2_so_fedavg", "table2_so_periodic_codist", "table2_so_merged_codist"])
def test_stackoverflow_table2_configs_run_a_round_on_the_fixture(tmp_path: Path, config: str) -> None:
    """The configurations of sweeps/codistillation_table2_so.yaml, shrunk to the fixture: its 4 users, a vocabulary of
    8 words, the paper's LSTMs (App. E widths); both server models evaluated on the mixed test set and on each type."""
    stackoverflow_files(tmp_path, POSTS, TEST_POSTS)
    path = Path(__file__).resolve().parents[1] / "experiments" / "codistillation" / f"{config}.yaml"
    result = run_cli("fit", "--config", path, "--rounds", "1", "--eval_every", "1",
                     "--data.num_clients", "4", "--data.root", tmp_path,
                     "--data.server_fraction", "0.25", "--data.options", '{"vocab_size": 8, "max_length": 5, '
                     '"domains": "type", "test_size": 2}', "--algorithm.init_args.clients_per_round", "2",
                     "--algorithm.init_args.distill_steps", "2", "--logger.wandb", "false", "--logger.progress",
                     "false", "--run_dir", tmp_path / "runs", "--name", config)
    assert result.rc == 0, result.err
    row = read_metrics(tmp_path / "runs" / config / "metrics.csv")[0]
    for key in ("small", "large", "small/answer", "large/answer", "small/question", "large/question"):
        assert 0.0 <= row[f"server_acc/{key}"] <= 1.0, key
