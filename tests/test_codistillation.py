"""Knowledge codistillation (papers/codistillation.txt): the paper's CNNs, FedAdam, the student-regularised
target, PeriodicCodist's schedule and moment reset, MergedCodist's merged update, the server-split error and
an exact resume through ``lit-fl fit``."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conftest import TINY_OPTIONS, run_cli, tiny_config, write_config
from test_resume import assert_runs_equal, load_ckpt
from torch import Tensor

import lit_fl.algorithms.merged_codist as merged_codist
from lit_fl.algorithms import MergedCodist, PeriodicCodist
from lit_fl.algorithms.merged_codist import global_norm, merge_updates
from lit_fl.algorithms.server_optimizers import FedAdam
from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.models import create_model, num_parameters
from lit_fl.steps import StepRunner
from lit_fl.steps.distillation import ServerCodistillation, distillation_loss, regularised_target

#: Tiny stand-ins for the paper's CNNs (the algorithm takes any pair of architectures).
SMALL, LARGE = "cnn_4", "cnn_8"
TINY_ARGS = {
    "small_arch": SMALL,
    "large_arch": LARGE,
    "large_clients": [1, 3],
    "clients_per_round": 2,
    "distill_steps": 3,
    "distill_batch_size": 16,
    "lr": 0.05,
    "server_lr": 0.01,
}


pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread (conftest)


def federation(server_fraction: float = 0.2, proxy: dict | None = None) -> Any:
    data = DataConfig(dataset="synthetic", num_clients=4, server_fraction=server_fraction, options=dict(TINY_OPTIONS),
                      proxy=proxy)  # type: ignore[arg-type]
    dataset = load_dataset("synthetic", seed=0, **TINY_OPTIONS)
    return build_federation(dataset, data, ModelsConfig(pool=[SMALL]), seed=0)


def run(algorithm: Any, rounds: int) -> Any:
    fed = federation()
    algorithm.setup(fed)
    runner, ledger = StepRunner(accelerator="cpu"), CommunicationLedger()
    for round_ in range(1, rounds + 1):
        ledger.start_round()
        algorithm.run_round(round_, fed, runner, ledger)
        fed.round = round_
    return fed


# -- models ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("arch", "expected"), [("codist_small", 109_348), ("codist_large", 410_084)])
def test_paper_cnns_have_the_paper_parameter_counts(arch: str, expected: int) -> None:
    model = create_model(arch, (3, 32, 32), 100)
    assert num_parameters(model) == expected
    assert model.feature_map[1:] == (6, 6)  # 32 -> 30 -> 28 -> pool 14 -> 12 -> pool 6
    assert model(torch.randn(2, 3, 32, 32)).shape == (2, 100)
    mnist = create_model(arch, (1, 28, 28), 10)  # flatten size follows the input: 28 -> 26 -> 24 -> 12 -> 10 -> 5
    assert mnist.feature_map[1:] == (5, 5)
    assert mnist(torch.randn(2, 1, 28, 28)).shape == (2, 10)


# -- FedAdam --------------------------------------------------------------------------------------------


def test_fedadam_equals_a_hand_computed_adam_step() -> None:
    model = torch.nn.Linear(2, 1, bias=False)
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[1.0, -2.0]]))
    opt = FedAdam(lr=0.1, betas=(0.9, 0.999), eps=1e-5)
    w = [1.0, -2.0]
    m, v = [0.0, 0.0], [0.0, 0.0]
    for t, g in enumerate([[0.5, -0.1], [-0.2, 0.3]], start=1):
        opt.step(model, {"weight": torch.tensor([g])})
        for i in range(2):
            m[i] = 0.9 * m[i] + 0.1 * g[i]
            v[i] = 0.999 * v[i] + 0.001 * g[i] ** 2
            w[i] -= 0.1 * (m[i] / (1 - 0.9**t)) / (math.sqrt(v[i] / (1 - 0.999**t)) + 1e-5)
        assert model.weight.detach()[0].tolist() == pytest.approx(w, rel=1e-6, abs=1e-7)
    assert opt.steps == 2
    assert opt.exp_avg["weight"][0].tolist() == pytest.approx(m, rel=1e-6)
    assert opt.exp_avg_sq["weight"][0].tolist() == pytest.approx(v, rel=1e-6)
    # the first step of bias-corrected Adam moves every entry by lr (times sign(g)), up to eps
    fresh = torch.nn.Linear(2, 1, bias=False)
    before = fresh.weight.detach().clone()
    FedAdam(lr=0.1).step(fresh, {"weight": torch.tensor([[3.0, -0.01]])})
    assert (before - fresh.weight.detach())[0].tolist() == pytest.approx([0.1, -0.1], rel=1e-3)

    restored = FedAdam(lr=0.1)
    restored.load_state_dict(opt.state_dict())
    assert restored.steps == 2 and torch.equal(restored.exp_avg_sq["weight"], opt.exp_avg_sq["weight"])
    opt.reset()
    assert opt.steps == 0 and not opt.exp_avg and not opt.exp_avg_sq


# -- distillation target ----------------------------------------------------------------------------------


def test_student_regularised_target_and_loss_follow_the_formula() -> None:
    torch.manual_seed(0)
    teacher, start, student = torch.randn(5, 7), torch.randn(5, 7), torch.randn(5, 7)
    T, b = 2.5, 0.3
    target = regularised_target(teacher, start, T, b)
    expected = (1 - b) * F.softmax(teacher / T, dim=1) + b * F.softmax(start, dim=1)
    torch.testing.assert_close(target, expected)
    torch.testing.assert_close(target.sum(1), torch.ones(5))
    kl = (expected * (expected.log() - F.log_softmax(student, dim=1))).sum(1).mean()
    torch.testing.assert_close(distillation_loss(student, target), kl)

    # in the step, each student's teacher is the other model's snapshot, its start its own snapshot
    a, b_model = torch.nn.Linear(3, 7), torch.nn.Linear(3, 7)
    step = ServerCodistillation([copy.deepcopy(a), copy.deepcopy(b_model)], [a, b_model], [1e-3, 1e-3], T, b)
    x = torch.randn(4, 3)
    with torch.no_grad():
        za, zb = a(x), b_model(x)
    targets = step.targets(x)
    torch.testing.assert_close(targets[0], (1 - b) * F.softmax(zb / T, dim=1) + b * F.softmax(za, dim=1))
    torch.testing.assert_close(targets[1], (1 - b) * F.softmax(za / T, dim=1) + b * F.softmax(zb, dim=1))


# -- PeriodicCodist ---------------------------------------------------------------------------------------


def test_periodic_codist_distills_every_p_rounds_and_resets_fedadam(monkeypatch: pytest.MonkeyPatch) -> None:
    distilled: list[int] = []
    after: dict[int, dict[str, tuple[int, int]]] = {}
    original_distill, original_update = PeriodicCodist.distill, PeriodicCodist.server_update
    students: dict[int, dict[str, dict[str, Tensor]]] = {}

    def distill(self: PeriodicCodist, fed: Any, runner: Any, round_: int) -> Any:
        distilled.append(round_)
        out, loss = original_distill(self, fed, runner, round_)
        students[round_] = {pool: copy.deepcopy(m.state_dict()) for pool, m in out.items()}
        return out, loss

    def server_update(self: PeriodicCodist, updates: Any, fed: Any, runner: Any) -> Any:
        extra = original_update(self, updates, fed, runner)
        round_ = self.current_round
        after[round_] = {pool: (opt.steps, bool(opt.exp_avg)) for pool, opt in self.optimizers.items()}
        for pool in students.get(round_, {}):  # the students replaced the server models
            for key, value in fed.server[pool].state_dict().items():
                assert torch.equal(value, students[round_][pool][key]), (round_, pool, key)
        assert extra["distilled"] == float(round_ in students)
        return extra

    monkeypatch.setattr(PeriodicCodist, "distill", distill)
    monkeypatch.setattr(PeriodicCodist, "server_update", server_update)
    fed = run(PeriodicCodist(period=2, **TINY_ARGS), rounds=4)
    assert distilled == [2, 4]
    assert after[1] == {"small": (1, True), "large": (1, True)}  # one FedAdam step, moments kept
    assert after[2] == {"small": (0, False), "large": (0, False)}  # reset after distilling
    assert after[3] == {"small": (1, True), "large": (1, True)}
    assert after[4] == {"small": (0, False), "large": (0, False)}
    assert set(fed.server) == {"small", "large"}
    assert all(("large" in c.extras) == (c.id in (1, 3)) for c in fed.clients)


# -- the round: pool members on the server round contract ----------------------------------------------


def test_a_client_sampled_by_both_pools_trains_and_uploads_both_of_its_models(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every client sampled: the high-capacity clients 1 and 3 take part twice, once per pool, each time with that
    pool's model, and each upload joins its own pool's aggregate with the client's sample count as weight."""
    seen: list[tuple[int, str, float, dict[str, Tensor]]] = []
    original = MergedCodist.pseudo_gradients

    def pseudo_gradients(self: MergedCodist, updates: Any, fed: Any) -> Any:
        seen.extend((u.client, u.group, u.weight, {k: v.clone() for k, v in u.values.items()}) for u in updates)
        return original(self, updates, fed)

    monkeypatch.setattr(MergedCodist, "pseudo_gradients", pseudo_gradients)
    fed = run(MergedCodist(**{**TINY_ARGS, "clients_per_round": 4, "merge_alpha": 1.0}), rounds=1)
    assert [(cid, pool) for cid, pool, _, _ in seen] == [
        (0, "small"), (1, "small"), (2, "small"), (3, "small"), (1, "large"), (3, "large")]
    for cid, pool, weight, values in seen:
        client = fed.clients[cid]
        model = client.model if pool == "small" else client.extras["large"]  # what it trained and still holds
        assert weight == client.num_train
        assert values.keys() == model.state_dict().keys()
        assert all(torch.equal(values[k], v) for k, v in model.state_dict().items()), (cid, pool)


# -- MergedCodist -----------------------------------------------------------------------------------------


def spy_updates(monkeypatch: pytest.MonkeyPatch) -> tuple[list, list, list]:
    """Record the pseudo-gradients g per pool, every merge and every update FedAdam receives."""
    grads, merges, fed_to_adam = [], [], []
    original_grads, original_merge = MergedCodist.pseudo_gradients, merged_codist.merge_updates
    original_step = FedAdam.step

    def pseudo_gradients(self: MergedCodist, *args: Any) -> Any:
        out = original_grads(self, *args)
        grads.extend((pool, {k: v.clone() for k, v in g.items()}) for pool, g in out.items() if g is not None)
        return out

    def merge(g: Any, delta: Any, alpha: float) -> Any:
        out = original_merge(g, delta, alpha)
        merges.append(({k: v.clone() for k, v in delta.items()}, out))
        return out

    def step(self: FedAdam, model: Any, update: Any, lr: Any = None) -> None:
        fed_to_adam.append({k: v.clone() for k, v in update.items()})
        original_step(self, model, update, lr)

    monkeypatch.setattr(MergedCodist, "pseudo_gradients", pseudo_gradients)
    monkeypatch.setattr(merged_codist, "merge_updates", merge)
    monkeypatch.setattr(FedAdam, "step", step)
    return grads, merges, fed_to_adam


def test_merged_codist_alpha_0_rescales_the_distillation_gradient_to_the_norm_of_g(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    grads, merges, fed_to_adam = spy_updates(monkeypatch)
    run(MergedCodist(merge_alpha=0.0, **TINY_ARGS), rounds=2)
    assert len(grads) == len(merges) == len(fed_to_adam) == 4  # 2 rounds x 2 pools
    for (pool, g), (delta, merged), update in zip(grads, merges, fed_to_adam):
        assert global_norm(update) == pytest.approx(global_norm(g), rel=1e-5), pool
        assert global_norm(delta) > 0
        scale = global_norm(g) / global_norm(delta)  # delta = start - student, rescaled to ||g||
        for key in g:
            assert torch.equal(update[key], merged[key])
            torch.testing.assert_close(update[key], delta[key] * scale)


def test_merged_codist_alpha_1_feeds_fedadam_exactly_g(monkeypatch: pytest.MonkeyPatch) -> None:
    grads, merges, fed_to_adam = spy_updates(monkeypatch)
    distilled: list[int] = []
    monkeypatch.setattr(MergedCodist, "distill", lambda self, fed, runner, r: distilled.append(r))
    run(MergedCodist(merge_alpha=1.0, **TINY_ARGS), rounds=2)
    assert distilled == []  # alpha = 1 is FedAvg: no distillation cost (paper sec. 4)
    assert len(grads) == len(fed_to_adam) == 4
    for (_, g), update in zip(grads, fed_to_adam):
        assert list(update) == list(g) and all(torch.equal(update[k], g[k]) for k in g)


def test_merge_formula() -> None:
    g = {"w": torch.tensor([3.0, 4.0]), "b": torch.tensor([0.0])}
    delta = {"w": torch.tensor([0.0, 1.0]), "b": torch.tensor([0.0])}
    merged = merge_updates(g, delta, 0.25)  # ||g|| = 5, ||delta|| = 1
    torch.testing.assert_close(merged["w"], 0.25 * g["w"] + 0.75 * 5.0 * delta["w"])
    assert merge_updates(g, {k: torch.zeros_like(v) for k, v in g.items()}, 0.25)["w"].tolist() == [0.75, 1.0]


# -- errors and resume ----------------------------------------------------------------------------------


def codist_config(algorithm: str, server_fraction: float = 0.2, rounds: int = 4, **init_args: Any) -> dict:
    cfg = tiny_config(algorithm, rounds=rounds)
    cfg["algorithm"]["init_args"] = {**TINY_ARGS, **init_args}
    cfg["data"]["server_fraction"] = server_fraction
    cfg["models"]["pool"] = [SMALL]
    return cfg


def test_missing_server_split_is_a_clear_error(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg.yaml", codist_config("MergedCodist", server_fraction=0.0))
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "x")
    assert result.rc == 2
    assert "data.server_fraction: MergedCodist distils on the held-out slice" in result.err
    assert len(result.err.strip().splitlines()) == 1
    assert not (tmp_path / "runs" / "x").exists()


def test_the_distillation_set_is_data_proxy_size_samples_of_the_held_out_slice() -> None:
    """Fig. 4's key: ``data.proxy.size: 10`` of the 80 held-out samples (0.2 of 400); one epoch of batches of 4
    (3 steps: 4 + 4 + 2) shows each of those 10 samples once and nothing else."""
    fed = federation(proxy={"size": 10})
    algo = MergedCodist(**{**TINY_ARGS, "distill_steps": 3, "distill_batch_size": 4})
    algo.setup(fed)
    assert len(fed.server_idx) == 80 and len(fed.proxy_idx) == 10
    assert set(fed.proxy_idx.tolist()) <= set(fed.server_idx.tolist())
    shown = torch.cat([x for x, _ in algo.distill_batches(fed)])
    assert [len(x) for x, _ in algo.distill_batches(fed)] == [4, 4, 2]
    flat, proxy = fed.data.train_x.reshape(400, -1), fed.data.train_x[fed.proxy_idx].reshape(10, -1)
    rows = sorted(int(torch.nonzero((flat == x.reshape(1, -1)).all(1))[0, 0]) for x in shown)
    assert rows == sorted(fed.proxy_idx.tolist()) and torch.equal(fed.proxy.reshape(10, -1), proxy)


@pytest.mark.parametrize(
    ("algorithm", "args"),
    [("PeriodicCodist", {"period": 3}), ("MergedCodist", {"merge_alpha": 0.5, "distill_augment": True})],
)
def test_resume_equals_uninterrupted_run(algorithm: str, args: dict, tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg.yaml", codist_config(algorithm, **args))

    def fit(*argv: Any) -> None:
        result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", *argv)
        assert result.rc == 0, result.err

    fit("--name", "full")
    fit("--name", "part", "--rounds", "2")
    fit("--resume", tmp_path / "runs" / "part", "--rounds", "4")
    assert_runs_equal(tmp_path / "runs" / "part", tmp_path / "runs" / "full")
    state = load_ckpt(tmp_path / "runs" / "full")
    assert set(state["federation"]["server"]) == {"small", "large"}
    assert state["algorithm"]["fedadam"]["large"]["steps"] == (1 if algorithm == "PeriodicCodist" else 4)
