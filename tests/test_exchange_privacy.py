"""User-level DP on the exchanges of decentralized methods (``privacy.level user`` on DecentralizedFedAvg, DFML,
DFedAvgM; :mod:`lit_fl.privacy.exchange`): a release is its sender's public reference plus the clipped delta plus
noise, each client's epsilon composes the releases it made (Opacus's RDP accountant is the reference), everything
that leaves a client is a release, and a run logs, checkpoints and resumes it."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import torch
from conftest import run_cli, tiny_config, write_config

from lit_fl.errors import ConfigError
from lit_fl.privacy.accounting import RDP_ORDERS
from lit_fl.privacy.config import PrivacyConfig
from lit_fl.privacy.exchange import ExchangePlan, plan_exchange_privacy, released, released_jointly
from lit_fl.privacy.state import PrivacyState
from lit_fl.tracking import read_metrics


def plan(sigma: float, clip: float = 1.0) -> ExchangePlan:
    return ExchangePlan(PrivacyConfig(level="user", noise_multiplier=sigma, clip_norm=clip), sigma, 1e-5)


def test_a_release_is_the_reference_plus_the_clipped_delta_and_moves_the_reference() -> None:
    """||w - r|| = 5 at C = 1: the release is r + (w - r) / 5; an integer buffer travels as it is."""
    state = PrivacyState.start(1.0, 0)
    state.references[3] = {"w": torch.zeros(2, dtype=torch.float64), "n": torch.tensor(0)}
    weights = {"w": torch.tensor([3.0, 4.0], dtype=torch.float64), "n": torch.tensor(7)}
    out = released(plan(0.0), state, 3, weights)
    torch.testing.assert_close(out["w"], torch.tensor([0.6, 0.8], dtype=torch.float64), rtol=1e-15, atol=0)
    assert int(out["n"]) == 7 and state.releases == {3: 1}
    assert torch.equal(state.references[3]["w"], out["w"])  # the next release is clipped against this one
    short = released(plan(0.0), state, 3, {"w": out["w"] + torch.tensor([0.1, 0.0], dtype=torch.float64),
                                           "n": torch.tensor(7)})
    torch.testing.assert_close(short["w"], out["w"] + torch.tensor([0.1, 0.0], dtype=torch.float64))  # within C
    assert state.releases == {3: 2}


def test_the_noise_of_a_release_has_standard_deviation_sigma_c() -> None:
    n, sigma, clip = 10_000, 1.5, 0.4
    state = PrivacyState.start(1.0, 0)
    state.references[0] = {"w": torch.zeros(n, dtype=torch.float64)}
    out = released(plan(sigma, clip), state, 0, {"w": torch.zeros(n, dtype=torch.float64)})["w"]
    expected = sigma * clip
    assert abs(float(out.mean())) < 3 * expected / math.sqrt(n)
    assert abs(float(out.std()) - expected) < 3 * expected / math.sqrt(2 * n)


def test_an_aggregators_returns_are_one_release_with_one_norm_over_all_of_them() -> None:
    state = PrivacyState.start(1.0, 0)
    weights = [{"w": torch.tensor([3.0, 0.0], dtype=torch.float64)}, {"w": torch.tensor([0.0, 4.0],
                                                                                        dtype=torch.float64)}]
    references = [{"w": torch.zeros(2, dtype=torch.float64)}] * 2
    out = released_jointly(plan(0.0, clip=1.0), state, 5, weights, references)
    torch.testing.assert_close(torch.cat([o["w"] for o in out]),
                               torch.tensor([0.6, 0.0, 0.0, 0.8], dtype=torch.float64), rtol=1e-15, atol=0)
    assert state.releases == {5: 1}


@pytest.mark.parametrize("sigma", [1.0, 4.0, 10.0])
@pytest.mark.parametrize("releases", [1, 20, 200])
def test_a_clients_epsilon_equals_opacus_rdp_accountant_for_its_releases(sigma: float, releases: int) -> None:
    """A release is a Gaussian of sensitivity 2C: multiplier sigma / 2, no sampling (rate 1)."""
    from opacus.accountants import RDPAccountant

    logging.disable(logging.WARNING)
    try:
        reference = RDPAccountant()
        reference.history = [(sigma / 2, 1.0, releases)]
        expected = reference.get_epsilon(1e-5, alphas=list(RDP_ORDERS))
    finally:
        logging.disable(logging.NOTSET)
    assert plan(sigma).client_epsilon(releases) == pytest.approx(expected, rel=0.01)


def test_a_target_epsilon_is_spent_by_a_client_that_releases_every_round_within_1_percent() -> None:
    config = PrivacyConfig(level="user", target_epsilon=5.0, delta=1e-3)
    resolved = plan_exchange_privacy(config, 10, 30)
    assert resolved.client_epsilon(30) == pytest.approx(5.0, rel=0.01)


@pytest.mark.parametrize(("privacy", "message"), [
    ({"client_sampling": "fixed"}, "^privacy.client_sampling: a decentralized method draws its own participants"),
    ({"delta": 0.2}, r"^privacy.delta: 0.2 must be below 1 / \(number of users\) = 1/10"),
    ({"target_quantile": 0.5}, "^privacy.target_quantile: belongs to user-level DP on a server"),
])
def test_bad_exchange_privacy_settings_are_one_line(privacy: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        plan_exchange_privacy(PrivacyConfig(level="user", noise_multiplier=1.0, **privacy), 10, 5)


# -- runs ------------------------------------------------------------------------------------------------------------


def exchange_config(tmp_path: Path, algorithm: str, rounds: int, name: str, **privacy: object) -> Path:
    config = tiny_config(algorithm, rounds=rounds)
    if algorithm == "DFedAvgM":
        config["algorithm"]["init_args"] = {"num_peers": 2}
    config["models"] = {"pool": ["cnn_4_8"]}
    config["privacy"] = {"level": "user", "noise_multiplier": 0.5, "clip_norm": 1.0, "delta": 0.1, **privacy}
    return write_config(tmp_path / f"{name}.yaml", config)


def final_weights(run: Path) -> list[dict[str, torch.Tensor]]:
    from lit_fl.federation.checkpoint import read_unpacked

    return [c["model"] for c in read_unpacked(run / "checkpoints" / "last.ckpt")["federation"]["clients"]]


@pytest.mark.parametrize("algorithm", ["DecentralizedFedAvg", "DFML", "DFedAvgM"])
def test_without_clipping_or_noise_the_private_exchange_is_the_plain_one(tmp_path: Path, algorithm: str) -> None:
    """C far above any delta and sigma 0: every release is its weights (r + (w - r): float32 rounding of the
    weights, 1e-5 relative after the rounds' arithmetic), so the run equals the one without privacy."""
    runs = tmp_path / "runs"
    private = exchange_config(tmp_path, algorithm, 2, "private", noise_multiplier=0.0, clip_norm=1e9)
    plain = exchange_config(tmp_path, algorithm, 2, "plain", level="none")
    assert run_cli("fit", "--config", private, "--run_dir", runs, "--name", "private").rc == 0
    assert run_cli("fit", "--config", plain, "--run_dir", runs, "--name", "plain").rc == 0
    for a, b in zip(final_weights(runs / "private"), final_weights(runs / "plain")):
        for key, value in b.items():
            if value.is_floating_point():
                assert float((a[key] - value).norm()) <= 1e-5 * max(float(value.norm()), 1e-6), key
    rows = read_metrics(runs / "private" / "metrics.csv")
    assert all(math.isinf(r["epsilon"]) for r in rows)  # no noise: no privacy, and the page says so


@pytest.mark.parametrize("algorithm", ["DecentralizedFedAvg", "DFML", "DFedAvgM"])
def test_every_client_that_sent_spent_and_a_resumed_run_equals_an_uninterrupted_one(tmp_path: Path,
                                                                                     algorithm: str) -> None:
    """References, release counts and the noise stream are state: 1 round then 1 more equal 2 rounds at once."""
    runs = tmp_path / "runs"
    assert run_cli("fit", "--config", exchange_config(tmp_path, algorithm, 2, "whole"), "--run_dir", runs,
                   "--name", "whole").rc == 0
    assert run_cli("fit", "--config", exchange_config(tmp_path, algorithm, 1, "split"), "--run_dir", runs,
                   "--name", "split").rc == 0
    assert run_cli("fit", "--resume", runs / "split", "--rounds", "2").rc == 0
    for a, b in zip(final_weights(runs / "whole"), final_weights(runs / "split")):
        assert all(torch.equal(a[k], b[k]) for k in a)
    rows = read_metrics(runs / "whole" / "metrics.csv")
    spent = [[r[f"epsilon_client_{k}"] for k in range(4)] for r in rows]
    assert [r["epsilon"] for r in rows] == [max(s) for s in spent]
    assert all(b >= a for a, b in zip(*spent)) and max(spent[-1]) > max(spent[0]) > 0
    if algorithm != "DFedAvgM":  # what an aggregator returns carries its own data: it is a release of its own
        assert spent[0][int(rows[0]["aggregator"])] > 0
    resolved = ExchangePlan(PrivacyConfig(level="user", noise_multiplier=0.5), 0.5, 0.1)
    assert all(any(e == pytest.approx(resolved.client_epsilon(k), rel=1e-4) for k in range(3))
               for e in spent[0])  # after one round every client made 0, 1 or 2 releases
    summary = json.loads((runs / "whole" / "summary.json").read_text())["privacy"]
    assert summary["mechanism"] == "exchange" and summary["epsilon"] == pytest.approx(max(spent[-1]), rel=1e-5)


def test_dfml_without_returns_leaves_every_sender_its_own_model(tmp_path: Path) -> None:
    """mutual off: nothing comes back, so a sender keeps the weights it trained, not the release it sent (sigma C =
    50 would have wrecked it); only the aggregator, which learned from the releases, differs."""
    runs = tmp_path / "runs"
    config = {**tiny_config("DFML", rounds=1), "models": {"pool": ["cnn_4_8"]}}
    config["algorithm"]["init_args"]["mutual"] = False
    config["privacy"] = {"level": "user", "noise_multiplier": 50.0, "clip_norm": 1.0, "delta": 0.1}
    plain = dict(config, privacy={"level": "none"})
    for name, cfg in (("private", config), ("plain", plain)):
        assert run_cli("fit", "--config", write_config(tmp_path / f"{name}-m.yaml", cfg), "--run_dir", runs,
                       "--name", name).rc == 0
    (row,) = read_metrics(runs / "private" / "metrics.csv")
    for k, (a, b) in enumerate(zip(final_weights(runs / "private"), final_weights(runs / "plain"))):
        same = all(torch.equal(a[key], b[key]) for key in a)
        assert same == (k != row["aggregator"])  # the aggregator learned from noised teachers; no sender was noised


@pytest.mark.parametrize("algorithm", ["DecentralizedFedAvg", "DFML", "DFedAvgM"])
def test_the_noise_reaches_every_participant_and_no_one_else(tmp_path: Path, algorithm: str) -> None:
    """sigma C = 50 for one round: every participant ends with a model built from releases (an average of them, a
    noised return, a mix of its neighbours' releases), so differs from the run without privacy; a client that took
    no part is untouched."""
    runs = tmp_path / "runs"
    for name, privacy in (("private", {"noise_multiplier": 50.0}), ("plain", {"level": "none"})):
        assert run_cli("fit", "--config", exchange_config(tmp_path, algorithm, 1, name, **privacy), "--run_dir",
                       runs, "--name", name).rc == 0
    (row,) = read_metrics(runs / "private" / "metrics.csv")
    differ = [not all(torch.equal(a[k], b[k]) for k in a)
              for a, b in zip(final_weights(runs / "private"), final_weights(runs / "plain"))]
    assert sum(differ) == row["num_participants"] >= 2
    assert differ[int(row["aggregator"])] if algorithm != "DFedAvgM" else all(differ)
