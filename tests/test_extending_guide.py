"""docs/extending.md: its commands run as written, from a fresh folder holding a copy of examples/, with the
installed ``lit-fl`` command; the user's method (examples/gossip.py) fits, resumes, fails under faults, takes a
user's model, sweeps, compares and documents its keys."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lit_fl.steps import phase
from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"


def guide_commands() -> list[str]:
    """The first bash block of the guide, line by line."""
    block = re.search(r"```bash\n(.*?)```", GUIDE.read_text(), re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_the_guides_commands_run_as_written(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    assert shutil.which("lit-fl"), "lit-fl is installed (pip install -e .)"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    script = "set -e\n" + "\n".join(guide_commands()) + "\n"
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = tmp_path / "examples" / "runs"
    resumed = read_metrics(runs / "gossip" / "metrics.csv")
    assert [r["round"] for r in resumed] == list(range(1, 13))  # resumed from round 10 to 12
    faulty = read_metrics(runs / "gossip-faults" / "metrics.csv")
    assert faulty[9]["comm_mb"] < resumed[9]["comm_mb"] and sum(r["dropped_senders"] for r in faulty) > 0
    assert faulty[9]["global_acc"] != resumed[9]["global_acc"]
    assert json.loads((runs / "gossip-mlp" / "summary.json").read_text())["status"] == "completed"
    assert (runs / "sweeps" / "gossip_sweep" / "compare" / "dashboard.html").is_file()
    assert "--algorithm.self_weight" in result.stdout and "--algorithm.local_epochs" in result.stdout


def test_the_guide_names_every_hook_of_decentralized_methods_and_dfml() -> None:
    """Every public method a subclass of the peer round's bases (PeerAlgorithm, DecentralizedAlgorithm,
    NeighbourAlgorithm) or of DFML may override is in the guide's hook table (a new hook without a line there fails
    this test)."""
    from lit_fl.algorithms import DFML, DecentralizedAlgorithm
    from lit_fl.algorithms.base import Algorithm
    from lit_fl.algorithms.neighbours import NeighbourAlgorithm
    from lit_fl.algorithms.peer import PeerAlgorithm

    text = GUIDE.read_text()
    table = text[text.index("### Decentralized methods: the peer round"):text.index("### Draw randomness")]
    contract = {"run_round", "setup", "state_dict", "load_state_dict", "batches", "work", "local_phase", "name"}
    hooks = {name for cls in (PeerAlgorithm, DecentralizedAlgorithm, NeighbourAlgorithm, DFML)
             for name, value in vars(cls).items()
             if not name.startswith("_") and (callable(value) or name == "alpha") and name not in contract}
    hooks |= {"local_work"} & set(vars(Algorithm))
    missing = sorted(h for h in hooks if f"`{h}(" not in table)
    assert not missing, f"hooks missing from docs/extending.md: {missing}"
    for name in ("Participants", "lit_fl.federation.round", "**kwargs", "runner.run_phase", "ClientWork"):
        assert name in text, name


def test_the_guides_peer_gossip_is_the_examples_gossip_bit_for_bit(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """The guide's PeerGossip (D-PSGD as hooks of the peer round) and examples/gossip.py (its own run_round) give the
    same weights, losses and traffic over three rounds in which half the links fail."""
    import importlib.util

    import torch
    from federations import tiny_federation

    from lit_fl.federation.faults import FaultsConfig
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner

    spec = importlib.util.spec_from_file_location("gossip_example", ROOT / "examples" / "gossip.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    user = guide_module(tmp_path, monkeypatch, "class PeerGossip(", "peer_gossip")
    runs = []
    for algo in (example.Gossip(batch_size=16), user.PeerGossip(batch_size=16)):
        fed = tiny_federation(num_clients=5, pool=("cnn_4_8",))
        fed.faults = FaultsConfig(drop_prob=0.5)
        algo.setup(fed)
        runner, ledger, results = StepRunner("cpu"), CommunicationLedger.of(fed), []
        for round_ in range(1, 4):
            ledger.start_round()
            results.append((algo.run_round(round_, fed, runner, ledger), ledger.round_mb, ledger.round_faults))
        runs.append((fed, results))
    (fed_a, results_a), (fed_b, results_b) = runs
    assert results_a == results_b
    assert any(faults.dropped_senders for _, _, faults in results_a)  # the faults took links away
    for a, b in zip(fed_a.clients, fed_b.clients, strict=True):
        for key, value in a.model.state_dict().items():
            assert torch.equal(value, b.model.state_dict()[key]), (a.id, key)


def test_the_guides_dfml_variant_runs_and_picks_the_richest_participant(tmp_path: Path) -> None:
    """The guide's example, copied as a user would, runs two rounds; every round's aggregator holds the most
    training data among that round's participants."""
    import subprocess
    import sys

    import yaml
    from conftest import tiny_config
    from federations import tiny_federation

    code = next(b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S) if "RichestAggregator" in b)
    (tmp_path / "richest.py").write_text(code)
    config = tiny_config("DFML", rounds=2)
    config["algorithm"]["class_path"] = "richest.RichestAggregator"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-c", "import sys; from lit_fl.cli import main; sys.exit(main())", "fit", "--config",
               "run.yaml", "--run_dir", "runs", "--name", "richest"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stderr[-2000:]
    rows = read_metrics(tmp_path / "runs" / "richest" / "metrics.csv")
    assert len(rows) == 2 and all(r["num_participants"] >= 2 for r in rows)

    sizes = [c.num_train for c in tiny_federation(num_clients=4).clients]  # the run's partition: same data, seed
    assert len(set(sizes)) == 4  # distinct sizes: the richest participant is well defined
    for row in rows:
        participants = _participants(tmp_path / "richest.py", int(row["round"]))
        assert int(row["aggregator"]) == max(participants, key=sizes.__getitem__), (row, sizes, participants)


def _participants(module: Path, round_: int) -> list[int]:
    """The participants of a round as the user's class draws them (its selection replayed on the same seed)."""
    import importlib.util

    from federations import tiny_federation

    spec = importlib.util.spec_from_file_location("richest_replay", module)
    assert spec is not None and spec.loader is not None
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    algo = user.RichestAggregator(sender_fraction=0.5)
    fed = tiny_federation(num_clients=4)
    drawn = None
    for r in range(1, round_ + 1):
        drawn = algo.select(r, fed)
    assert drawn is not None
    return list(drawn.all)


RUN_GROUP = phase._run_group
#: weights: float64's unit roundoff (1.1e-16) x 10^6 of amplification over three rounds, as tests/test_client_work.py
RTOL = 1e-10
#: losses: an unfused step without its own loss counter reports each batch's loss in float32 (``StepRunner.fit_here``)
#: and sums them in float32, 2^-24 (6e-8) relative per rounding: at most 8 batches per client and round here, so
#: 8 roundings and 7 additions, and 4 more in the round's mean over the clients: 19 x 6e-8 < 2e-6
LOSS_RTOL = 2e-6


def guide_module(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, marker: str, name: str) -> Any:
    """The guide's python block holding ``marker``, saved as ``name.py`` and imported, as a user's file would be."""
    import importlib.util
    import sys

    code = next(b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S) if marker in b)
    path = tmp_path / f"{name}.py"
    path.write_text(code)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


def test_the_guides_confidence_penalty_is_the_papers_by_hand(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Logits (0, ln 3): p = (1/4, 3/4); for label 1, CE = -ln 3/4 and the entropy H = -(1/4 ln 1/4 + 3/4 ln 3/4), so
    the loss is CE - beta H (a few float64 operations: 1e-14 relative)."""
    import math

    import torch

    user = guide_module(tmp_path, monkeypatch, "class ConfidencePenalty(", "penalty")
    logits = torch.tensor([[0.0, math.log(3.0)]], dtype=torch.float64)
    entropy = -(0.25 * math.log(0.25) + 0.75 * math.log(0.75))
    got = user.penalized(logits, torch.tensor([1]), 0.5)
    assert got.tolist() == pytest.approx([-math.log(0.75) - 0.5 * entropy], rel=1e-14)


def _penalty_rounds(
    user: Any, data: str, fuse: str, monkeypatch: pytest.MonkeyPatch, private: bool = False
) -> tuple[Any, list[float], list[tuple[type, int]]]:
    """Three rounds of the guide's ConfidencePenaltyFedAvg in float64 (``private``: under DP-SGD): the federation,
    the train losses and, per group the phase runner ran, its step class and size (0: a work alone, unbatched)."""
    import torch
    from federations import tiny_federation
    from test_sequences import _sequence_federation

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner, phase
    from lit_fl.steps.fusion import native_cpu_convolutions

    groups: list[tuple[type, int]] = []

    def spy(runner: Any, jobs: list[Any], plans: list[Any], batched: bool, dp: Any) -> list[float]:
        groups.append((type(jobs[0].step), len(jobs) if batched else 0))
        return RUN_GROUP(runner, jobs, plans, batched, dp)

    monkeypatch.setattr(phase, "_run_group", spy)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with native_cpu_convolutions(torch.device("cpu")):
            fed = tiny_federation(num_clients=4, pool=("cnn_4_8", "cnn_8")) if data == "images" else \
                _sequence_federation(num_clients=3)
            algo = user.ConfidencePenaltyFedAvg(beta=0.5, sender_fraction=1.0, batch_size=16 if data == "images" else 4)
            algo.setup(fed)
            runner, ledger, losses = StepRunner("cpu", fuse=fuse), CommunicationLedger.of(fed), []
            if private:
                runner.sample_privacy = _dp_sgd(fed, algo)
            for round_ in range(1, 4):
                ledger.start_round()
                losses.append(algo.run_round(round_, fed, runner, ledger).train_loss)
    finally:
        torch.set_default_dtype(previous)
    return fed, losses, groups


@pytest.mark.parametrize("data", ["images", "sequences"])
def test_the_guides_fusable_step_runs_batched_and_equals_its_unfused_run(
    data: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], one_thread: None
) -> None:
    """The guide's user step under ``fuse on``: every phase ran as batched groups of 2 or more of that step, nothing
    was said about fusion, and every weight equals the unfused run's in float64 (:data:`RTOL`; the losses within
    :data:`LOSS_RTOL`)."""
    import torch

    user = guide_module(tmp_path, monkeypatch, "class ConfidencePenalty(", "penalty")
    fused, fused_losses, fused_groups = _penalty_rounds(user, data, "on", monkeypatch)
    unfused, unfused_losses, unfused_groups = _penalty_rounds(user, data, "off", monkeypatch)
    assert fused_groups and all(kind is user.ConfidencePenalty and size >= 2 for kind, size in fused_groups), \
        fused_groups
    assert unfused_groups and {size for _, size in unfused_groups} == {0}
    assert "client by client" not in capsys.readouterr().err
    torch.testing.assert_close(torch.tensor(fused_losses, dtype=torch.float64),
                               torch.tensor(unfused_losses, dtype=torch.float64), rtol=LOSS_RTOL, atol=0.0)
    for n, (a, b) in enumerate(zip(fused.clients, unfused.clients, strict=True)):
        for key, value in b.model.state_dict().items():
            got = a.model.state_dict()[key]
            assert (got - value).double().norm() <= RTOL * value.double().norm(), f"client {n} {key}"


def _dp_sgd(fed: Any, algo: Any) -> Any:
    from lit_fl.privacy.config import PrivacyConfig
    from lit_fl.privacy.sample_level import SamplePrivacy, plan_sample_privacy
    from lit_fl.privacy.state import PrivacyState

    config = PrivacyConfig(level="sample", clip_norm=0.5, noise_multiplier=1.0)
    plan = plan_sample_privacy(config, [c.num_train for c in fed.clients], algo.batch_size, algo.local_epochs, 3)
    return SamplePrivacy(plan, PrivacyState.start(config.clip_norm, 0))


def test_the_guides_step_takes_dp_sgd_fused_and_unfused_alike(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                             one_thread: None) -> None:
    """The guide's step under ``privacy.level sample``: its data_loss is clipped per sample and noised, fused and
    unfused give the same weights with the same draws (float64, :data:`RTOL`), and privacy moved them."""
    user = guide_module(tmp_path, monkeypatch, "class ConfidencePenalty(", "penalty")
    fused, _, groups = _penalty_rounds(user, "images", "on", monkeypatch, private=True)
    unfused, _, _ = _penalty_rounds(user, "images", "off", monkeypatch, private=True)
    plain, _, _ = _penalty_rounds(user, "images", "off", monkeypatch)
    assert all(size >= 2 for _, size in groups), groups
    for n, (a, b, c) in enumerate(zip(fused.clients, unfused.clients, plain.clients, strict=True)):
        for key, value in b.model.state_dict().items():
            assert (a.model.state_dict()[key] - value).double().norm() <= RTOL * value.double().norm(), f"{n} {key}"
        assert any(not c.model.state_dict()[k].equal(v) for k, v in b.model.state_dict().items())
