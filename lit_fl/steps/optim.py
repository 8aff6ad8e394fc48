"""The optimizer every client phase starts fresh with (SPEC: "A fresh optimizer per phase")."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lit_fl.constraints import Momentum, NonNegativeFloat, PositiveFloat, check_arguments

if TYPE_CHECKING:
    import torch
    from torch import nn


@dataclass
class SGDConfig:
    """SGD of DFML A.2: momentum 0.9, weight decay 5e-4, lr from {0.1, 0.01, 0.001}."""

    lr: PositiveFloat = 0.01
    momentum: Momentum = 0.9
    weight_decay: NonNegativeFloat = 5e-4

    #: how errors name the three settings: ``{key}lr``, ``{key}momentum``, ``{key}weight_decay``
    key: str = "optimizer."

    def __post_init__(self) -> None:
        """The ranges of the fields' types (:mod:`lit_fl.constraints`), named ``{key}lr`` and so on."""
        check_arguments(SGDConfig, {"lr": self.lr, "momentum": self.momentum, "weight_decay": self.weight_decay},
                        self.key)

    def build(self, params: Iterable[nn.Parameter]) -> torch.optim.Optimizer:
        """One SGD over ``params``. Over several models it equals one SGD per model (all per-parameter).

        Always the multi-tensor (``foreach``) implementation, PyTorch's default on a GPU: a few kernels per step
        for all parameters instead of a few per parameter, the same arithmetic element by element (so a CPU run,
        where PyTorch would default to the per-parameter loop, gives the same numbers and counts the kernels a
        GPU launches)."""
        import torch  # a config names an optimizer without importing torch; a run builds it

        return torch.optim.SGD(list(params), lr=self.lr, momentum=self.momentum, weight_decay=self.weight_decay,
                               foreach=True)
