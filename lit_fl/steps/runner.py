"""``StepRunner``: the one place that owns Lightning (Fabric), devices and precision.

Algorithms never touch a Trainer; they hand a step (a LightningModule) and its batches to
:meth:`StepRunner.fit`. The runner follows Lightning's automatic-optimisation contract: it calls the step's
``configure_optimizers`` once, then per batch ``training_step`` -> ``backward`` -> ``optimizer.step`` ->
``zero_grad``, so the same step also runs unchanged under ``lightning.Trainer`` (see the tests). Lightning
Fabric provides the accelerator, mixed precision (autocast, gradient scaling for ``16-mixed``) and device
placement with far less per-call overhead than building a Trainer for every client phase.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lit_fl.errors import ConfigError
from lit_fl.steps.precision import PRECISIONS, Precision

if TYPE_CHECKING:
    import lightning as L


class StepRunner:
    """Runs steps on one device with the configured precision.

    ``accelerator="auto"`` picks a GPU when one is present. Multi-device execution of a federation is not
    implemented yet: ``devices`` must be 1 (a clear error says so).
    """

    def __init__(self, accelerator: str = "auto", devices: int = 1, precision: Precision = "32-true") -> None:
        if precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision: {precision!r} is not allowed; allowed: {', '.join(PRECISIONS)}")
        if devices != 1:
            raise ConfigError("trainer.devices: only 1 is supported so far (one device runs the whole federation)")
        if precision == "16-mixed" and not _gpu_selected(accelerator):
            raise ConfigError("trainer.precision: 16-mixed needs a GPU; allowed on CPU: 32-true, bf16-mixed")
        from lightning.fabric import Fabric  # imported when a run starts: the command line stays fast

        self.fabric = Fabric(accelerator=accelerator, devices=devices, precision=precision)
        self.precision = precision

    @property
    def device(self) -> torch.device:
        return self.fabric.device

    def fit(self, step: L.LightningModule, batches: Iterable[tuple[Tensor, Tensor]]) -> L.LightningModule:
        """Train ``step`` for one pass over ``batches``; the step's models are updated in place."""
        optimizer = step.configure_optimizers()
        if not _on_device(step, self.device):
            step = step.to(self.device)
        step.train()
        optimizer = self.fabric.setup_optimizers(optimizer)
        autocast = self.fabric.autocast
        for batch_idx, batch in enumerate(batches):
            with autocast():
                loss = step.training_step(batch, batch_idx)
            self.fabric.backward(loss)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        return step

    def autocast(self):  # noqa: ANN201 - a context manager
        """The precision context for forward passes outside :meth:`fit` (evaluation)."""
        return self.fabric.autocast()


def _on_device(step: torch.nn.Module, device: torch.device) -> bool:
    """Whether ``step`` (its ``device`` property included) and all its tensors already are on ``device``, so that
    ``.to`` would be a no-op that costs more than this check (clients' models live on the device)."""
    if getattr(step, "device", device) != device:
        return False
    return all(t.device == device for t in [*step.parameters(), *step.buffers()])


def _gpu_selected(accelerator: str) -> bool:
    if accelerator in ("gpu", "cuda"):
        return True
    return accelerator == "auto" and torch.cuda.is_available()
