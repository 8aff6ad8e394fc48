"""Partial work under a deadline (``system.partial_work``, :mod:`lit_fl.system.partial`) and clients that leave
mid-round (their availability window ends): the batches a straggler keeps by hand, fused equal to unfused with both,
and a departed client's update changing nothing, on a server round and on an asynchronous one."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from lit_fl.federation.endpoints import SERVER
from lit_fl.system.clock import MEGABITS_PER_MB, Work, round_time
from lit_fl.system.config import SystemConfig
from lit_fl.system.profiles import ClientSystem
from lit_fl.system.traces import Availability

#: ServerFedProx's local work in these tests: batch 16, mu 0.5
BATCH = 16


def fedprox_round(systems: list[ClientSystem], config: SystemConfig, fuse: str = "off", local_epochs: int = 1,
                  available_at: float = 0.0):  # noqa: ANN201 - (federation, ledger, result, data-order state)
    """One ServerFedProx round of six tiny clients (every one selected) on the clock, in the default dtype."""
    from federations import tiny_federation

    from lit_fl.algorithms import ServerFedProx
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner

    fed = tiny_federation(num_clients=len(systems), pool=("cnn_4_8",))
    fed.systems, fed.system_config, fed.virtual_s = systems, config, available_at
    algo = ServerFedProx(mu=0.5, client_fraction=1.0, local_epochs=local_epochs, batch_size=BATCH)
    algo.setup(fed)
    runner, ledger = StepRunner("cpu", fuse=fuse), CommunicationLedger.of(fed)
    runner.work_log = ledger.record_work
    ledger.start_round()
    result = algo.run_round(1, fed, runner, ledger)
    return fed, ledger, result, fed.rng.data_order.get_state()


def trained_samples(ledger, fed) -> dict[int, int]:  # noqa: ANN001
    """Every client's samples trained this round, from the clock's work events."""
    params = sum(p.numel() for p in fed.clients[0].model.parameters())
    return {e.client: round(e.sample_mparams * 1e6 / params) for e in ledger.events if isinstance(e, Work)}


def test_a_straggler_trains_the_batches_it_can_upload_by_the_deadline() -> None:
    """Links of 100 Mbit/s, no latency; client k trains at its own rate. By hand, client k keeps the largest m
    batches with ``2 link + samples(m) P / 1e6 / rate_k <= deadline`` (``samples(m)``: 16 a batch, the last one short):
    the fast clients keep all, two stragglers are cut to what fits, one that fits no batch sends nothing; every kept
    update arrives by the deadline, and the data-order stream advances exactly as without the deadline."""
    from lit_fl.federation.ledger import model_megabytes

    rates = [1000.0, 1000.0, 0.05, 0.1, 0.02, 1000.0]
    systems = [ClientSystem(rate, 100.0, 100.0, 0.0) for rate in rates]
    deadline = 0.6
    fed, ledger, result, cut_stream = fedprox_round(systems, SystemConfig(clock=True, deadline_s=deadline,
                                                                          partial_work=True))
    params = sum(p.numel() for p in fed.clients[0].model.parameters())
    link = 2 * model_megabytes(fed.clients[0].model) * MEGABITS_PER_MB / 100.0
    expected = {}
    for k, client in enumerate(fed.clients):
        n = client.num_train
        fits = [m for m in range(math.ceil(n / BATCH) + 1) if link + min(BATCH * m, n) * params / 1e6 / rates[k]
                <= deadline]
        expected[k] = min(BATCH * max(fits), n)
    assert trained_samples(ledger, fed) == expected
    full = {k: c.num_train for k, c in enumerate(fed.clients)}
    cut = [k for k in range(6) if 0 < expected[k] < full[k]]
    assert cut == [2, 3] and expected[4] == 0  # the hand computation covers all three cases
    assert result.senders == (0, 1, 2, 3, 5)
    assert result.extra["partial_updates"] == 2.0 and result.extra["late_updates"] == 1.0
    finished = round_time(ledger.events, systems, SERVER).finished
    assert all(finished[k] <= deadline for k in result.senders) and ledger.cutoff_s == deadline
    _, _, _, whole_stream = fedprox_round(systems, SystemConfig(clock=True))
    assert torch.equal(cut_stream, whole_stream)


def test_fused_and_unfused_partial_work_give_the_same_weights(float64_native: None) -> None:
    """Clients cut at different prefixes of two epochs (and one dropped past the deadline) fuse as uneven clients
    do: the fused round equals the unfused one (float64: within 1e-9 relative; measured 1e-15)."""
    systems = [ClientSystem(rate, 100.0, 100.0, 0.0) for rate in (1000.0, 0.1, 0.08, 0.05, 1000.0, 0.001)]
    config = SystemConfig(clock=True, deadline_s=0.6, partial_work=True)
    rounds = [fedprox_round(systems, config, fuse, local_epochs=2) for fuse in ("on", "off")]
    (fed_on, ledger_on, on, _), (fed_off, ledger_off, off, _) = rounds
    assert on.senders == off.senders == (0, 1, 2, 3, 4)
    assert on.extra == off.extra and on.extra["partial_updates"] >= 3
    samples = trained_samples(ledger_on, fed_on)
    assert samples == trained_samples(ledger_off, fed_off) and len(set(samples.values())) >= 4
    for key, value in fed_off.server["global"].state_dict().items():
        other = fed_on.server["global"].state_dict()[key]
        assert float((other - value).norm()) <= 1e-9 * max(float(value.norm()), 1.0), key
    assert torch.get_default_dtype() == torch.float64


def test_a_client_that_leaves_mid_round_fails_and_changes_nothing(tmp_path: Path) -> None:
    """The round starts at t = 10 s; client 2's window ends at 10.2 s, before its update (0.5 s into the round)
    arrives: it fails like a lost upload, the server model is the average of the others, ``left_clients`` counts it
    and the round ends when the last other client arrived (not when client 2 would have)."""
    from lit_fl.steps import weighted_average

    always = Availability(((0.0, 100.0),), 100.0)
    leaving = Availability(((5.0, 10.2),), 100.0)
    systems = [ClientSystem(rate, 100.0, 100.0, 0.0, leaving if k == 2 else always)
               for k, rate in enumerate((1000.0, 1000.0, 0.1, 1000.0))]
    config = SystemConfig(clock=True, availability_trace=str(tmp_path / "unused"))
    fed, ledger, result, _ = fedprox_round(systems, config, available_at=10.0)
    finished = round_time(ledger.events, systems, SERVER).finished
    assert finished[2] > 0.2 and result.senders == (0, 1, 3) and result.extra["left_clients"] == 1.0
    assert ledger.cutoff_s == pytest.approx(max(finished[0], finished[1], finished[3], 0.2), abs=1e-12)
    kept = [fed.clients[k] for k in result.senders]
    expected = weighted_average([c.model.state_dict() for c in kept], [c.num_train for c in kept])
    server = fed.server["global"].state_dict()
    for key, value in expected.items():
        assert float((server[key] - value).norm()) <= 1e-6 * max(float(value.norm()), 1.0), key


def test_an_async_client_that_leaves_never_arrives_and_its_slot_is_refilled() -> None:
    """FedBuff with K = 2: the in-flight client whose window ends before its update arrives is marked as leaving
    at its departure; the step takes it with the first two real arrivals, applies those two only, and refills the
    freed slots with the idle clients still there (the two that arrived: client 0 is gone)."""
    from federations import tiny_federation

    from lit_fl.algorithms import FedBuff
    from lit_fl.federation.ledger import CommunicationLedger
    from lit_fl.steps import StepRunner

    always = Availability(((0.0, 1e9),), 1e9)
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
