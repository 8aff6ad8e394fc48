"""The arithmetic of FDmeta's logit exchange (:mod:`lit_fl.algorithms.fdmeta` steps 2 and 5): the round's public
subset ``P_t`` and the weighted average of the logits the clients uploaded on it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from torch import Tensor


def public_sample(num_public: int, size: int | None, rng: np.random.Generator) -> np.ndarray:
    """Step 2: ``size`` distinct public indices drawn uniformly from ``rng`` (sorted); all ``num_public`` of them,
    without a draw, when ``size`` is None or not smaller."""
    if num_public <= 0:
        raise ValueError("public_sample needs at least one public sample")
    if size is None or size >= num_public:
        return np.arange(num_public)
    return np.sort(rng.choice(num_public, size=size, replace=False))


def aggregate_logits(logits: Sequence[Tensor], weights: Sequence[float]) -> Tensor:
    """Step 5: ``sum_k w_k z_k / sum_k w_k``, accumulated in float64, returned in the dtype of ``logits[0]``."""
    if not logits or len(logits) != len(weights):
        raise ValueError("aggregate_logits needs one weight per client's logits, at least one client")
    if any(w < 0 for w in weights) or sum(weights) <= 0:
        raise ValueError(f"aggregate_logits: weights must be >= 0 with a positive sum, got {list(weights)}")
    total = float(sum(weights))
    mean = sum(float(w) / total * z.double() for w, z in zip(weights, logits))
    return mean.to(logits[0].dtype)  # type: ignore[union-attr]
