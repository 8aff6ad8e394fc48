"""DFML's cyclic alpha schedule (sec. 3.2.1, A.2, Fig. 11) and the per-round participant selection."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lit_fl.federation.alpha import AlphaSchedule, CyclePosition
from lit_fl.federation.selection import num_senders, select_participants

# --------------------------------------------------------------------------------------------------- alpha


def test_cyclic_alpha_values():
    s = AlphaSchedule(alpha_max=0.9, period=10, period_increment=10)
    assert s(1) == pytest.approx(0.9 * 0.5 * (1 - math.cos(math.pi / 10)))
    assert s(1) == pytest.approx(0.022025, abs=1e-6)
    assert s(5) == pytest.approx(0.45)
    assert s(10) == 0.9  # cos(pi) = -1 exactly: alpha_max itself
    # cycle 2 has period 20 and starts again near 0
    assert s(11) == pytest.approx(0.9 * 0.5 * (1 - math.cos(math.pi / 20)))
    assert s(20) == pytest.approx(0.45)
    assert s(30) == pytest.approx(0.9)
    # cycle 3 has period 30
    assert s(31) == pytest.approx(0.9 * 0.5 * (1 - math.cos(math.pi / 30)))
    assert s(45) == pytest.approx(0.45)
    assert s(60) == pytest.approx(0.9)
    assert s(61) == pytest.approx(0.9 * 0.5 * (1 - math.cos(math.pi / 40)))


def test_alpha_rises_within_a_cycle_and_drops_at_the_next():
    s = AlphaSchedule(alpha_max=0.8, period=10, period_increment=10)
    values = [s(t) for t in range(1, 31)]
    assert all(0 < v <= 0.8 for v in values)
    assert all(a < b for a, b in zip(values[:9], values[1:10], strict=True))  # rounds 1..10 increasing
    assert all(a < b for a, b in zip(values[10:29], values[11:30], strict=True))  # rounds 11..30 increasing
    assert values[10] < values[9]
    assert max(values) == pytest.approx(0.8)


def test_position():
    s = AlphaSchedule(alpha_max=0.9, period=10, period_increment=10)
    assert s.position(1) == CyclePosition(cycle=0, tau=1, period=10)
    assert s.position(10) == CyclePosition(cycle=0, tau=10, period=10)
    assert s.position(11) == CyclePosition(cycle=1, tau=1, period=20)
    assert s.position(30) == CyclePosition(cycle=1, tau=20, period=20)
    assert s.position(31) == CyclePosition(cycle=2, tau=1, period=30)
    assert s.position(60) == CyclePosition(cycle=2, tau=30, period=30)
    assert s.position(61) == CyclePosition(cycle=3, tau=1, period=40)
    with pytest.raises(ValueError):
        s.position(0)


def test_zero_increment_repeats_the_same_cycle():
    s = AlphaSchedule(alpha_max=1.0, period=4, period_increment=0)
    assert [s.position(t).tau for t in range(1, 10)] == [1, 2, 3, 4, 1, 2, 3, 4, 1]
    assert s(4) == 1.0 and s(8) == 1.0
    assert s(2) == pytest.approx(0.5)


def test_fixed_schedule():
    s = AlphaSchedule(alpha_max=0.3, schedule="fixed")
    assert [s(t) for t in (1, 2, 10, 11, 100)] == [0.3] * 5
    assert all(s.in_top_k(t, 1) for t in range(1, 20))


def test_in_top_k():
    s = AlphaSchedule(alpha_max=0.9, period=10, period_increment=10)
    assert [t for t in range(1, 31) if s.in_top_k(t, 2)] == [9, 10, 29, 30]
    assert [t for t in range(1, 31) if s.in_top_k(t, 1)] == [10, 30]


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"alpha_max": 1.5}, "algorithm.alpha_max"),
        ({"alpha_max": -0.1}, "algorithm.alpha_max"),
        ({"period": 0}, "algorithm.period"),
        ({"period_increment": -1}, "algorithm.period_increment"),
        ({"schedule": "linear"}, "algorithm.alpha_schedule"),
    ],
)
def test_invalid_alpha_config(kwargs, field):
    with pytest.raises(ValueError, match=field.replace(".", r"\.")):
        AlphaSchedule(**kwargs)


# ----------------------------------------------------------------------------------------------- selection


def _rounds(num_rounds: int, n: int, f: float, seed: int, **kw):
    rng = np.random.default_rng(seed)
    previous, out = None, []
    for t in range(1, num_rounds + 1):
        p = select_participants(t, previous, n, f, rng, **kw)
        out.append(p)
        previous = p.aggregator
    return out


def test_round_one_aggregator_is_client_zero():
    for seed in range(5):
        assert _rounds(1, 10, 0.5, seed)[0].aggregator == 0


def test_aggregators_change_every_round_and_vary():
    rounds = _rounds(60, 10, 0.5, 0)
    aggs = [p.aggregator for p in rounds]
    assert all(a != b for a, b in zip(aggs[:-1], aggs[1:], strict=True))
    assert all(0 <= a < 10 for a in aggs)
    assert len(set(aggs)) >= 8  # drawn at random over the others, not a fixed rotation of two


@pytest.mark.parametrize(
    "n, f, expected", [(10, 0.5, 5), (10, 1.0, 9), (10, 0.2, 2), (50, 0.5, 25), (2, 0.5, 1)]
)
def test_senders(n, f, expected):
    assert num_senders(n, f) == expected
    for p in _rounds(20, n, f, 1):
        assert len(p.senders) == expected
        assert len(set(p.senders)) == expected
        assert p.aggregator not in p.senders
        assert all(0 <= s < n for s in p.senders)
        assert p.all == (p.aggregator, *p.senders)


def test_senders_are_random():
    rounds = _rounds(30, 10, 0.5, 2)
    assert len({p.senders for p in rounds}) > 5


def test_selection_is_reproducible():
    a = _rounds(25, 10, 0.5, 42)
    b = _rounds(25, 10, 0.5, 42)
    c = _rounds(25, 10, 0.5, 43)
    assert a == b
    assert a != c


def test_fixed_aggregator():
    rounds = _rounds(20, 10, 0.5, 0, fixed_aggregator=3)
    assert all(p.aggregator == 3 for p in rounds)
    assert all(3 not in p.senders and len(p.senders) == 5 for p in rounds)


# ------------------------------------------------------------------------------------- peak updates (A.4.6)


class _PeakRecorder:
    """A client as the peak rule sees it: ``alpha_peak`` and ``update_peak``, recording the rounds."""

    def __init__(self) -> None:
        self.alpha_peak = 0.0
        self.updated_at: list[int] = []
        self.round = 0

    def update_peak(self, alpha: float) -> None:
        self.alpha_peak = alpha
        self.updated_at.append(self.round)


# alpha_max 1, period 3, increment 3 -> cycles r1-3 (P=3), r4-9 (P=6), r10-18 (P=9). alpha by round:
#  r1 .25  r2 .75  r3 1 | r4 .067 r5 .25 r6 .5 r7 .75 r8 .933 r9 1 |
#  r10 .030 r11 .117 r12 .25 r13 .413 r14 .587 r15 .75 r16 .883 r17 .970 r18 1
# top-3 windows: r1-3, r7-9, r16-18; top-5 windows: r1-3, r5-9, r14-18.
PARTICIPATION = {"A": [1, 3, 7, 13, 15, 16], "B": [2, 5, 12, 14, 17]}
# Worked by hand. The old rule (alpha_n = alpha(t) on a top-k update) also updated A at r15 for k=3
# (alpha_n had dropped to .75 at r7) and B at r12 for k=5 (alpha_n had dropped to .25 at r5).
PEAK_ROUNDS = {
    1: {"A": [1, 3], "B": [2, 17]},
    3: {"A": [1, 3, 7, 16], "B": [2, 17]},
    5: {"A": [1, 3, 7, 15, 16], "B": [2, 5, 14, 17]},
}


@pytest.mark.parametrize("k", [1, 3, 5])
def test_peak_updates_round_by_round(k: int) -> None:
    from lit_fl.algorithms import DFML

    dfml = DFML(alpha_max=1.0, period=3, period_increment=3, peak_updates=k)
    clients = {name: _PeakRecorder() for name in PARTICIPATION}
    alpha_n_trace = {name: [] for name in PARTICIPATION}
    for round_ in range(1, 19):
        present = [c for name, c in clients.items() if round_ in PARTICIPATION[name]]
        for c in present:
            c.round = round_
        dfml.update_peaks(present, round_, dfml.alpha(round_))
        for name, c in clients.items():
            alpha_n_trace[name].append(c.alpha_peak)
    assert {name: c.updated_at for name, c in clients.items()} == PEAK_ROUNDS[k]
    for trace in alpha_n_trace.values():  # alpha_n never decreases
        assert all(a <= b for a, b in zip(trace, trace[1:]))
