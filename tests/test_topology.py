"""Topologies: who can reach whom, and selection that never crosses a missing link."""

from __future__ import annotations

import numpy as np
import pytest
from federations import tiny_federation

from lit_fl.algorithms import DFML
from lit_fl.federation.ledger import CommunicationLedger
from lit_fl.federation.selection import select_participants
from lit_fl.federation.topology import TopologyConfig, build_topology, mesh, random_regular, ring, two_group
from lit_fl.steps import StepRunner


def test_mesh_links_everyone_but_self() -> None:
    topo = mesh(5)
    assert all(list(topo.neighbours(n)) == [m for m in range(5) if m != n] for n in range(5))


def test_two_group_is_two_meshes_and_one_bridge_between_medians() -> None:
    topo, bridge = two_group(10)
    odd_addresses, even_addresses = [0, 2, 4, 6, 8], [1, 3, 5, 7, 9]  # 1-based addresses 1,3,.. and 2,4,..
    assert bridge == (4, 5)  # the median address of each group: 5 and 6 (ids 4 and 5)
    for group in (odd_addresses, even_addresses):
        assert all(topo.connected(a, b) for a in group for b in group if a != b)
    crossing = [(a, b) for a in odd_addresses for b in even_addresses if topo.connected(a, b)]
    assert crossing == [bridge]


def test_two_group_rounds_only_cross_over_the_bridge() -> None:
    topo, (b0, b1) = two_group(12)
    rng = np.random.default_rng(0)
    previous, crossed = None, 0
    for round_ in range(1, 400):
        p = select_participants(round_, previous, 12, 0.5, rng, topology=topo)
        groups = {n % 2 for n in p.all}
        if len(groups) > 1:
            assert p.aggregator in (b0, b1) and set(p.senders) & {b0, b1}, p
            crossed += 1
        if previous is not None and previous % 2 != p.aggregator % 2:
            assert {previous, p.aggregator} == {b0, b1}
        previous = p.aggregator
    assert crossed > 0  # the bridge is used


def test_ring_and_regular_degrees() -> None:
    assert all(len(ring(7).neighbours(n)) == 2 for n in range(7))
    topo = random_regular(10, 3, np.random.default_rng(1))
    assert (topo.adjacency == topo.adjacency.T).all()
    assert all(len(topo.neighbours(n)) == 3 for n in range(10))
    again = random_regular(10, 3, np.random.default_rng(1))
    assert (again.adjacency == topo.adjacency).all()
    with pytest.raises(ValueError, match="topology.degree"):
        random_regular(5, 3, np.random.default_rng(0))
    with pytest.raises(ValueError, match="topology.name"):
        TopologyConfig(name="star")  # type: ignore[arg-type]


def test_senders_are_neighbours_and_capped_by_degree() -> None:
    topo = ring(10)
    rng = np.random.default_rng(0)
    previous = None
    for round_ in range(1, 50):
        p = select_participants(round_, previous, 10, 0.5, rng, topology=topo)
        assert len(p.senders) == 2  # round(0.5 * 10) = 5 wanted, 2 neighbours on a ring
        assert all(topo.connected(p.aggregator, s) for s in p.senders)
        if previous is not None:
            assert topo.connected(previous, p.aggregator)
        previous = p.aggregator


def test_dfml_runs_on_a_ring_and_moves_only_neighbours() -> None:
    fed = tiny_federation(num_clients=6, pool=("cnn_4",))
    fed.topology = build_topology(TopologyConfig(name="ring"), 6, seed=0)
    algo = DFML(mutual_epochs=1)
    algo.setup(fed)
    result = algo.run_round(1, fed, StepRunner(accelerator="cpu"), CommunicationLedger())
    assert result.aggregator == 0 and set(result.senders) == {1, 5}


def test_two_group_relay_reaches_25_senders_of_50_and_counts_every_hop() -> None:
    """DFML Tables 11-12: 50 clients, 25 senders on the two-group topology. Without relay a client off the
    bridge reaches only the 24 others of its group; with ``relay`` the senders come from both groups and each
    model is charged once per link it crosses (there and back)."""
    from lit_fl.federation.ledger import model_megabytes

    assert len(select_participants(1, None, 50, 0.5, np.random.default_rng(0), topology=two_group(50)[0]).senders) == 24
    fed = tiny_federation(num_clients=50, pool=("cnn_4",))
    fed.topology = build_topology(TopologyConfig(name="two_group", relay=True), 50, seed=0)
    dfml = DFML(mutual_epochs=1, local_epochs=0)
    dfml.setup(fed)
    ledger = CommunicationLedger()
    ledger.start_round()
    result = dfml.run_round(1, fed, StepRunner("cpu"), ledger)
    assert result.aggregator == 0 and len(result.senders) == 25
    # Aggregator 0 is in the group of ids 0, 2, ..., 48 (bridge id 24); the other group's bridge is id 25.
    hops = {s: 1 if s % 2 == 0 else 2 if s == 25 else 3 for s in result.senders}
    assert any(h == 3 for h in hops.values()) and any(h == 1 for h in hops.values())
    size = model_megabytes(fed.clients[0].model)  # one architecture: every model has this size
    assert ledger.round_sent_mb == pytest.approx(size * sum(hops.values()))
    assert ledger.round_returned_mb == pytest.approx(size * sum(hops.values()))


def test_relay_off_never_selects_beyond_the_neighbours() -> None:
    topo = build_topology(TopologyConfig(name="ring", relay=False), 10, seed=0)
    rng = np.random.default_rng(1)
    previous = None
    for round_ in range(1, 50):
        p = select_participants(round_, previous, 10, 0.5, rng, topology=topo)
        assert all(topo.connected(p.aggregator, s) for s in p.senders)
        previous = p.aggregator
    relayed = build_topology(TopologyConfig(name="ring", relay=True), 10, seed=0)
    assert relayed.hops(0, 5) == 5 and relayed.hops(0, 9) == 1
    assert len(select_participants(1, None, 10, 0.5, rng, topology=relayed).senders) == 5


def test_a_send_to_a_non_neighbour_is_refused_without_relay_and_charged_per_hop_with_it() -> None:
    """``topology.relay: false`` is enforced where models travel (the ledger), whatever the method: a gossip step
    of a user's own that sends across the ring is a bug, named in its error; with relay every hop is charged."""
    from torch import nn

    from lit_fl.federation.ledger import model_megabytes
    from lit_fl.federation.topology import RelayError

    model = nn.Linear(4, 4)
    topology = ring(6)
    ledger = CommunicationLedger(topology=topology)
    assert ledger.send(0, 1, model)  # neighbours: one link
    with pytest.raises(RelayError, match="client 0 sends to client 3, which is not its neighbour on the ring"):
        ledger.send(0, 3, model)
    with pytest.raises(RelayError):
        ledger.give_back(3, 0, model)
    assert ledger.send(0, -1, model)  # a server is one link away from every client
    topology.relay = True
    ledger.start_round()
    assert ledger.send(0, 3, model)
    assert ledger.round_sent_mb == pytest.approx(3 * model_megabytes(model))  # three links, each carries it
