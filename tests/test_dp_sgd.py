"""Sample-level DP-SGD (``privacy.level sample``, :mod:`lit_fl.steps.dp_sgd`): per-sample clipping bounds each
client's update, a fused norm never mixes two clients, the noise has the stated deviation, fused and unfused phases
give the same weights with the same draws, every client has its own accountant (Opacus's RDP accountant is the
reference), and a run logs each client's epsilon, resumes exactly and refuses what DP-SGD cannot take in one line."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from federations import snapshot, tiny_federation

from lit_fl.algorithms import DFML, DecentralizedFedAvg, DecentralizedFedProx
from lit_fl.errors import ConfigError
from lit_fl.federation.state import Federation
from lit_fl.privacy.accounting import RDP_ORDERS, SampledGaussian, epsilon_of_steps
from lit_fl.privacy.config import PrivacyConfig
from lit_fl.privacy.sample_level import SamplePrivacy, plan_sample_privacy
from lit_fl.privacy.state import PrivacyState
from lit_fl.steps import StepRunner, dp_sgd
from lit_fl.steps.dp_sgd import DPSGD, ClientNoise
from lit_fl.tracking import read_metrics

#: fused against unfused in float64: the same arithmetic in other summation orders (per-sample sums over <= 133
#: samples, norms over ~10^3 weights, a few steps) stays within ~1e-13 relative; a mixed norm or another noise draw
#: moves an update by order 1
RTOL = 1e-9


def private_phase(fuse: str, algo: DecentralizedFedAvg, pool: tuple[str, ...] = ("cnn_4_8", "cnn_8"),
                  private: bool = True, **privacy: object) -> tuple[Federation, list[dict[str, torch.Tensor]],
                                                                      PrivacyState]:
    """One local phase of five uneven clients (21 to 133 samples) under DP-SGD; the weights before it."""
    fed = tiny_federation(num_clients=5, pool=pool)
    for client in fed.clients:
        client.model.double()
    fed.data.train_x = fed.data.train_x.double()
    runner = StepRunner("cpu", fuse=fuse)
    state = PrivacyState.start(1.0, 0)
    if private:
        config = PrivacyConfig(**{"level": "sample", "clip_norm": 0.5, "noise_multiplier": 1.0, **privacy})
        plan = plan_sample_privacy(config, [c.num_train for c in fed.clients], algo.batch_size, algo.local_epochs, 3)
        runner.sample_privacy = SamplePrivacy(plan, state)
    before = snapshot(fed)
    algo.local_phase(fed.clients, fed, runner)
    return fed, before, state


def relative_gap(a: list[dict[str, torch.Tensor]], b: list[dict[str, torch.Tensor]],
                 start: list[dict[str, torch.Tensor]]) -> float:
    """The largest ``||a - b|| / ||b - start||`` over clients and tensors: how far two runs' updates differ."""
    return max(float((x[k] - y[k]).norm() / (y[k] - z[k]).norm()) for x, y, z in zip(a, b, start) for k in x)


@pytest.mark.parametrize("pool", [("cnn_4_8", "cnn_8"), ("cnn_4_8",)], ids=["two-architectures", "one-stack"])
def test_fused_and_unfused_dp_sgd_give_the_same_weights_with_the_same_noise(pool: tuple[str, ...],
                                                                            float64_native: None) -> None:
    """FedProx's term (data-free, outside the clipping) included; clients take 2 to 9 steps."""
    def algo() -> DecentralizedFedProx:
        return DecentralizedFedProx(mu=1.0, local_epochs=1, batch_size=16)

    fused, before, state = private_phase("on", algo(), pool)
    unfused, _, _ = private_phase("off", algo(), pool)
    plain, _, _ = private_phase("off", algo(), pool, private=False)
    assert sorted(steps for h in state.sample_steps.values() for steps in h.values()) == [2, 3, 4, 5, 9]
    assert relative_gap(snapshot(fused), snapshot(unfused), before) <= RTOL
    assert relative_gap(snapshot(plain), snapshot(unfused), before) > 0.1  # clipping and noise moved every model


def sgd_at_lr_1() -> DecentralizedFedAvg:
    """One batch of the whole client, plain SGD at lr 1: a client's update is minus its (private) gradient."""
    return DecentralizedFedAvg(local_epochs=1, batch_size=1000, lr=1.0, momentum=0.0, weight_decay=0.0, loss="ce")


def update_norms(fed: Federation, before: list[dict[str, torch.Tensor]]) -> list[float]:
    return [math.sqrt(sum(float((now[k] - start[k]).pow(2).sum()) for k in now))
            for now, start in zip(snapshot(fed), before)]


@pytest.mark.parametrize("fuse", ["on", "off"])
def test_per_sample_clipping_bounds_every_clients_update_by_c(fuse: str, float64_native: None) -> None:
    """Without noise the update is the mean of the clipped per-sample gradients: its norm is at most C."""
    clip = 1e-3
    fed, before, _ = private_phase(fuse, sgd_at_lr_1(), clip_norm=clip, noise_multiplier=0.0)
    assert all(0 < norm <= clip * (1 + 1e-9) for norm in update_norms(fed, before))


@pytest.mark.parametrize("fuse", ["on", "off"])
def test_without_clipping_or_noise_dp_sgd_is_plain_sgd(fuse: str, float64_native: None) -> None:
    """The per-sample gradients' mean is the batch gradient: a C above every norm and no noise change nothing."""
    private, before, _ = private_phase(fuse, sgd_at_lr_1(), clip_norm=1e6, noise_multiplier=0.0)
    plain, _, _ = private_phase(fuse, sgd_at_lr_1(), private=False)
    assert relative_gap(snapshot(private), snapshot(plain), before) <= RTOL


def test_a_fused_norm_is_one_clients_and_never_mixes_two() -> None:
    """Two clients stacked: client 0's per-sample gradients are long (clipped to C), client 1's short (kept)."""
    long = torch.full((3, 1, 4), 10.0)  # [B, 1, P]: sample norms 20
    short = torch.full((3, 1, 4), 0.01)  # sample norms 0.02
    per_sample = [torch.cat([long, short], dim=1)]  # [B, k=2, P]
    dp = DPSGD(clip_norm=1.0, noise_multiplier=0.0, clients=(ClientNoise(0, 1, 1), ClientNoise(1, 1, 1)))
    private = dp_sgd._private_gradient(per_sample, torch.ones(3, 2), dp, dp.clients, lambda like: like * 0)
    torch.testing.assert_close(private[0], torch.full((4,), 3 * 0.5 / (1 + 1e-6 / 20)))  # 3 samples at norm 1
    torch.testing.assert_close(private[1], torch.full((4,), 0.03))  # untouched: below C


def test_padding_samples_add_nothing() -> None:
    per_sample = [torch.ones(4, 1, 2)]
    dp = DPSGD(clip_norm=10.0, noise_multiplier=0.0, clients=(ClientNoise(0, 1, 2),))
    mask = torch.tensor([[1.0], [1.0], [0.0], [0.0]])
    private = dp_sgd._private_gradient(per_sample, mask, dp, dp.clients, lambda like: like * 0)
    torch.testing.assert_close(private, torch.ones(1, 2))  # (1 + 1) / expected batch 2


def test_the_noise_has_standard_deviation_sigma_c_over_the_expected_batch() -> None:
    """10^4 draws of one client's noised zero gradient: mean 0 and deviation sigma C / b within 3 standard errors."""
    n = 10_000
    sigma, clip, batch = 2.0, 0.5, 4
    client = ClientNoise(seed=123, steps=1, expected_batch=batch)
    dp = DPSGD(clip, sigma, (client,))
    private = dp_sgd._private_gradient([torch.zeros(3, 1, n)], torch.ones(3, 1), dp, [client],
                                       lambda like: dp_sgd.client_noise(client, like.shape[1], like)[:1])
    expected = sigma * clip / batch
    assert abs(float(private.mean())) < 3 * expected / math.sqrt(n)
    assert abs(float(private.std()) - expected) < 3 * expected / math.sqrt(2 * n)


def test_a_clients_noise_is_its_own_stream_and_the_same_alone_or_stacked() -> None:
    a, b = ClientNoise(1, 3, 8), ClientNoise(2, 3, 8)
    like = torch.zeros(1, 50)
    alone = dp_sgd.client_noise(a, 50, like)
    assert torch.equal(alone, dp_sgd.client_noise(a, 50, like))
    assert not torch.equal(alone, dp_sgd.client_noise(b, 50, like))
    assert alone.shape == (3, 50) and len({tuple(r.tolist()) for r in alone}) == 3  # every step its own row


# -- accounting -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("history", [{(32, 1000): 200}, {(32, 1000): 100, (8, 1000): 300},
                                     {(16, 500): 50, (16, 2000): 500}])
@pytest.mark.parametrize("sigma", [0.8, 1.5])
def test_a_clients_epsilon_equals_opacus_rdp_accountant_over_its_history(history: dict[tuple[int, int], int],
                                                                         sigma: float) -> None:
    """Steps at several sampling rates (a client whose batch or data changed): RDP adds up over the history."""
    from opacus.accountants import RDPAccountant

    delta = 1e-5
    logging.disable(logging.WARNING)
    try:
        reference = RDPAccountant()
        reference.history = [(sigma, b / n, steps) for (b, n), steps in history.items()]
        expected = reference.get_epsilon(delta, alphas=list(RDP_ORDERS))
    finally:
        logging.disable(logging.NOTSET)
    ours = epsilon_of_steps({SampledGaussian(sigma, b, n): steps for (b, n), steps in history.items()}, delta)
    assert ours == pytest.approx(expected, rel=0.01)


def test_a_target_epsilon_is_reached_by_the_worst_client_within_1_percent() -> None:
    sizes, batch, epochs, rounds = [40, 90, 300, 1000], 16, 1, 20
    config = PrivacyConfig(level="sample", target_epsilon=4.0, delta=1e-4)
    plan = plan_sample_privacy(config, sizes, batch, epochs, rounds)
    spent = [plan.client_epsilon({(min(batch, n), n): rounds * epochs * math.ceil(n / batch)}) for n in sizes]
    assert max(spent) == pytest.approx(4.0, rel=0.01) and max(spent) <= 4.0 * (1 + 1e-5)
    assert min(spent) < max(spent)  # the others spend less at that noise


def test_a_client_that_trains_more_spends_more_and_one_that_never_trains_nothing() -> None:
    plan = plan_sample_privacy(PrivacyConfig(level="sample", noise_multiplier=1.0), [100], 10, 1, 1)
    assert plan.client_epsilon({}) == 0.0
    assert 0 < plan.client_epsilon({(10, 100): 10}) < plan.client_epsilon({(10, 100): 20})


@pytest.mark.parametrize(("privacy", "message"), [
    ({"target_epsilon": 1e-4, "delta": 1e-5}, "^privacy.target_epsilon: 0.0001 cannot be reached"),
    ({"noise_multiplier": 1.0, "delta": 0.05}, r"^privacy.delta: 0.05 must be below 1 / \(a client's train samples\)"),
    ({"noise_multiplier": 1.0, "noise_cohort_size": 5}, "^privacy.noise_cohort_size: belongs to user-level DP"),
    ({"noise_multiplier": 1.0, "target_quantile": 0.5}, "^privacy.target_quantile: belongs to user-level DP"),
])
def test_bad_sample_level_settings_are_one_line(privacy: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_sample_privacy(PrivacyConfig(level="sample", **privacy), [40, 100], 16, 1, 50)


# -- a run ----------------------------------------------------------------------------------------------------------


def sample_config(tmp_path: Path, rounds: int, algorithm: str = "DecentralizedFedAvg", **privacy: object) -> Path:
    config = tiny_config(algorithm, rounds=rounds, local_epochs=1, sender_fraction=1.0)
    config["models"] = {"pool": ["cnn_4_8"]}
    config["privacy"] = {"level": "sample", "noise_multiplier": 1.0, "clip_norm": 0.5, "delta": 1e-3, **privacy}
    return write_config(tmp_path / f"cfg-{algorithm}-{rounds}.yaml", config)


def test_a_dp_sgd_run_logs_every_clients_epsilon_and_resumes_exactly(tmp_path: Path) -> None:
    """Each client's steps and the noise seeds are state: 1 round then 1 more equal 2 rounds at once."""
    from lit_fl.federation.checkpoint import read_unpacked

    runs = tmp_path / "runs"
    assert run_cli("fit", "--config", sample_config(tmp_path, 2), "--run_dir", runs, "--name", "whole").rc == 0
    assert run_cli("fit", "--config", sample_config(tmp_path, 1), "--run_dir", runs, "--name", "split").rc == 0
    assert run_cli("fit", "--resume", runs / "split", "--rounds", "2").rc == 0
    whole, split = (read_metrics(runs / name / "metrics.csv") for name in ("whole", "split"))
    timings = ("round_s", "eval_s")
    assert [{k: repr(v) for k, v in r.items() if k not in timings} for r in whole] == \
        [{k: repr(v) for k, v in r.items() if k not in timings} for r in split]  # repr: NaN equals NaN
    clients = [[r[f"epsilon_client_{k}"] for k in range(4)] for r in whole]
    assert all(0 < a < b for a, b in zip(*clients))  # every client trained in both rounds and spent more
    assert [r["epsilon"] for r in whole] == [max(c) for c in clients]
    summary = json.loads((runs / "whole" / "summary.json").read_text())["privacy"]
    assert summary["level"] == "sample" and summary["epsilon"] == pytest.approx(max(clients[-1]), rel=1e-5)
    assert summary["epsilon_per_client"] == pytest.approx(clients[-1], rel=1e-5)
    assert "Poisson" in summary["batch_sampling"]  # the caveat of shuffled batches
    a, b = (read_unpacked(runs / name / "checkpoints" / "last.ckpt")["federation"] for name in ("whole", "split"))
    assert a["privacy"]["sample_steps"] == b["privacy"]["sample_steps"]
    for x, y in zip(a["clients"], b["clients"]):
        assert all(torch.equal(x["model"][k], y["model"][k]) for k in x["model"])


@pytest.mark.parametrize(("algorithm", "pool", "message"), [
    ("DefKT", ["cnn_4_8"], "privacy.level: sample takes a method whose every client training phase is DP-SGD-ready ("
                           "DFML, DecentralizedFedAvg, DecentralizedFedProx, Local, ServerFedAvg, ServerFedProx); "
                           "DefKT trains on private data in a step without it"),
    ("DecentralizedFedAvg", ["cnn_bn_4_8"], "models.pool: privacy.level sample (DP-SGD) needs per-sample gradients "
                                            "and cnn_bn_4_8 has BatchNorm"),
])
def test_what_dp_sgd_cannot_take_is_refused_in_one_line(tmp_path: Path, algorithm: str, pool: list[str],
                                                        message: str) -> None:
    config = tiny_config(algorithm, rounds=1)
    config["models"] = {"pool": pool}
    config["privacy"] = {"level": "sample", "noise_multiplier": 1.0}
    result = run_cli("fit", "--config", write_config(tmp_path / "cfg.yaml", config), "--run_dir", tmp_path / "runs")
    assert result.rc == 2 and not (tmp_path / "runs").exists()
    (line,) = result.err.strip().splitlines()
    assert line.startswith(f"lit-fl: error: {message}"), line


@pytest.mark.parametrize("fuse", ["on", "off"])
def test_dfmls_mutual_learning_runs_dp_sgd_on_the_aggregators_data(tmp_path: Path, fuse: str) -> None:
    """Without clipping or noise, DFML under DP-SGD is DFML (the per-sample gradients' mean over all the models the
    peer step trains is the batch gradient: float32 rounding, 1e-4 relative after a round of both phases; one batch
    an epoch, since DP-SGD divides a short last batch by the expected batch, not its own size); the
    aggregator's accountant counts its local steps and its mutual-learning steps, on its own data."""
    from lit_fl.federation.checkpoint import read_unpacked

    runs = tmp_path / "runs"
    for name, privacy in (("private", {"noise_multiplier": 0.0, "clip_norm": 1e9}), ("plain", {"level": "none"})):
        config = tiny_config("DFML", rounds=1, batch_size=1000)  # one batch an epoch: b = n, no partial batch
        config["privacy"] = {"level": "sample", "delta": 1e-3, **privacy}
        assert run_cli("fit", "--config", write_config(tmp_path / f"{name}.yaml", config), "--run_dir", runs,
                       "--name", name, "--trainer.fuse", fuse).rc == 0
    a, b = (read_unpacked(runs / name / "checkpoints" / "last.ckpt")["federation"] for name in ("private", "plain"))
    for x, y in zip(a["clients"], b["clients"]):
        for key, value in y["model"].items():
            if value.is_floating_point():
                assert float((x["model"][key] - value).norm()) <= 1e-4 * max(float(value.norm()), 1e-6), key
    (row,) = read_metrics(runs / "private" / "metrics.csv")
    aggregator = int(row["aggregator"])
    algo = DFML(**config["algorithm"]["init_args"])
    (b, n, steps), = [(b, n, s) for k, b, n, s in a["privacy"]["sample_steps"] if k == aggregator]
    assert b == min(algo.batch_size, n)
    assert steps == (algo.local_epochs + algo.mutual_epochs) * math.ceil(n / algo.batch_size)


def test_dfmls_mutual_learning_is_clipped(tmp_path: Path) -> None:
    """No local training, only the aggregator's mutual learning: at a clip far below the gradients' norms the
    participants move a hundred times less than without DP-SGD (one norm over all the models a sample trains). The
    start is a run without any training (``mutual_epochs 0``)."""
    from lit_fl.federation.checkpoint import read_unpacked

    runs = tmp_path / "runs"
    weights = {}
    for name, mutual_epochs, privacy in (
            ("start", 0, {"level": "none"}), ("plain", 1, {"level": "none"}),
            ("private", 1, {"level": "sample", "noise_multiplier": 0.0, "clip_norm": 1e-6})):
        config = tiny_config("DFML", rounds=1, local_epochs=0, mutual_epochs=mutual_epochs)
        config["privacy"] = {"delta": 1e-3, **privacy}
        assert run_cli("fit", "--config", write_config(tmp_path / f"{name}.yaml", config), "--run_dir", runs,
                       "--name", name).rc == 0
        clients = read_unpacked(runs / name / "checkpoints" / "last.ckpt")["federation"]["clients"]
        weights[name] = [c["model"] for c in clients]

    def moved(name: str) -> float:
        return sum(float((w[k] - s[k]).double().pow(2).sum()) for w, s in zip(weights[name], weights["start"])
                   for k in s if s[k].is_floating_point()) ** 0.5

    assert 0 < moved("private") < 1e-2 * moved("plain")  # what moves it is weight decay, not the clipped gradients
