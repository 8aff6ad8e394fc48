"""Partial work under a deadline (``system.partial_work``, :mod:`lit_fl.system.partial`): the batches a straggler
keeps by hand and as a property (the longest prefix that arrives in time), the data order unchanged, and fused equal
to unfused."""

from __future__ import annotations

import math

import torch
from hypothesis import given
from hypothesis import strategies as st

from lit_fl.federation.endpoints import SERVER
from lit_fl.system.clock import MEGABITS_PER_MB, Work, round_time
from lit_fl.system.config import SystemConfig
from lit_fl.system.profiles import ClientSystem

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


@given(rates=st.lists(st.floats(0.01, 100.0), min_size=1, max_size=4), deadline=st.floats(0.05, 5.0),
       samples=st.integers(1, 60), epochs=st.integers(1, 3), latency=st.floats(0.0, 0.05))
def test_a_cut_is_the_longest_prefix_that_arrives_by_the_deadline(rates: list[float], deadline: float, samples: int,
                                                                   epochs: int, latency: float) -> None:
    """For any rates, deadline and data: the kept batches arrive by the deadline on the clock (download, their work,
    upload) and one batch more would not; the pass drawn is the whole one."""
    from torch import nn

    from lit_fl.data.batches import ClientBatches
    from lit_fl.steps.phase import ClientWork, sample_mparams, trained_params
    from lit_fl.system.clock import Transfer
    from lit_fl.system.partial import within_deadline

    model = nn.Linear(20, 5)
    step = type("Step", (nn.Module,), {})()
    step.model = model
    systems = [ClientSystem(rate, 20.0, 50.0, latency) for rate in rates]
    client, mb = len(rates) - 1, 0.01
    events = [Transfer(SERVER, k, mb) for k in range(len(rates))]
    batches = ClientBatches(torch.zeros(samples, 20), torch.zeros(samples), torch.arange(samples), 8,
                            torch.Generator().manual_seed(0), epochs=epochs)
    work = within_deadline(ClientWork(client, step, batches), events, systems, SERVER, mb, deadline)
    plan = work.batches.plan()

    def arrival(batches: int) -> float:
        cost = sample_mparams(sum(len(p.indices) for p in full[:batches]), trained_params(step))
        timeline = [*events, Work(client, cost), Transfer(client, SERVER, mb)]
        return round_time(timeline, systems, SERVER).finished[client]

    full = ClientBatches(batches.x_all, batches.y_all, batches.indices, 8, torch.Generator().manual_seed(0),
                         epochs=epochs).plan()
    assert work.batches.drawn == len(full) == epochs * math.ceil(samples / 8)
    assert [p.indices.tolist() for p in plan] == [p.indices.tolist() for p in full[:len(plan)]]
    assert len(plan) == 0 or arrival(len(plan)) <= deadline
    assert len(plan) == len(full) or arrival(len(plan) + 1) > deadline
