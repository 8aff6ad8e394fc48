"""What a phase returns per work (:func:`lit_fl.steps.phase.run_phase`), below both the phase runner and the value
phases (:mod:`lit_fl.steps.predict`)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class WorkResult:
    """What a work reports: its mean batch loss (NaN where the client had no work or the work trains nothing), and
    the value a value work computed (:class:`~lit_fl.steps.predict.PredictWork`'s outputs; None otherwise)."""

    loss: float = math.nan
    value: Any = None
