"""Availability on the virtual clock (``system.availability_trace``): only the clients there are drawn, and a client
that leaves mid-round fails like a fault (the ledger fails a transfer that would end after one of its clients left),
for a server round and for DFML's aggregator round (sender and aggregator); an asynchronous client that leaves never
arrives; a run with a trace resumes exactly."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from federations import full_state, tiny_federation

from lit_fl.algorithms import DFML, ServerFedProx
from lit_fl.federation.endpoints import SERVER
from lit_fl.federation.faults import FaultsConfig
from lit_fl.federation.ledger import CommunicationLedger, Leaving
from lit_fl.federation.selection import select_participants
from lit_fl.federation.topology import mesh
from lit_fl.steps import StepRunner
from lit_fl.system.clock import Transfer, round_time
from lit_fl.system.config import SystemConfig
from lit_fl.system.profiles import ClientSystem
from lit_fl.system.traces import Availability

ALWAYS = Availability(((0.0, 1e9),), 1e9)


def until(seconds: float) -> Availability:
    """There from 0 until ``seconds``, then gone (for the rest of a long period)."""
    return Availability(((0.0, seconds),), 1e9)


def test_participants_are_drawn_among_the_clients_there() -> None:
    """Round 1: the lowest id there aggregates; senders only among those there; the previous aggregator keeps the
    role when none of its neighbours is there; nobody there: no round. With everyone there, the draws are those of
    no availability at all."""
    topology = mesh(10)
    first = select_participants(1, None, 10, 0.5, np.random.default_rng(0), topology=topology, available=[3, 5, 8])
    assert first is not None and first.aggregator == 3 and set(first.senders) == {5, 8}
    for round_ in range(2, 8):
        p = select_participants(round_, 3, 10, 0.5, np.random.default_rng(round_), topology=topology,
                                available=[3, 5, 8])
        assert p is not None and p.aggregator in (5, 8) and set(p.senders) <= {3, 5, 8} - {p.aggregator}
    alone = select_participants(2, 4, 10, 0.5, np.random.default_rng(0), topology=topology, available=[4])
    assert alone is not None and alone.aggregator == 4 and alone.senders == ()
    assert select_participants(2, 4, 10, 0.5, np.random.default_rng(0), topology=topology, available=[]) is None
    everyone, plain = np.random.default_rng(7), np.random.default_rng(7)
    previous = None
    for round_ in range(1, 6):
        a = select_participants(round_, previous, 10, 0.5, everyone, topology=topology, available=range(10))
        b = select_participants(round_, previous, 10, 0.5, plain, topology=topology)
        assert a == b
        previous = b.aggregator if b is not None else None


def test_a_server_client_that_leaves_before_its_upload_arrives_changes_nothing(float64_native: None) -> None:
    """The round starts at t = 10 s; client 2 leaves 0.2 s into it, while it trains (about 0.5 s): its upload fails
    like a lost one, the server model is the sample-weighted average of the others (float64: within 1e-12 relative),
    and its time stops at 0.2 s."""
    from lit_fl.steps import weighted_average

    systems = [ClientSystem(rate, 100.0, 100.0, 0.0, until(10.2) if k == 2 else ALWAYS)
               for k, rate in enumerate((1000.0, 1000.0, 0.1, 1000.0))]
    fed = tiny_federation(num_clients=4, pool=("cnn_4_8",))
    fed.systems, fed.virtual_s = systems, 10.0
    fed.system_config = SystemConfig(clock=True, availability_trace="unused")
    algo = ServerFedProx(mu=0.5, client_fraction=1.0, local_epochs=1, batch_size=16)
    algo.setup(fed)
    runner, ledger = StepRunner("cpu"), CommunicationLedger.of(fed)
    runner.work_log = ledger.record_work
    ledger.start_round(Leaving(systems, fed.virtual_s))
    result = algo.run_round(1, fed, runner, ledger)
    assert result.senders == (0, 1, 3) and ledger.departed == {2}
    assert not any(isinstance(e, Transfer) and e.source == 2 for e in ledger.events)  # nothing of it arrived
    finished = round_time(ledger.events, systems, SERVER).finished
    assert finished[2] == pytest.approx(0.2, abs=1e-12)
    kept = [fed.clients[k] for k in result.senders]
    expected = weighted_average([c.model.state_dict() for c in kept], [c.num_train for c in kept])
    for key, value in expected.items():
        server = fed.server["global"].state_dict()[key]
        assert float((server - value).norm()) <= 1e-12 * max(float(value.norm()), 1.0), key


def dfml_round(leaving: dict[int, float] | None = None, faults: FaultsConfig | None = None,
               rates: dict[int, float] | None = None):  # noqa: ANN201 - (federation, ledger, result)
    """One DFML round of five clients, every other client a sender of aggregator 0, on the clock; ``leaving``:
    client -> the second it leaves."""
    fed = tiny_federation(num_clients=5, pool=("cnn_4",))
    fed.systems = [ClientSystem((rates or {}).get(k, 1000.0), 100.0, 100.0, 0.0,
                                until(leaving[k]) if leaving and k in leaving else ALWAYS) for k in range(5)]
    fed.system_config = SystemConfig(clock=True, availability_trace="unused" if leaving is not None else None)
    fed.faults = faults or FaultsConfig()
    algo = DFML(mutual_epochs=1, sender_fraction=1.0, local_epochs=1)
    algo.setup(fed)
    runner, ledger = StepRunner("cpu"), CommunicationLedger.of(fed)
    runner.work_log = ledger.record_work
    ledger.start_round(Leaving(fed.systems, 0.0) if leaving is not None else None)
    result = algo.run_round(1, fed, runner, ledger)
    return fed, ledger, result


def test_a_dfml_sender_that_leaves_before_its_model_arrives_is_a_dropped_sender() -> None:
    """Client 3 leaves 1e-4 s into the round, while it trains: its model never reaches the aggregator, the mutual
    learning runs without it, and it keeps its own trained model and peak, as a sender dropped by a fault does."""
    fed, ledger, result = dfml_round({3: 1e-4})
    assert result.aggregator == 0 and result.senders == (1, 2, 3, 4)
    assert ledger.departed == {3}
    assert not any(isinstance(e, Transfer) and 3 in (e.source, e.target) for e in ledger.events)
    assert fed.clients[3].alpha_peak == 0.0 and all(fed.clients[k].alpha_peak > 0 for k in (0, 1, 2, 4))


def test_an_aggregator_that_leaves_during_its_mutual_learning_loses_its_returns_like_a_fault() -> None:
    """The aggregator (slow: its mutual learning takes seconds) leaves after the senders' models arrived and
    before its returns end: every client ends exactly as when every return is lost to a fault."""
    rates = {0: 0.5}
    _, clock, _ = dfml_round(leaving={}, rates=rates)  # when do the receives end and the returns begin?
    timeline = round_time(clock.events, [ClientSystem(rates.get(k, 1000.0), 100.0, 100.0, 0.0) for k in range(5)],
                          SERVER)
    returns = [e for e in clock.events if isinstance(e, Transfer) and e.source == 0]
    received = [i for i, e in enumerate(clock.events) if isinstance(e, Transfer) and e.target == 0]
    receive_end = round_time(clock.events[: received[-1] + 1], [ClientSystem(rates.get(k, 1000.0), 100.0, 100.0,
                                                                            0.0) for k in range(5)], SERVER).finished[0]
    assert len(returns) == 4 and receive_end < timeline.finished[1]
    leave = (receive_end + min(timeline.finished[k] for k in range(1, 5))) / 2
    departed, ledger, result = dfml_round(leaving={0: leave}, rates=rates)
    faulty, faults, _ = dfml_round(faults=FaultsConfig(return_drop_prob=1.0), rates=rates)
    assert ledger.departed == {0} and faults.round_faults.lost_returns == 4
    for a, b in zip(departed.clients, faulty.clients):
        assert all(np.array_equal(x.numpy(), y.numpy()) for x, y in
                   zip(full_state(a.model).values(), full_state(b.model).values()))
        assert a.alpha_peak == b.alpha_peak
    assert math.isclose(ledger.round_returned_mb, faults.round_returned_mb)  # the returns travelled, and were lost


def test_availability_on_a_method_that_draws_otherwise_is_one_line(tmp_path: Path) -> None:
    import json

    from conftest import run_cli, tiny_config, write_config

    config = tiny_config("DefKT", rounds=1)
    config["models"] = {"pool": ["cnn_4_8"]}
    trace = {str(k): {"active": [0], "inactive": [10], "finish_time": 10} for k in range(6)}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    config["system"] = {"clock": True, "availability_trace": str(tmp_path / "trace.json")}
    result = run_cli("fit", "--config", write_config(tmp_path / "c.yaml", config), "--run_dir", tmp_path / "runs")
    assert result.rc == 2 and not (tmp_path / "runs").exists()
    assert result.err.strip() == ("lit-fl: error: system.availability_trace: DefKT draws its participants without "
                                  "regard to who is there; the methods that select among the clients there: "
                                  "docs/system.md")


def test_a_dfml_run_with_an_availability_trace_logs_departures_and_resumes_exactly(tmp_path: Path) -> None:
    """A FedScale-style behaviour trace (clients there in windows that repeat): the run logs ``left_clients``, rounds
    with departures among them, and a stopped and resumed run equals an uninterrupted one."""
    import json

    from conftest import run_cli, tiny_config, write_config
    from test_resume import assert_runs_equal

    from lit_fl.tracking import read_metrics

    trace = {str(k): {"active": [0.0, 3.0 + k], "inactive": [2.0 + 0.5 * k, 9.0], "finish_time": 10.0}
             for k in range(4)}
    (tmp_path / "trace.json").write_text(json.dumps(trace))
    config = tiny_config("DFML", rounds=4)
    config["system"] = {"clock": True, "speed_scale": 0.05, "availability_trace": str(tmp_path / "trace.json")}
    runs = tmp_path / "runs"
    whole = write_config(tmp_path / "whole.yaml", config)
    assert run_cli("fit", "--config", whole, "--run_dir", runs, "--name", "whole").rc == 0
    config["rounds"] = 2
    assert run_cli("fit", "--config", write_config(tmp_path / "half.yaml", config), "--run_dir", runs,
                   "--name", "split").rc == 0
    assert run_cli("fit", "--resume", runs / "split", "--rounds", "4").rc == 0
    rows = read_metrics(runs / "whole" / "metrics.csv")
    assert "left_clients" in rows[0] and sum(r["left_clients"] for r in rows) > 0
    assert_runs_equal(runs / "split", runs / "whole")


def test_an_async_client_that_leaves_never_arrives_and_its_slot_is_refilled() -> None:
    """FedBuff with K = 2: the in-flight client whose window ends before its update arrives is marked as leaving
    at its departure; the step takes it with the first two real arrivals, applies those two only, and refills the
    freed slots with the idle clients still there (the two that arrived: client 0 is gone)."""
    from lit_fl.algorithms import FedBuff

    always = ALWAYS
    fed = tiny_federation(num_clients=6, pool=("cnn_4_8",))
    fed.systems = [ClientSystem(1000.0, 100.0, 100.0, 0.0, always) for _ in range(6)]
    fed.systems[0] = ClientSystem(1000.0, 100.0, 100.0, 0.0, Availability(((0.0, 1e-4),), 1e9))
    algo = FedBuff(buffer_size=2, concurrency=6, local_epochs=1, batch_size=16)
    algo.setup(fed)
    runner, ledger = StepRunner("cpu"), CommunicationLedger.of(fed)
    ledger.start_round()
    algo.dispatch(6, 0.0, fed, runner, ledger)
    gone = [u for u in algo.in_flight if u.left]
    assert [u.client for u in gone] == [0] and gone[0].arrives_s == 1e-4
    order = sorted((u for u in algo.in_flight if not u.left), key=lambda u: (u.arrives_s, u.client))
    result = algo.run_round(1, fed, runner, ledger)
    assert result.senders == tuple(u.client for u in order[:2])
    assert algo.version == 1 and 0 not in result.senders
    assert sorted(u.client for u in algo.in_flight) == list(range(1, 6))
