"""The sample standard deviation over seeds, defined for every value ``metrics.csv`` may hold: a loss column may be
``inf`` (a run that diverged), and the spread of values one of which is infinite is undefined (NaN), where
:func:`statistics.stdev` raises instead."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence


def sample_std(values: Sequence[float]) -> float:
    """The sample std (ddof 1) of two or more ``values``; NaN when one of them is not finite."""
    if not all(math.isfinite(v) for v in values):
        return math.nan
    return statistics.stdev(values)
