"""``StepRunner``: the one place that owns Lightning (Fabric), devices and precision.

Algorithms never touch a Trainer; they hand a step (a LightningModule) and its batches to
:meth:`StepRunner.fit`. The runner follows Lightning's automatic-optimisation contract: it calls the step's
``configure_optimizers`` once, then per batch ``training_step`` -> ``backward`` -> ``optimizer.step`` ->
``zero_grad``, so the same step also runs unchanged under ``lightning.Trainer`` (see the tests). Lightning
Fabric provides the accelerator, mixed precision (autocast, gradient scaling for ``16-mixed``) and device
placement with far less per-call overhead than building a Trainer for every client phase.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lit_fl.errors import ConfigError
from lit_fl.federation.placement import Placement, client_costs
from lit_fl.steps.precision import PRECISIONS, Precision

if TYPE_CHECKING:
    import lightning as L

    from lit_fl.federation.state import Client, Federation


class StepRunner:
    """Runs steps with the configured precision, on one device or on one process per device.

    ``accelerator="auto"`` picks a GPU when one is present. With ``devices * num_nodes > 1`` (Fabric's ddp strategy:
    gloo on CPU, NCCL on GPU) Lightning Fabric launches one process per device, or joins the process group that
    torchrun or SLURM started; every process runs the same round loop and :attr:`placement` says which client
    each one computes (:mod:`lit_fl.federation.placement`).
    """

    def __init__(
        self,
        accelerator: str = "auto",
        devices: int = 1,
        precision: Precision = "32-true",
        num_nodes: int = 1,
        fuse: str = "off",
    ) -> None:
        if precision not in PRECISIONS:
            raise ConfigError(f"trainer.precision: {precision!r} is not allowed; allowed: {', '.join(PRECISIONS)}")
        if precision == "16-mixed" and not _gpu_selected(accelerator):
            raise ConfigError("trainer.precision: 16-mixed needs a GPU; allowed on CPU: 32-true, bf16-mixed")
        if devices < 1 or num_nodes < 1:
            raise ConfigError(f"trainer.devices and trainer.num_nodes must be >= 1, got {devices} and {num_nodes}")
        from lightning.fabric import Fabric  # imported when a run starts: the command line stays fast

        multi = devices * num_nodes > 1
        self.fabric = Fabric(
            accelerator=accelerator,
            devices=devices,
            num_nodes=num_nodes,
            strategy="ddp" if multi else "auto",  # trainer.strategy: ddp over one process is one process
            precision=precision,
        )
        if multi:
            self.fabric.launch()  # spawns the other local processes, or joins torchrun's / SLURM's group
        self.precision = precision
        if fuse not in ("auto", "on", "off"):
            raise ConfigError(f"trainer.fuse: {fuse!r} is not allowed; allowed: auto, on, off")
        #: whether steps that can fuse same-architecture models do (``trainer.fuse``; auto = on a GPU)
        self.fuse = fuse == "on" or (fuse == "auto" and self.device.type == "cuda")
        self.placement = Placement((), self.fabric.global_rank, self.fabric.world_size)
        self._phase: str | None = None  # inside each(): "local" (this rank's client) or "dry" (another's)
        self._returned: list[Tensor] = []  # the losses a step without loss_sum returned (see train)

    @property
    def device(self) -> torch.device:
        return self.fabric.device

    @property
    def fuses_clients(self) -> bool:
        """Whether client phases of one architecture run batched (``trainer.fuse`` on, one process: with several
        processes each client's phase runs on its own rank)."""
        return self.fuse and not self.placement.distributed

    @property
    def is_global_zero(self) -> bool:
        """Whether this process writes the run directory, W&B and the progress bar."""
        return self.fabric.global_rank == 0

    def place(self, federation: Federation) -> Placement:
        """Balance the federation's clients over the processes (a no-op placement in one process)."""
        self.placement = Placement(client_costs(federation), self.fabric.global_rank, self.fabric.world_size)
        return self.placement

    def fit(
        self,
        step: L.LightningModule,
        batches: Iterable[tuple[Tensor, Tensor]],
        owners: Sequence[int] | None = None,
    ) -> L.LightningModule:
        """Train ``step`` for one pass over ``batches``; the step's models are updated in place.

        Several processes: ``owners`` names the client of each of the step's models (a
        :class:`~lit_fl.steps.PeerLearningStep`); the clients are balanced over the ranks, every rank runs its
        share and the models are broadcast by the ranks that trained them. A step without ``owners`` outside
        :meth:`each` runs on every rank and takes rank 0's result.
        """
        if owners is not None and self._phase is not None:  # raised on every rank alike (no rank left waiting)
            raise RuntimeError("a step with owners cannot run inside StepRunner.each")
        if self._phase == "dry":
            _drain(batches)
            return step
        if self._phase == "local" or not self.placement.distributed:
            return self._fit(step, batches)
        if owners is None:
            self._fit(step, batches)
            self.placement.broadcast_module(step, src=0)
            step.loss_sum = torch.tensor(self.placement.share_values([float(step.loss_sum)], [0], self.device)[0])
            return step
        ranks = self.placement.assign(owners)
        step.shard([r == self.placement.rank for r in ranks], self.placement.all_reduce_sum)
        self._fit(step, batches)
        step.gather_losses(self.placement.all_reduce_sum)
        for model, rank, trainable in zip(step.models, ranks, step.trainable):
            if trainable:
                self.placement.broadcast_module(model, src=rank)
        return step

    def train(
        self,
        step: L.LightningModule,
        batches: Iterable[tuple[Tensor, Tensor]],
        owners: Sequence[int] | None = None,
    ) -> float:
        """:meth:`fit`, then the phase's mean loss per batch, read from the device once: the step's own ``loss_sum /
        num_batches`` when it keeps them (exact over processes), else the mean of what ``training_step`` returned
        (a step of your own needs no counter). 0.0 for a phase without a batch."""
        self._returned = []
        step = self.fit(step, batches) if owners is None else self.fit(step, batches, owners)
        if hasattr(step, "loss_sum") and hasattr(step, "num_batches"):
            return float(step.loss_sum) / max(step.num_batches, 1)
        returned, self._returned = self._returned, []
        return float(torch.stack(returned).sum()) / len(returned) if returned else 0.0

    def each(self, clients: Sequence[Client], phase: Callable[[Client], float]) -> list[float]:
        """``[phase(c) for c in clients]``, each phase on one rank (the clients balanced over ranks by cost).

        A phase may train and replace its own client's regular model and read (never change) other clients'.
        On the other ranks it runs *dry*: every draw from the shared streams happens (batch orders included) but
        no step computes; then the owners broadcast the clients' weights and the phases' values. One process:
        exactly the list comprehension."""
        if not self.placement.distributed:
            return [phase(c) for c in clients]
        owners = self.placement.assign([c.id for c in clients])
        values = []
        for client, owner in zip(clients, owners):
            self._phase = "local" if owner == self.placement.rank else "dry"
            try:
                values.append(phase(client))
            finally:
                self._phase = None
        for client, owner in zip(clients, owners):
            self.placement.broadcast_module(client.regular_model, src=owner)
        return self.placement.share_values(values, owners, self.device)

    def _fit(self, step: L.LightningModule, batches: Iterable[tuple[Tensor, Tensor]]) -> L.LightningModule:
        if not _on_device(step, self.device):
            step = step.to(self.device)
        step.train()
        with self._fusion(step):
            learns = getattr(step, "learns_here", True)
            optimizer = self.fabric.setup_optimizers(step.configure_optimizers()) if learns else None
            autocast = self.fabric.autocast
            keep = not hasattr(step, "loss_sum")  # a step without its own counter: :meth:`train` averages
            for batch_idx, batch in enumerate(batches):
                with autocast():
                    loss = step.training_step(batch, batch_idx)
                if keep:
                    self._returned.append(loss.detach().float())
                if optimizer is not None:
                    self.fabric.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
        return step

    def _fusion(self, step: L.LightningModule) -> AbstractContextManager:
        """The step's fused phase (:mod:`lit_fl.steps.fusion`) when fusion is on and the step runs whole here
        (a step sharded over processes runs unfused)."""
        fused = getattr(step, "fused", None)
        if not self.fuse or fused is None or getattr(step, "local", None) is not None:
            return nullcontext()
        return fused()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any process (one process: ``flag``)."""
        return self.placement.any(flag, self.device)

    def autocast(self):  # noqa: ANN201 - a context manager
        """The precision context for forward passes outside :meth:`fit` (evaluation)."""
        return self.fabric.autocast()


def _drain(batches: Iterable[tuple[Tensor, Tensor]]) -> None:
    """Advance the random streams ``batches`` draws from exactly as iterating it would, without the data."""
    skip = getattr(batches, "skip", None)
    if skip is not None:
        skip()
        return
    for _ in batches:
        pass


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
