"""A client step that cannot fuse under ``trainer.fuse on`` says so once per step class and run, in one line on the
run's console naming the step and what it lacks (:mod:`lit_fl.steps.unfused`); a step that fuses, or a run with
fusion off, says nothing."""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

import lightning as L
import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from federations import tiny_federation
from torch import Tensor, nn

from lit_fl.algorithms import Local
from lit_fl.steps import LocalTraining, StepRunner
from lit_fl.steps.phase import ClientWork
from lit_fl.steps.unfused import why_unfused

pytestmark = pytest.mark.usefixtures("one_thread")

#: a user's method whose client step defines no fusion: the module a user would keep next to their config
USER_MODULE = '''
import torch
import torch.nn.functional as F
import lightning as L

from lit_fl.algorithms import DecentralizedFedAvg


class PlainStep(L.LightningModule):
    def __init__(self, model, lr):
        super().__init__()
        self.model, self.lr = model, lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.cross_entropy(self.model(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.model.parameters(), lr=self.lr)


class PlainFedAvg(DecentralizedFedAvg):
    def local_work(self, client, federation):
        return self.work(client, PlainStep(client.model, self.optimizer.lr), federation, self.local_epochs)
'''


class _Step(L.LightningModule):
    """Plain SGD on cross-entropy; the subclasses declare parts of the fusion contract."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        return nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.model.parameters(), lr=0.01)


class NoContract(_Step):
    pass


class KeyOnly(_Step):
    def fusion_key(self) -> Hashable | None:
        return "k"


class BatchedOnly(_Step):
    @classmethod
    def batched(cls, steps: Sequence[Any], num_batches: Sequence[int]) -> Any:
        raise AssertionError("never called")


class Declines(KeyOnly, BatchedOnly):
    def fusion_key(self) -> Hashable | None:
        return None


class GaussianDropout(nn.Module):
    """A user's own noise layer: fused training cannot know that vmap batches its draws."""

    p = 0.5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * (1 + torch.randn_like(x)) if self.training else x


def test_every_missing_part_of_the_contract_is_named() -> None:
    linear = nn.Linear(2, 2)
    assert why_unfused(NoContract(linear)) == ("it defines neither fusion_key() nor the classmethod "
                                               "batched(steps, num_batches)")
    assert why_unfused(KeyOnly(linear)) == "it defines fusion_key() but no classmethod batched(steps, num_batches)"
    assert why_unfused(BatchedOnly(linear)) == ("it defines the classmethod batched(steps, num_batches) but no "
                                                "fusion_key()")
    assert why_unfused(Declines(linear)) == "its fusion_key() returned None"
    assert why_unfused(Declines(nn.Sequential(linear, GaussianDropout()))) == (
        "its fusion_key() returned None (its model has a random layer whose draws fused training cannot make per "
        "model)")
    assert why_unfused(LocalTraining(nn.Sequential(linear, nn.Dropout(0.5)), torch.ones(2))) is None  # fuses
    proportions = torch.ones(2)
    assert why_unfused(LocalTraining(linear, proportions)) is None
    assert why_unfused(LocalTraining(nn.Sequential(linear, nn.BatchNorm1d(2)), proportions)) == (
        "its fusion_key() returned None (its model has BatchNorm in training mode, whose batch statistics padding "
        "would change)")


def _works(step_class: type[_Step]) -> list[ClientWork | None]:
    """Two clients' works of ``step_class`` over a tiny federation."""
    fed, algo = tiny_federation(num_clients=2), Local(batch_size=64)
    return [algo.work(c, step_class(c.model), fed, 1) for c in fed.clients]


def test_the_runner_says_it_once_per_step_class_over_several_phases(capsys: pytest.CaptureFixture[str]) -> None:
    runner = StepRunner("cpu", fuse="on")
    for _ in range(3):
        runner.run_phase(_works(NoContract))
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1, lines
    assert "NoContract runs client by client: it defines neither fusion_key() nor" in lines[0]
    assert lines[0].startswith("lit-fl: trainer.fuse is on, but step ")

    StepRunner("cpu", fuse="off").run_phase(_works(NoContract))  # fusion off: nothing to say
    fresh = StepRunner("cpu", fuse="on")  # a new run says it again
    fresh.run_phase(_works(NoContract))
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_fit_with_a_users_unfusable_step_says_so_once_on_its_console(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "plain.py").write_text(USER_MODULE)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    config = tiny_config("DecentralizedFedAvg", rounds=3)
    config["algorithm"]["class_path"] = "plain.PlainFedAvg"
    write_config(tmp_path / "run.yaml", config)
    result = run_cli("fit", "--config", "run.yaml", "--run_dir", "runs", "--name", "plain", "--trainer.fuse", "on")
    assert result.rc == 0, result.err
    said = [line for line in result.err.splitlines() if "client by client" in line]
    assert said == ["lit-fl: trainer.fuse is on, but step plain.PlainStep runs client by client: it defines neither "
                    "fusion_key() nor the classmethod batched(steps, num_batches) (docs/extending.md, \"Fuse your "
                    "step\")"]

    config["algorithm"]["class_path"] = "lit_fl.algorithms.DecentralizedFedAvg"  # built-in steps fuse: no line
    write_config(tmp_path / "builtin.yaml", config)
    result = run_cli("fit", "--config", "builtin.yaml", "--run_dir", "runs", "--name", "builtin", "--trainer.fuse",
                     "on")
    assert result.rc == 0 and "client by client" not in result.err, result.err
