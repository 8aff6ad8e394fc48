"""How a process learns its part in a multi-process run, and what it reports back (no process group needed)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from torch import nn

from lit_fl.experiment import Experiment, launched_follower
from lit_fl.steps import StepRunner
from lit_fl.steps.local_training import LocalTraining

RANK_VARIABLES = ("WORLD_SIZE", "RANK", "LOCAL_RANK", "NODE_RANK", "SLURM_NTASKS", "SLURM_PROCID")


@pytest.mark.parametrize(
    ("env", "follower"),
    [
        ({}, False),
        ({"RANK": "3", "LOCAL_RANK": "1", "SLURM_PROCID": "2"}, False),  # stray variables, one process
        ({"WORLD_SIZE": "1", "RANK": "3"}, False),
        ({"WORLD_SIZE": "4", "RANK": "0", "LOCAL_RANK": "0"}, False),  # torchrun's rank 0
        ({"WORLD_SIZE": "4", "RANK": "2", "LOCAL_RANK": "0"}, True),  # torchrun, second node
        ({"WORLD_SIZE": "2", "LOCAL_RANK": "1"}, True),  # Fabric's launcher, one node
        ({"WORLD_SIZE": "4", "NODE_RANK": "1", "LOCAL_RANK": "0"}, True),  # Fabric's launcher, second node
        ({"SLURM_NTASKS": "4", "SLURM_PROCID": "3"}, True),
        ({"SLURM_NTASKS": "1", "SLURM_PROCID": "3"}, False),  # srun of single-process runs
    ],
)
def test_a_follower_is_a_non_zero_rank_of_a_multi_process_launch(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], follower: bool
) -> None:
    for name in RANK_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert launched_follower() is follower


def test_a_follower_exits_0_and_prints_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Followers exit 0 when their rounds end, stopped or not: a launcher that sees one process exit non-zero
    kills the others, rank 0 included while it writes the checkpoint. Rank 0's status is the run's."""
    cfg = write_config(tmp_path / "run.yaml", tiny_config("DFML"))
    for status, rank0_rc in (("interrupted", 75), ("completed", 0), ("failed", 1)):
        monkeypatch.setattr(Experiment, "fit", lambda self, *a, s=status, **k: {"status": s, "rank": 1})
        result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path)
        assert (result.rc, result.out) == (0, "")
        rank0 = {"status": status, "rounds_completed": 0, "rounds": 3, "wall_s": 0.0, "comm_mb": 0.0, "run_dir": "r"}
        monkeypatch.setattr(Experiment, "fit", lambda self, *a, s=rank0, **k: s)
        result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path)
        assert result.rc == rank0_rc and result.out.startswith(status)


def test_ddp_on_one_process_runs_as_one_process(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """``--trainer.strategy ddp`` with one device builds the runner a one-process run uses, and it trains."""
    built: list[StepRunner] = []
    build = Experiment.build

    def spy(self: Experiment) -> tuple[Any, StepRunner]:
        federation, runner = build(self)
        built.append(runner)
        return federation, runner

    monkeypatch.setattr(Experiment, "build", spy)
    cfg = write_config(tmp_path / "run.yaml", tiny_config("DFML", rounds=1))
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path, "--trainer.accelerator", "cpu",
                     "--trainer.strategy", "ddp")
    assert result.rc == 0, result.err
    runner = built[0]
    assert not runner.placement.distributed
    step = LocalTraining(nn.Linear(4, 3), torch.full((3,), 1 / 3), loss="ce")
    before = step.model.weight.detach().clone()
    runner.run_server_step(step, [(torch.randn(8, 4), torch.randint(0, 3, (8,)))])
    assert not torch.equal(before, step.model.weight)
