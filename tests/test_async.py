"""Asynchronous aggregation on the virtual clock (FedAsync, FedBuff; :mod:`lit_fl.algorithms.async_server`): the
staleness weights and a server step by hand, updates taken in the order they arrive, and a stopped and resumed
asynchronous run equal to an uninterrupted one (the in-flight updates are state)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from conftest import run_cli, tiny_config, write_config
from torch import nn

from lit_fl.algorithms import FedAsync, FedBuff
from lit_fl.algorithms.async_server import InFlight, staleness_weight
from lit_fl.algorithms.fedbuff import fedbuff_staleness
from lit_fl.tracking import read_metrics


def test_staleness_functions_by_hand() -> None:
    """Xie et al. 2019 sec. 5.2 and Nguyen et al. 2022: s(tau) at a = 0.5, b = 4 (hinge slope a = 10)."""
    assert [staleness_weight(t, "constant", 0.5, 4) for t in (0, 3, 9)] == [1.0, 1.0, 1.0]
    assert [staleness_weight(t, "polynomial", 0.5, 4) for t in (0, 3, 8)] == pytest.approx([1.0, 0.5, 1 / 3])
    assert [staleness_weight(t, "hinge", 10.0, 4) for t in (0, 4, 5, 6)] == pytest.approx([1.0, 1.0, 1 / 11, 1 / 21])
    assert [fedbuff_staleness(t) for t in (0, 3, 8)] == pytest.approx([1.0, 0.5, 1 / 3])


def server(values: list[float]) -> SimpleNamespace:
    model = nn.Linear(len(values), 1, bias=False).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([values], dtype=torch.float64))
    return SimpleNamespace(server={"global": model})


def test_a_fedasync_step_by_hand() -> None:
    """x = (1 - alpha s) x + alpha s x_new with alpha 0.6, polynomial s(3) = 0.5: alpha_t = 0.3."""
    fed = server([1.0, 2.0])
    update = InFlight(0, 2, 1.0, {"weight": torch.tensor([[3.0, -2.0]], dtype=torch.float64)}, 1.0)
    metrics = FedAsync(alpha=0.6, staleness="polynomial", staleness_a=0.5).apply([update], [3], fed)
    assert metrics == {"alpha_t": pytest.approx(0.3)}
    torch.testing.assert_close(fed.server["global"].weight, torch.tensor([[0.7 * 1 + 0.3 * 3, 0.7 * 2 - 0.3 * 2]],
                                                                         dtype=torch.float64))


def test_a_fedbuff_step_by_hand() -> None:
    """x + eta (1/K) sum s(tau_i) Delta_i: deltas (2, 0) at tau 0 and (0, 4) at tau 3, eta 0.5."""
    fed = server([1.0, 1.0])
    updates = [InFlight(0, 5, 1.0, {"weight": torch.tensor([[2.0, 0.0]], dtype=torch.float64)}, 1.0),
               InFlight(1, 2, 2.0, {"weight": torch.tensor([[0.0, 4.0]], dtype=torch.float64)}, 1.0)]
    FedBuff(buffer_size=2, server_lr=0.5).apply(updates, [0, 3], fed)
    expected = [1.0 + 0.5 * (1.0 * 2.0) / 2, 1.0 + 0.5 * (0.5 * 4.0) / 2]
    torch.testing.assert_close(fed.server["global"].weight, torch.tensor([expected], dtype=torch.float64))


def async_config(tmp_path: Path, algorithm: str, rounds: int, **init_args: object) -> Path:
    config = tiny_config(algorithm, rounds=rounds, local_epochs=1, concurrency=3, **init_args)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"] = {"pool": ["cnn_4_8"]}
    config["system"] = {"clock": True, "speed": "lognormal", "speed_scale": 0.05, "speed_sigma": 1.5}
    return write_config(tmp_path / f"{algorithm}-{rounds}.yaml", config)


@pytest.mark.parametrize(("algorithm", "init_args"), [("FedAsync", {}), ("FedBuff", {"buffer_size": 2})])
def test_a_stopped_and_resumed_async_run_equals_an_uninterrupted_one(tmp_path: Path, algorithm: str,
                                                                      init_args: dict[str, object]) -> None:
    """The in-flight updates (who, from which version, when they arrive, what they carry) are checkpointed: 3 steps
    then 3 more equal 6 at once, and the steps move the clock forward, stale updates among them."""
    from lit_fl.federation.checkpoint import read_unpacked

    runs = tmp_path / "runs"
    assert run_cli("fit", "--config", async_config(tmp_path, algorithm, 6, **init_args), "--run_dir", runs,
                   "--name", "whole").rc == 0
    assert run_cli("fit", "--config", async_config(tmp_path, algorithm, 3, **init_args), "--run_dir", runs,
                   "--name", "split").rc == 0
    assert run_cli("fit", "--resume", runs / "split", "--rounds", "6").rc == 0
    whole, split = (read_metrics(runs / name / "metrics.csv") for name in ("whole", "split"))
    keys = ("virtual_s", "server_acc/global", "mean_staleness", "train_loss")
    assert [[repr(r[k]) for k in keys] for r in whole] == [[repr(r[k]) for k in keys] for r in split]
    times = [r["virtual_s"] for r in whole]
    assert times == sorted(times) and times[-1] > times[0] > 0
    if algorithm == "FedAsync":  # one update a step: a slow client's arrives several versions late
        assert max(r["mean_staleness"] for r in whole) > 0
    a, b = (read_unpacked(runs / name / "checkpoints" / "last.ckpt")["federation"]["server"]["global"]
            for name in ("whole", "split"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_an_async_method_needs_the_clock(tmp_path: Path) -> None:
    config = tiny_config("FedAsync", rounds=1)
    config["algorithm"]["init_args"].pop("sender_fraction")
    config["models"] = {"pool": ["cnn_4_8"]}
    result = run_cli("fit", "--config", write_config(tmp_path / "c.yaml", config), "--run_dir", tmp_path / "runs")
    assert result.rc == 2
    assert result.err.strip() == ("lit-fl: error: system.clock: FedAsync is asynchronous: its updates arrive on the "
                                  "virtual clock; give system.clock true (docs/system.md)")


def test_a_server_step_takes_the_update_that_arrives_first(one_thread: None) -> None:
    """Three clients in flight with known arrival times: FedAsync's step takes the earliest (not the latest, not
    the first started), the round lasts until it arrived, and one idle client starts from the new model."""
    from federations import tiny_federation

    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner
    from lit_fl.system.profiles import ClientSystem

    fed = tiny_federation(num_clients=4, pool=("cnn_4_8",))
    fed.systems = [ClientSystem(rate, 100.0, 100.0, 0.0) for rate in (0.01, 0.5, 0.05, 1.0)]
    algo = FedAsync(concurrency=3, local_epochs=1, batch_size=16)
    algo.setup(fed)
    runner, ledger = StepRunner("cpu"), CommunicationLedger.of(fed)
    ledger.start_round()
    algo.dispatch(3, 0.0, fed, runner, ledger)
    arrivals = {u.client: u.arrives_s for u in algo.in_flight}
    first = min(arrivals, key=arrivals.__getitem__)
    result = algo.run_round(1, fed, runner, ledger)
    assert result.senders == (first,) and ledger.cutoff_s == arrivals[first]
    assert algo.version == 1 and len(algo.in_flight) == 3 and first not in {u.client for u in algo.in_flight
                                                                           if u.version == 0}
