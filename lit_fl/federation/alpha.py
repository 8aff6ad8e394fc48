"""The alpha of DFML Eq. 1 per round: the cyclic cosine schedule of sec. 3.2.1 / A.2 / Fig. 11, or fixed."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from lit_fl.constraints import NonNegativeInt, PositiveInt, UnitInterval, check_fields
from lit_fl.errors import ConfigError


@dataclass(frozen=True)
class CyclePosition:
    """Where round ``t`` sits: ``tau`` rounds into a cycle of ``period`` rounds (``1 <= tau <= period``)."""

    cycle: int
    tau: int
    period: int


@dataclass
class AlphaSchedule:
    """``alpha(t) = alpha_max * 0.5 * (1 - cos(pi * tau / P))`` for ``tau = 1..P`` rounds into a cycle.

    The first cycle has ``P = period`` rounds; every next cycle is ``period_increment`` rounds longer and
    starts again near 0 (SPEC). ``schedule="fixed"`` returns ``alpha_max`` every round (ablation, Fig. 9).
    Stateless: ``alpha(t)`` is a function of the round alone, so resumed runs cannot drift.
    """

    alpha_max: UnitInterval = 0.9
    period: PositiveInt = 10
    period_increment: NonNegativeInt = 10
    schedule: Literal["cyclic", "fixed"] = "cyclic"

    def __post_init__(self) -> None:
        if self.schedule not in ("cyclic", "fixed"):  # the field is DFML's key alpha_schedule: name that key
            raise ConfigError(f"algorithm.alpha_schedule: {self.schedule!r} is not allowed; allowed: cyclic, fixed")
        check_fields(self, "algorithm.")

    def position(self, round_: int) -> CyclePosition:
        """The cycle, ``tau`` and period of round ``round_`` (rounds count from 1)."""
        if round_ < 1:
            raise ConfigError(f"rounds count from 1, got {round_}")
        cycle, start, period = 0, 1, self.period
        while round_ >= start + period:
            start += period
            period += self.period_increment
            cycle += 1
        return CyclePosition(cycle=cycle, tau=round_ - start + 1, period=period)

    def __call__(self, round_: int) -> float:
        if self.schedule == "fixed":
            return self.alpha_max
        pos = self.position(round_)
        return self.alpha_max * 0.5 * (1.0 - math.cos(math.pi * pos.tau / pos.period))

    def in_top_k(self, round_: int, k: int) -> bool:
        """Whether round ``round_`` holds one of the ``k`` largest alphas of its cycle (its last ``k``)."""
        if self.schedule == "fixed":
            return True
        pos = self.position(round_)
        return pos.tau > pos.period - k
