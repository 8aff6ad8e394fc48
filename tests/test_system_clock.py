"""The virtual clock (``system`` section, :mod:`lit_fl.system`): a round's time from its events by hand, FedScale's
trace files read by a restricted unpickler (a pickle that would run code is refused and nothing of it runs), bad
traces refused in one line, and a run that charges, checkpoints and resumes its virtual time."""

from __future__ import annotations

import itertools
import json
import os
import pickle
import re
from pathlib import Path

import pytest
from conftest import run_cli, tiny_config, write_config

from lit_fl.errors import ConfigError
from lit_fl.federation.endpoints import SERVER
from lit_fl.system.clock import MEGABITS_PER_MB, Transfer, Work, round_time
from lit_fl.system.config import SystemConfig
from lit_fl.system.profiles import ClientSystem, build_systems
from lit_fl.system.traces import read_availability, read_capacities
from lit_fl.tracking import read_metrics

#: three clients: rates 100, 50 and 10 samples/s per million parameters; links 8/16, 4/8, 8/16 Mbit/s; latency 0.1 s
SYSTEMS = [ClientSystem(100.0, 8.0, 16.0, 0.1), ClientSystem(50.0, 4.0, 8.0, 0.1), ClientSystem(10.0, 8.0, 16.0, 0.1)]


def test_a_server_round_by_hand() -> None:
    """Each client: download 2 MB, train on 300 sample-Mparams, upload 2 MB; the round is its slowest client."""
    mb = 2.0
    events = [Transfer(SERVER, k, mb) for k in range(3)] + [Work(k, 300.0) for k in range(3)] + \
        [Transfer(k, SERVER, mb) for k in range(3)]
    link = mb * MEGABITS_PER_MB
    expected = [0.1 + link / s.download_mbps + 300.0 / s.rate + 0.1 + link / s.upload_mbps for s in SYSTEMS]
    timed = round_time(events, SYSTEMS, SERVER)
    assert [timed.finished[k] for k in range(3)] == pytest.approx(expected, rel=1e-12)
    assert timed.seconds == pytest.approx(max(expected), rel=1e-12)
    # by hand: client 2 = 0.1 + 16.777216/16 + 30 + 0.1 + 16.777216/8 = 33.345728 s
    assert timed.seconds == pytest.approx(33.345728, rel=1e-12)


def test_an_aggregator_waits_for_the_last_model_before_it_trains_and_returns() -> None:
    """Senders 1 and 2 train and send to aggregator 0; it trains (mutual learning) once both arrived, then returns."""
    mb = 1.0
    events = [Work(0, 50.0), Work(1, 50.0), Work(2, 50.0), Transfer(1, 0, mb), Transfer(2, 0, mb), Work(0, 100.0),
              Transfer(0, 1, mb), Transfer(0, 2, mb)]
    link = mb * MEGABITS_PER_MB
    arrive_1 = 50.0 / 50 + 0.1 + link / min(4.0, 16.0)  # sender 1 ready at 1 s; its upload is 4 Mbit/s
    arrive_2 = max(50.0 / 10, arrive_1) + 0.1 + link / min(8.0, 16.0)  # the aggregator receives one at a time
    trained = arrive_2 + 100.0 / 100
    back_1 = trained + 0.1 + link / min(8.0, 8.0)
    back_2 = back_1 + 0.1 + link / min(8.0, 16.0)
    timed = round_time(events, SYSTEMS, SERVER)
    assert timed.finished == pytest.approx({0: back_2, 1: back_1, 2: back_2}, rel=1e-12)
    assert timed.seconds == pytest.approx(back_2, rel=1e-12)


def test_a_round_without_events_takes_no_time() -> None:
    assert round_time([], SYSTEMS, SERVER).seconds == 0.0


# -- traces ---------------------------------------------------------------------------------------------------------


class _RunsACommand:
    """A pickle that would call ``os.system`` when loaded by ``pickle.load``."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return os.system, (f"touch {self.marker}",)


def test_a_pickle_that_would_run_code_is_refused_and_nothing_of_it_runs(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    trace = tmp_path / "client_device_capacity"
    trace.write_bytes(pickle.dumps({1: {"computation": 10.0, "communication": 1000.0}, 2: _RunsACommand(marker)}))
    with pytest.raises(ConfigError, match=r"^system.capacity_trace: .* is not a pickle of plain data .*refused "
                                          r"unread: names (posix|os).system$"):
        read_capacities(trace, 2)
    assert not marker.exists()


def test_fedscale_capacity_and_availability_pickles_are_read(tmp_path: Path) -> None:
    """FedScale's formats: capacity {id: {computation ms/sample, communication kbit/s}}, behaviour {id: {active,
    inactive, finish_time, ...}}; ids in order, the first N used."""
    capacity = tmp_path / "client_device_capacity"
    capacity.write_bytes(pickle.dumps({11: {"computation": 20.0, "communication": 5000.0},
                                       3: {"computation": 5.0, "communication": 800.0},
                                       7: {"computation": 50.0, "communication": 100.0}}))
    read = read_capacities(capacity, 2)
    assert [(c.rate, c.mbps) for c in read] == pytest.approx([(1000 / 15, 0.8), (1000 / 150, 0.1)])  # ids 3, 7
    behaviour = tmp_path / "client_behave_trace"
    behaviour.write_bytes(pickle.dumps({1: {"duration": 100, "active": [0, 50], "inactive": [10, 60],
                                            "finish_time": 100, "model": "x"}}))
    (availability,) = read_availability(behaviour, 1)
    assert [availability.available(t) for t in (0, 9.9, 10, 55, 60, 105, 149)] == \
        [True, True, False, True, False, True, False]


def test_a_json_trace_reads_like_the_pickle(tmp_path: Path) -> None:
    trace = tmp_path / "capacity.json"
    trace.write_text(json.dumps({"0": {"computation": 10.0, "communication": 2000.0}}))
    (read,) = read_capacities(trace, 1)
    assert (read.rate, read.mbps) == pytest.approx((1000 / 30, 2.0))


@pytest.mark.parametrize(("records", "count", "message"), [
    ({1: {"computation": 1.0, "communication": 1.0}}, 2, r"has 1 clients; the federation has 2 \(data.num_clients\)"),
    ({1: {"computation": 0.0, "communication": 1.0}}, 1, "has computation 0 and communication 1; both must be > 0"),
    ({1: {"computation": -2.0, "communication": 1.0}}, 1, "has computation -2 and communication 1; both must be > 0"),
])
def test_bad_capacity_traces_are_one_line(tmp_path: Path, records: dict, count: int, message: str) -> None:
    trace = tmp_path / "capacity.pkl"
    trace.write_bytes(pickle.dumps(records))
    with pytest.raises(ConfigError, match=f"^system.capacity_trace: .*{message}"):
        read_capacities(trace, count)


def test_a_window_that_ends_before_it_starts_is_one_line(tmp_path: Path) -> None:
    trace = tmp_path / "behave.pkl"
    trace.write_bytes(pickle.dumps({1: {"active": [0, 50], "inactive": [10, 40], "finish_time": 100}}))
    with pytest.raises(ConfigError, match="^system.availability_trace: client 0 of .* has a window that ends at 40 "
                                          "before it starts at 50$"):
        read_availability(trace, 1)


@pytest.mark.parametrize(("key", "value", "message"), [
    ("speed_scale", 0.0, r"^system.speed_scale must be > 0, got 0"),
    ("upload_mbps", -1.0, r"^system.upload_mbps must be > 0, got -1"),
    ("speed_zipf_a", 1.0, r"^system.speed_zipf_a must be > 1, got 1"),
])
def test_out_of_range_system_keys_are_one_line(key: str, value: float, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        SystemConfig(**{key: value})


def test_speeds_are_drawn_once_from_the_seed() -> None:
    config = SystemConfig(clock=True, speed="lognormal", speed_scale=100.0, speed_sigma=1.0)
    a, b, c = build_systems(config, 2000, 0), build_systems(config, 2000, 0), build_systems(config, 2000, 1)
    assert a == b and a != c
    rates = sorted(s.rate for s in a)
    assert 80 < rates[1000] < 125  # the median is speed_scale (2,000 draws: within ~3 standard errors)
    zipf = build_systems(SystemConfig(clock=True, speed="zipf", speed_scale=100.0, speed_zipf_a=2.0), 2000, 0)
    assert max(s.rate for s in zipf) == 100.0 and min(s.rate for s in zipf) < 5.0  # most fast, a heavy slow tail


# -- a run ----------------------------------------------------------------------------------------------------------


def test_a_run_charges_virtual_time_every_round_and_resumes_it(tmp_path: Path) -> None:
    def config(rounds: int) -> Path:
        cfg = tiny_config("ServerFedAvg", rounds=rounds, local_epochs=1, client_fraction=0.5)
        cfg["algorithm"]["init_args"].pop("sender_fraction")
        cfg["models"] = {"pool": ["cnn_4_8"]}
        cfg["system"] = {"clock": True, "speed": "lognormal", "speed_scale": 20.0}
        return write_config(tmp_path / f"cfg-{rounds}.yaml", cfg)

    runs = tmp_path / "runs"
    assert run_cli("fit", "--config", config(3), "--run_dir", runs, "--name", "whole").rc == 0
    assert run_cli("fit", "--config", config(2), "--run_dir", runs, "--name", "split").rc == 0
    assert run_cli("fit", "--resume", runs / "split", "--rounds", "3").rc == 0
    whole, split = (read_metrics(runs / name / "metrics.csv") for name in ("whole", "split"))
    assert [r["virtual_s"] for r in whole] == [r["virtual_s"] for r in split]
    assert all(r["round_virtual_s"] > 0 for r in whole)
    totals = [r["virtual_s"] for r in whole]
    assert totals == pytest.approx(list(itertools.accumulate(r["round_virtual_s"] for r in whole)), rel=1e-5)


# -- the server's policies: deadline, over-selection, availability ----------------------------------------------------


def server_round(systems: list[ClientSystem], config: SystemConfig, fraction: float = 1.0,
                 available_at: float = 0.0):  # noqa: ANN201 - (federation, ledger, result)
    """One ServerFedAvg round of six tiny clients under the clock (float64: the average checked to 1e-12)."""
    import torch
    from federations import tiny_federation

    from lit_fl.algorithms import ServerFedAvg
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fed = tiny_federation(num_clients=6, pool=("cnn_4_8",))
        fed.systems, fed.system_config, fed.virtual_s = systems, config, available_at
        algo = ServerFedAvg(client_fraction=fraction, local_epochs=1, batch_size=16)
        algo.setup(fed)
        runner, ledger = StepRunner("cpu"), CommunicationLedger.of(fed)
        runner.work_log = ledger.record_work
        ledger.start_round()
        result = algo.run_round(1, fed, runner, ledger)
    finally:
        torch.set_default_dtype(previous)
    return fed, ledger, result


def fast(n: int, slow: dict[int, float] | None = None) -> list[ClientSystem]:
    return [ClientSystem((slow or {}).get(k, 1000.0), 100.0, 100.0, 0.0) for k in range(n)]


def test_a_client_beyond_the_deadline_changes_nothing_on_the_server() -> None:
    """Client 3 computes a million times slower: past the deadline its update is dropped, and the server model is
    exactly the sample-weighted average of the others' trained models."""
    from lit_fl.steps import weighted_average

    systems = fast(6, {3: 0.001})
    fed, ledger, result = server_round(systems, SystemConfig(clock=True, deadline_s=1.0))
    finished = round_time(ledger.events, systems, SERVER).finished
    assert finished[3] > 1.0 and all(finished[k] <= 1.0 for k in range(6) if k != 3)
    assert result.senders == (0, 1, 2, 4, 5) and result.extra["late_updates"] == 1.0
    assert ledger.cutoff_s == 1.0 and round_time(ledger.events, systems, SERVER, ledger.cutoff_s).seconds == 1.0
    kept = [fed.clients[k] for k in result.senders]
    expected = weighted_average([c.model.state_dict() for c in kept], [c.num_train for c in kept])
    server = fed.server["global"].state_dict()
    for key, value in expected.items():
        assert float((server[key] - value).norm()) <= 1e-12 * max(float(value.norm()), 1.0), key


def test_over_selection_keeps_the_first_cohort_to_arrive() -> None:
    """Cohort 3 of 6, over-selection 1: all six selected, the three fastest kept; the round ends at the third."""
    systems = [ClientSystem(rate, 100.0, 100.0, 0.0) for rate in (0.05, 10.0, 0.2, 5.0, 0.02, 9.0)]
    fed, ledger, result = server_round(systems, SystemConfig(clock=True, over_selection=1.0), fraction=0.5)
    finished = round_time(ledger.events, systems, SERVER).finished
    order = sorted(range(6), key=lambda k: finished[k])
    assert set(result.senders) == set(order[:3]) and result.extra["late_updates"] == 3.0
    assert ledger.cutoff_s == finished[order[2]]


def test_an_offline_client_cannot_be_selected(tmp_path: Path) -> None:
    """Clients 0 and 4 are offline at the round's start (t = 5 s): every other client is selected, they are not."""
    from lit_fl.system.traces import Availability

    there, away = Availability(((0.0, 100.0),), 100.0), Availability(((10.0, 20.0),), 100.0)
    systems = [ClientSystem(1000.0, 100.0, 100.0, 0.0, away if k in (0, 4) else there) for k in range(6)]
    config = SystemConfig(clock=True, availability_trace=str(tmp_path / "unused"))
    _, _, result = server_round(systems, config, fraction=1.0, available_at=5.0)
    assert result.senders == (1, 2, 3, 5)


@pytest.mark.parametrize(("algorithm", "system", "message"), [
    ("ServerFedAvg", {"deadline_s": 1e-6}, r"system.deadline_s: 1e-06 s is shorter than any client's round \(the "
                                           r"fastest takes .* s to download, train and upload\); raise it"),
    ("DFML", {"deadline_s": 10.0}, r"system.deadline_s, system.over_selection: the round policies of a server that "
                                   r"waits for its updates; DFML has none \(docs/system.md\)"),
    ("FedBuff", {"deadline_s": 10.0}, r"system.deadline_s, system.over_selection: the round policies of a server "
                                      r"that waits for its updates; FedBuff has none \(docs/system.md\)"),
    ("ServerFedProx", {"partial_work": True}, "system.partial_work: cuts a client's work to the round's deadline; "
                                              "give system.deadline_s"),
    ("ServerFedAvg", {"deadline_s": 10.0, "partial_work": True},
     r"system.partial_work: ServerFedAvg defines no partial work; the methods that do: ServerFedProx \(give it mu 0 "
     r"for FedAvg with partial work\)"),
    ("ServerFedProx", {"deadline_s": 1e-6, "partial_work": True},
     r"system.deadline_s: 1e-06 s is shorter than any client's round \(the fastest takes .* s to download, train and "
     r"upload\); raise it"),
])
def test_clock_policies_a_run_cannot_take_are_one_line(tmp_path: Path, algorithm: str,
                                                                  system: dict[str, float], message: str) -> None:
    config = tiny_config(algorithm, rounds=1)
    if algorithm != "DFML":
        config["algorithm"]["init_args"].pop("sender_fraction")
        config["models"] = {"pool": ["cnn_4_8"]}
    config["system"] = {"clock": True, **system}
    result = run_cli("fit", "--config", write_config(tmp_path / "cfg.yaml", config), "--run_dir", tmp_path / "runs")
    assert result.rc == 2 and not (tmp_path / "runs").exists()
    (line,) = result.err.strip().splitlines()
    assert re.match(f"lit-fl: error: {message}$", line), line


def test_fused_and_unfused_rounds_drop_the_same_late_update_and_give_the_same_weights(float64_native: None) -> None:
    """The deadline acts on arrivals after the client phase: a fused phase (uneven clients, one very slow) drops the
    same update as an unfused one and leaves the same server model (float64: within 1e-9 relative)."""
    import torch

    from lit_fl.algorithms import ServerFedAvg
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner

    servers = []
    for fuse in ("on", "off"):
        from federations import tiny_federation

        fed = tiny_federation(num_clients=6, pool=("cnn_4_8",))
        fed.systems, fed.system_config = fast(6, {2: 0.001}), SystemConfig(clock=True, deadline_s=1.0)
        algo = ServerFedAvg(client_fraction=1.0, local_epochs=2, batch_size=16)
        algo.setup(fed)
        runner, ledger = StepRunner("cpu", fuse=fuse), CommunicationLedger.of(fed)
        runner.work_log = ledger.record_work
        ledger.start_round()
        result = algo.run_round(1, fed, runner, ledger)
        assert result.senders == (0, 1, 3, 4, 5)
        servers.append({k: v.clone() for k, v in fed.server["global"].state_dict().items()})
    for key, value in servers[1].items():
        assert float((servers[0][key] - value).norm()) <= 1e-9 * max(float(value.norm()), 1.0), key
    assert torch.get_default_dtype() == torch.float64
