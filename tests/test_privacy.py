"""User-level differential privacy (DP-FedAvg): the accountant against another library's, the calibration, the
clipping bound (fused and unfused), the noise's standard deviation, adaptive clipping by hand, fused equals unfused
with the same noise, and the bad input lines."""

from __future__ import annotations

import itertools
import json
import logging
import math
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from federations import tiny_federation

from lit_fl.algorithms import SCAFFOLD, ServerFedAvg
from lit_fl.errors import ConfigError
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.state import Federation
from lit_fl.privacy import user_level
from lit_fl.privacy.accounting import RDP_ORDERS, SampledGaussian, calibrate_noise, epsilon
from lit_fl.privacy.config import PrivacyConfig
from lit_fl.privacy.plan import PrivacyPlan, plan_privacy
from lit_fl.privacy.state import PrivacyState
from lit_fl.steps.runner import StepRunner
from lit_fl.tracking import read_metrics

CLIP = user_level.clip_deltas
#: float64 models: fused and unfused rounds differ by summation order only (as in tests/test_client_work.py)
RTOL = 1e-10

# -- accounting -------------------------------------------------------------------------------------------------

GRID = list(itertools.product([0.001, 0.01, 0.05], [0.8, 1.0, 2.0], [100, 1000], [1e-5, 1e-3]))


@pytest.mark.parametrize(("rate", "sigma", "steps", "delta"), GRID)
def test_rdp_epsilon_equals_opacus_rdp_accountant_within_1_percent(rate: float, sigma: float, steps: int,
                                                                   delta: float) -> None:
    """Opacus's own implementation of the subsampled Gaussian's RDP (same orders): the independent reference."""
    from opacus.accountants import RDPAccountant

    logging.disable(logging.WARNING)
    try:
        reference = RDPAccountant()
        reference.history = [(sigma, rate, steps)]
        expected = reference.get_epsilon(delta, alphas=list(RDP_ORDERS))
    finally:
        logging.disable(logging.NOTSET)
    ours = epsilon(SampledGaussian(sigma, rate * 10_000, 10_000), steps, delta)
    assert ours == pytest.approx(expected, rel=0.01)


@pytest.mark.parametrize(("accountant", "target"), [("rdp", 1.0), ("rdp", 8.0), ("pld", 2.0)])
def test_calibrated_noise_reaches_the_target_epsilon_within_1_percent(accountant: str, target: float) -> None:
    mechanism = SampledGaussian(0.0, 30, 1000)
    sigma = calibrate_noise(mechanism, 200, 1e-5, target, accountant)  # type: ignore[arg-type]
    reached = epsilon(SampledGaussian(sigma, 30, 1000), 200, 1e-5, accountant)  # type: ignore[arg-type]
    assert reached == pytest.approx(target, rel=0.01) and reached <= target * (1 + 1e-6)
    assert epsilon(SampledGaussian(sigma * 0.97, 30, 1000), 200, 1e-5, accountant) > target  # type: ignore[arg-type]


@pytest.mark.parametrize(("sigma", "rate"), [(1.0, 0.01), (2.0, 0.1)])
def test_fixed_size_sampling_costs_at_least_a_poisson_mechanism_of_twice_the_sensitivity(sigma: float,
                                                                                          rate: float) -> None:
    """Replacing one client moves the sum by up to 2 C: the fixed-size cohort's epsilon at sigma is at least that of
    Poisson sampling at the same rate with half the multiplier (add/remove of one client at 2 C)."""
    fixed = epsilon(SampledGaussian(sigma, rate * 1000, 1000, "fixed"), 100, 1e-5)
    poisson_double = epsilon(SampledGaussian(sigma / 2, rate * 1000, 1000), 100, 1e-5)
    assert fixed >= poisson_double


@pytest.mark.parametrize(("rate", "sigma", "steps"), [(0.01, 1.0, 100), (0.1, 2.0, 100), (0.01, 0.8, 1000)])
def test_pld_epsilon_is_within_opacus_prv_accountants_error_bound(rate: float, sigma: float, steps: int) -> None:
    """PLD (dp-accounting) against Opacus's PRV accountant, the other tight numerical accountant: PRV's epsilon is an
    upper bound within its ``eps_error`` (0.01) of the true curve, PLD's is pessimistic by its discretisation, so
    the two agree to 0.01 + 1 %."""
    from opacus.accountants import PRVAccountant

    reference = PRVAccountant()
    reference.history = [(sigma, rate, steps)]
    expected = reference.get_epsilon(1e-5, eps_error=0.01)
    ours = epsilon(SampledGaussian(sigma, rate * 10_000, 10_000), steps, 1e-5, "pld")
    assert abs(ours - expected) <= 0.01 + 0.01 * expected


def test_noise_cohort_size_scales_the_noise_and_samples_that_many_for_the_accountant() -> None:
    """pfl-research's option: with M = 1,000 of a population of 10^6, a round of E = 10 expected clients carries the
    noise of 1,000 (its standard deviation times E / M) and the accountant samples at M / population."""
    p = plan(noise_cohort_size=1000, population=10**6, delta=1e-7)
    assert p.noise_scale == pytest.approx(10 / 1000) and p.mechanism.rate == pytest.approx(1e-3)
    assert p.epsilon(10) == pytest.approx(epsilon(SampledGaussian(1.0, 1000, 10**6), 10, 1e-7))
    n = 10_000
    zeros = torch.zeros(n, dtype=torch.float64)
    out = user_level.private_round(p, {"w": zeros}, [{"w": zeros}], 0.5, torch.Generator().manual_seed(2), 1)
    expected = 1.0 * 0.5 * (10 / 1000) / 10  # sigma C s / E
    assert float(out.values[0]["w"].std()) == pytest.approx(expected, abs=3 * expected / math.sqrt(2 * n))


@pytest.mark.parametrize(("accountant", "sampling"), [("rdp", "poisson"), ("rdp", "fixed"), ("pld", "poisson")])
def test_epsilon_from_one_cached_round_equals_the_accountant_composing_every_round(accountant: str,
                                                                                   sampling: str) -> None:
    """RDP composes linearly (the cached one-round divergences times t) and a PLD self-composes (the cached one-round
    distribution's ``self_compose(t)``): both give dp-accounting's own accountant on the t-fold event; PLD up to
    the float64 rounding of its composition with the accountant's initial identity distribution."""
    from lit_fl.privacy.accounting import make_accountant

    mechanism = SampledGaussian(0.9, 15, 50, sampling)  # type: ignore[arg-type]
    for steps in (1, 7, 300):
        reference = make_accountant(accountant, sampling)  # type: ignore[arg-type]
        reference.compose(mechanism.event(steps))
        ours = epsilon(mechanism, steps, 1e-3, accountant)  # type: ignore[arg-type]
        assert ours == pytest.approx(reference.get_epsilon(1e-3), rel=1e-9 if accountant == "pld" else 0)


def test_more_rounds_spend_more_epsilon_and_none_spend_nothing() -> None:
    mechanism = SampledGaussian(1.0, 10, 100)
    values = [epsilon(mechanism, t, 1e-3) for t in (0, 1, 10, 100)]
    assert values[0] == 0.0 and values == sorted(values) and len(set(values)) == 4


# -- the mechanism ----------------------------------------------------------------------------------------------


def plan(rounds: int = 10, **overrides: object) -> PrivacyPlan:
    config = PrivacyConfig(**{"level": "user", "noise_multiplier": 1.0, "clip_norm": 0.5, **overrides})
    return plan_privacy(config, num_clients=100, client_fraction=0.1, rounds=rounds)


def test_clipping_scales_long_updates_to_c_and_leaves_short_ones() -> None:
    """Three clients stacked, at scales 0.01, 0.1 and 10: each one's norm is over all its tensors, the long one is
    scaled to C, the short ones are left as they are."""
    gen = torch.Generator().manual_seed(0)
    scale = torch.tensor([0.01, 0.1, 10.0], dtype=torch.float64)
    deltas = {"w": torch.randn(3, 7, 3, generator=gen, dtype=torch.float64) * scale.reshape(3, 1, 1),
              "b": torch.randn(3, 3, generator=gen, dtype=torch.float64) * scale.reshape(3, 1)}
    norms = user_level.update_norms(deltas)
    expected = (deltas["w"].flatten(1).pow(2).sum(1) + deltas["b"].pow(2).sum(1)).sqrt()
    torch.testing.assert_close(norms, expected, rtol=1e-14, atol=0)
    clipped = user_level.clip_deltas(deltas, norms, 0.5)
    clipped_norms = user_level.update_norms(clipped)
    for n in range(3):
        if float(norms[n]) <= 0.5:
            assert all(torch.equal(clipped[k][n], deltas[k][n]) for k in deltas)
        else:
            assert float(clipped_norms[n]) == pytest.approx(0.5, rel=1e-12)
            ratio = clipped["w"][n] / deltas["w"][n]
            torch.testing.assert_close(ratio, torch.full_like(ratio, 0.5 / float(norms[n])), rtol=1e-12, atol=0)
    assert float(norms[2]) > 0.5 > float(norms[1])  # the case covers both sides of C


def test_the_noise_on_the_average_has_standard_deviation_sigma_c_over_the_expected_cohort() -> None:
    """10^4 entries of one round's average over m = 5 zero updates: their spread is the noise's,
    ``sigma * C / E`` with E = q N = 10; within 3 standard errors (the sample std's is std / sqrt(2 n))."""
    p = plan()
    n = 10_000
    start = {"w": torch.zeros(n, dtype=torch.float64)}
    sent = [{"w": torch.zeros(n, dtype=torch.float64)} for _ in range(5)]
    out = user_level.private_round(p, start, sent, 0.5, torch.Generator().manual_seed(1), 1)
    average = sum(v["w"] for v in out.values) / len(out.values)
    expected = 1.0 * 0.5 / 10
    assert float(average.std()) == pytest.approx(expected, abs=3 * expected / math.sqrt(2 * n))
    assert abs(float(average.mean())) < 3 * expected / math.sqrt(n)


def test_the_average_of_the_private_updates_is_start_plus_clipped_sum_and_noise_over_e() -> None:
    p = plan(noise_multiplier=0.0)
    start = {"w": torch.tensor([1.0, 2.0], dtype=torch.float64), "n": torch.tensor(3)}
    sent = [torch.tensor([1.3, 2.4], dtype=torch.float64), torch.tensor([1.1, 2.0], dtype=torch.float64)]
    out = user_level.private_round(p, start, [{"w": w, "n": torch.tensor(9)} for w in sent], 0.5, torch.Generator(), 1)
    assert len(out.values) == 2 and all(int(v["n"]) == 9 for v in out.values)
    # Delta_0 = (0.3, 0.4), norm 0.5: kept; Delta_1 = (0.1, 0): kept; (sum) / E = (0.4, 0.4) / 10
    average = sum(v["w"] for v in out.values) / 2
    torch.testing.assert_close(average, torch.tensor([1.04, 2.04], dtype=torch.float64), rtol=1e-14, atol=0)


def test_a_side_delta_is_clipped_with_its_model_delta_by_one_norm_and_keeps_its_sum() -> None:
    """SCAFFOLD's (Delta y, Delta c) is one vector: client 0's (0.3, 0 | 0.4) has norm 0.5 = C and stays; client 1's
    (0.6, 0 | 0.8) has norm 1 and halves. Without noise the side deltas sum to 0.4 + 0.4; the model average is
    w_t + (0.3 + 0.3, 0) / E."""
    p = plan(noise_multiplier=0.0)
    start = {"w": torch.zeros(2, dtype=torch.float64)}
    sent = [{"w": torch.tensor([0.3, 0.0], dtype=torch.float64)},
            {"w": torch.tensor([0.6, 0.0], dtype=torch.float64)}]
    side = [{"c": torch.tensor([0.4], dtype=torch.float64)}, {"c": torch.tensor([0.8], dtype=torch.float64)}]
    out = user_level.private_round(p, start, sent, 0.5, torch.Generator(), 1, side, {"c": torch.zeros(1)})
    torch.testing.assert_close(out.side[0]["c"] + out.side[1]["c"], torch.tensor([0.8], dtype=torch.float64),
                               rtol=1e-14, atol=0)
    torch.testing.assert_close((out.values[0]["w"] + out.values[1]["w"]) / 2,
                               torch.tensor([0.06, 0.0], dtype=torch.float64), rtol=1e-14, atol=0)


def test_an_empty_cohort_still_moves_the_model_by_the_noise() -> None:
    out = user_level.private_round(plan(), {"w": torch.zeros(4, dtype=torch.float64)}, [], 0.5,
                                   torch.Generator().manual_seed(0), 1)
    (values,) = out.values
    assert values["w"].abs().sum() > 0


def test_adaptive_clipping_follows_andrew_et_al_by_hand() -> None:
    p = plan(target_quantile=0.5, clip_learning_rate=0.2, clipped_count_stddev=0.5, noise_multiplier=0.5)
    # Theorem 1: sigma_Delta = (z^-2 - (2 sigma_b)^-2)^(-1/2) = (4 - 1)^(-1/2)
    assert p.update_noise_multiplier == pytest.approx(3 ** -0.5, rel=1e-12)
    norms = torch.tensor([0.2, 0.4, 0.9], dtype=torch.float64)  # two of three at most C = 0.5
    gen = torch.Generator().manual_seed(3)
    draw = float(torch.randn((), generator=torch.Generator().manual_seed(3), dtype=torch.float64))
    clip, metrics = user_level._adapt(p, norms, 0.5, gen)
    share = (2 + draw * 0.5) / 10  # E = q N = 10
    assert metrics["unclipped_share"] == pytest.approx(share, rel=1e-12)
    assert clip == pytest.approx(0.5 * math.exp(-0.2 * (share - 0.5)), rel=1e-12)


def test_adaptive_clipping_refuses_a_count_noise_that_leaves_no_budget() -> None:
    with pytest.raises(ConfigError, match=r"^privacy.clipped_count_stddev: .* 2 \* clipped_count_stddev"):
        plan(target_quantile=0.5, clipped_count_stddev=0.4, noise_multiplier=1.0)


# -- on the server pipeline, fused and unfused --------------------------------------------------------------------


@pytest.fixture
def float64(one_thread: None) -> Iterator[None]:
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(previous)


def private_run(fuse: str, monkeypatch: pytest.MonkeyPatch, method: type = ServerFedAvg,
                **privacy: object) -> tuple[Federation, list[float]]:
    """3 rounds of user-level DP (``method``: DP-FedAvg, or SCAFFOLD with its control change clipped beside the
    model) on six uneven clients; the norms of every clipped update."""
    clipped_norms: list[float] = []

    def spy(deltas: dict[str, torch.Tensor], norms: torch.Tensor, clip_norm: float) -> dict[str, torch.Tensor]:
        out = CLIP(deltas, norms, clip_norm)
        clipped_norms.extend(user_level.update_norms(out).tolist())
        return out

    monkeypatch.setattr(user_level, "clip_deltas", spy)
    fed = tiny_federation(num_clients=6, pool=("cnn_4_8",))
    algo = method(client_fraction=0.5, local_epochs=1, batch_size=16)
    config = PrivacyConfig(**{"level": "user", "noise_multiplier": 0.3, "clip_norm": 0.05, **privacy})
    fed.privacy = plan_privacy(config, fed.num_clients, 0.5, 3)
    fed.privacy_state = PrivacyState.start(config.clip_norm, 0)
    algo.setup(fed)
    runner, ledger = StepRunner("cpu", fuse=fuse), CommunicationLedger.of(fed)
    for round_ in range(1, 4):
        ledger.start_round()
        algo.run_round(round_, fed, runner, ledger)
    return fed, clipped_norms


@pytest.mark.parametrize(("method", "sampling"), [(ServerFedAvg, "poisson"), (ServerFedAvg, "fixed"),
                                                 (SCAFFOLD, "poisson")])
def test_fused_and_unfused_dp_rounds_clip_every_update_and_give_the_same_weights(
    method: type, sampling: str, float64: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    fused, fused_norms = private_run("on", monkeypatch, method, client_sampling=sampling)
    unfused, unfused_norms = private_run("off", monkeypatch, method, client_sampling=sampling)
    assert len(fused_norms) == len(unfused_norms) >= 3
    assert max(fused_norms + unfused_norms) <= 0.05 * (1 + 1e-12)
    a, b = (torch.cat([v.flatten() for v in f.server["global"].state_dict().values() if v.is_floating_point()])
            for f in (fused, unfused))
    assert (a - b).norm() <= RTOL * b.norm()


@pytest.mark.parametrize("method", [ServerFedAvg, SCAFFOLD])
def test_a_round_without_clients_moves_the_server_model_by_the_noise_alone(method: type, float64: None) -> None:
    """Poisson sampling at q = 0.05 of 6 clients: a round draws nobody most of the time; the server model still
    moves by ``noise / E`` (the accountant charged the round) and nobody trained."""
    fed = tiny_federation(num_clients=6, pool=("cnn_4_8",))
    algo = method(client_fraction=0.05, local_epochs=1, batch_size=16)
    config = PrivacyConfig(level="user", noise_multiplier=1.0, clip_norm=0.5)
    fed.privacy, fed.privacy_state = plan_privacy(config, fed.num_clients, 0.05, 3), PrivacyState.start(0.5, 0)
    algo.setup(fed)
    fed.rng.selection = np.random.default_rng(7)  # a draw of nobody at the first round
    assert not algo.select(fed)
    fed.rng.selection = np.random.default_rng(7)
    before = {k: v.clone() for k, v in fed.server["global"].state_dict().items()}
    clients = [{k: v.clone() for k, v in c.model.state_dict().items()} for c in fed.clients]
    runner, ledger = StepRunner("cpu", fuse="off"), CommunicationLedger.of(fed)
    ledger.start_round()
    result = algo.run_round(1, fed, runner, ledger)
    moved = torch.cat([(fed.server["global"].state_dict()[k] - v).flatten() for k, v in before.items()
                       if v.is_floating_point()])
    expected = 1.0 * 0.5 / (0.05 * 6)  # sigma C / E per entry
    assert result.senders == () and result.extra["epsilon"] == fed.privacy.epsilon(1)
    assert float(moved.std()) == pytest.approx(expected, rel=0.2)  # a few thousand entries: far inside 20 %
    assert all(torch.equal(c.model.state_dict()[k], v) for c, saved in zip(fed.clients, clients)
               for k, v in saved.items())


def test_the_privacy_stream_and_clip_norm_are_checkpointed(float64: None, monkeypatch: pytest.MonkeyPatch) -> None:
    fed, _ = private_run("off", monkeypatch, target_quantile=0.5, clipped_count_stddev=10.0)
    assert fed.privacy_state is not None and fed.privacy_state.clip_norm != 0.05  # adaptive clipping moved it
    state = fed.state_dict()
    fresh = tiny_federation(num_clients=6, pool=("cnn_4_8",))
    ServerFedAvg(client_fraction=0.5).setup(fresh)
    fresh.privacy_state = PrivacyState.start(0.05, 0)
    fresh.load_state_dict(state)
    assert fresh.privacy_state.clip_norm == fed.privacy_state.clip_norm
    draws = [torch.randn(5, generator=f.privacy_state.noise) for f in (fresh, fed)]
    assert torch.equal(*draws)
    assert "privacy" not in tiny_federation(num_clients=6, pool=("cnn_4_8",)).state_dict()  # a run without DP


def test_poisson_sampling_draws_each_client_with_probability_q() -> None:
    """2,000 cohorts of 6 clients at q = 0.5: their sizes vary (some empty) and average q N within 3 standard
    errors (a cohort's size is Binomial(6, 0.5): std sqrt(1.5))."""
    fed = tiny_federation(num_clients=6, pool=("cnn_4_8",))
    algo = ServerFedAvg(client_fraction=0.5)
    fed.privacy = plan_privacy(PrivacyConfig(level="user", noise_multiplier=1.0), fed.num_clients, 0.5, 10)
    sizes = [len(algo.select(fed)) for _ in range(2000)]
    assert min(sizes) == 0 and max(sizes) == 6
    assert sum(sizes) / len(sizes) == pytest.approx(3.0, abs=3 * math.sqrt(1.5 / 2000))


# -- bad input, one line each -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("overrides", "message"), [
    ({"target_epsilon": 0.01, "noise_multiplier": None, "rounds": 1000},
     r"^privacy.target_epsilon: 0.01 cannot be reached in 1000 rounds at delta 0.00630957 with a noise multiplier "
     r"up to 100; raise it, or lower rounds or algorithm.client_fraction$"),
    ({"delta": 0.02}, r"^privacy.delta: 0.02 must be below 1 / \(number of users\) = 1/100"),
    ({"noise_cohort_size": 500}, r"^privacy.noise_cohort_size: 500 is more than the population of 100"),
])
def test_bad_privacy_settings_are_one_line(overrides: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan(**overrides)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("clip_norm", 0, r"^privacy.clip_norm must be > 0, got 0$"),
    ("noise_multiplier", -1, r"^privacy.noise_multiplier must be in \[0, 100\], got -1$"),
    ("noise_multiplier", 101, r"^privacy.noise_multiplier must be in \[0, 100\], got 101$"),
    ("level", "central", r"^privacy.level: 'central' is not allowed; allowed: none, user, sample$"),
])
def test_out_of_range_privacy_keys_are_one_line(key: str, value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        PrivacyConfig(**{"level": "user", "noise_multiplier": 1.0, key: value})


def test_a_method_that_cannot_take_user_level_dp_refuses_it_in_one_line(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "cfg.yaml", {**tiny_config("DefKT", rounds=1), "models": {"pool": ["cnn_4_8"]},
                                               "privacy": {"level": "user", "noise_multiplier": 1.0}})
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs")
    assert result.rc == 2 and not (tmp_path / "runs").exists()
    (line,) = result.err.strip().splitlines()
    assert line.startswith("lit-fl: error: privacy.level: user takes a server method whose uploads are model "
                           "weights (FedNTD, SCAFFOLD, ServerFedAvg, ServerFedProx) or a decentralized method whose "
                           "exchanges are (DFML, DFedAvgM, DecentralizedFedAvg, DecentralizedFedProx); DefKT sends "
                           "none"), line


# -- a run ----------------------------------------------------------------------------------------------------------


def test_a_private_run_logs_epsilon_every_round_and_its_settings_in_the_summary(tmp_path: Path) -> None:
    config = tiny_config("ServerFedAvg", rounds=3, client_fraction=0.5, local_epochs=1)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"] = {"pool": ["cnn_4_8"]}
    config["data"]["num_clients"] = 6
    config["privacy"] = {"level": "user", "target_epsilon": 30.0, "delta": 0.1, "clip_norm": 0.1}
    cfg = write_config(tmp_path / "cfg.yaml", config)
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", "--name", "dp")
    assert result.rc == 0, result.err
    rows = read_metrics(tmp_path / "runs" / "dp" / "metrics.csv")
    spent = [r["epsilon"] for r in rows]
    assert spent == sorted(spent) and spent[-1] == pytest.approx(30.0, rel=0.01)
    summary = json.loads((tmp_path / "runs" / "dp" / "summary.json").read_text())
    assert summary["privacy"]["epsilon"] == pytest.approx(spent[-1], rel=1e-5)
    assert summary["privacy"]["delta"] == 0.1 and summary["privacy"]["level"] == "user"
    sigma = summary["privacy"]["noise_multiplier"]
    assert epsilon(SampledGaussian(sigma, 3, 6), 3, 0.1) == pytest.approx(30.0, rel=0.01)


def private_config(tmp_path: Path, rounds: int, **privacy: object) -> Path:
    config = tiny_config("ServerFedAvg", rounds=rounds, client_fraction=0.5, local_epochs=1)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"] = {"pool": ["cnn_4_8"]}
    config["data"]["num_clients"] = 6
    config["privacy"] = {"level": "user", "noise_multiplier": 0.5, "clip_norm": 0.1, "delta": 0.1,
                         "target_quantile": 0.5, "clipped_count_stddev": 2.0, **privacy}
    return write_config(tmp_path / f"cfg-{rounds}.yaml", config)


def test_a_resumed_private_run_equals_an_uninterrupted_one_and_refuses_other_privacy(tmp_path: Path) -> None:
    """Adaptive clipping's norm and the noise stream are state: 2 rounds then 1 more equal 3 rounds at once."""
    from lit_fl.federation.checkpoint import read_unpacked

    runs = tmp_path / "runs"
    assert run_cli("fit", "--config", private_config(tmp_path, 3), "--run_dir", runs, "--name", "whole").rc == 0
    assert run_cli("fit", "--config", private_config(tmp_path, 2), "--run_dir", runs, "--name", "split").rc == 0
    other = run_cli("fit", "--resume", runs / "split", "--rounds", "3", "--privacy.noise_multiplier", "0.6")
    assert other.rc == 2 and "differs from" in other.err and "privacy.noise_multiplier" in other.err
    assert run_cli("fit", "--resume", runs / "split", "--rounds", "3").rc == 0
    whole, split = (read_metrics(runs / name / "metrics.csv") for name in ("whole", "split"))
    assert [r["clip_norm"] for r in whole] == [r["clip_norm"] for r in split]
    assert len({r["clip_norm"] for r in whole}) == 3  # adaptive clipping moved it every round
    assert [r["server_acc/global"] for r in whole] == [r["server_acc/global"] for r in split]
    a, b = (read_unpacked(runs / name / "checkpoints" / "last.ckpt")["federation"]["server"]["global"]
            for name in ("whole", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_run_calibrated_to_a_target_epsilon_cannot_change_its_rounds_on_resume(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    cfg = private_config(tmp_path, 2, noise_multiplier=None, target_epsilon=20.0)
    assert run_cli("fit", "--config", cfg, "--run_dir", runs, "--name", "r").rc == 0
    result = run_cli("fit", "--resume", runs / "r", "--rounds", "3")
    assert result.rc == 2
    assert result.err.strip().endswith("a resume cannot change rounds (give privacy.noise_multiplier to extend a run)")
