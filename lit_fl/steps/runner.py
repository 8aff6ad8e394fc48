"""``StepRunner``: the one place that owns Lightning (Fabric), devices and precision.

Algorithms never touch a Trainer; they hand the runner client work (:meth:`StepRunner.run_phase`: every client's
training, predictions or gradients, placed, fused and broadcast) or a server step and its batches
(:meth:`StepRunner.run_server_step`), its whole public surface. Every step runs through one loop that follows
Lightning's automatic-optimisation contract: it calls the step's ``configure_optimizers`` once, then per batch
``training_step`` -> ``backward`` -> ``optimizer.step`` -> ``zero_grad``, so the same step also runs unchanged
under ``lightning.Trainer`` (see the tests). Lightning
Fabric provides the accelerator, mixed precision (autocast, gradient scaling for ``16-mixed``) and device
placement with far less per-call overhead than building a Trainer for every client phase.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lit_fl.steps.placement import Placement
from lit_fl.steps.precision import Precision
from lit_fl.steps.step_loss import has_loss_counter, phase_loss  # phase_loss: importable from here as before

if TYPE_CHECKING:
    import lightning as L

    from lit_fl.steps.dp_sgd import PhasePrivacy
    from lit_fl.steps.phase import ClientWork, WorkResult
    from lit_fl.steps.predict import ValueWork


class StepRunner:
    """Runs steps with the configured precision, on one device or on one process per device.

    ``accelerator="auto"`` picks a GPU when one is present. With ``devices * num_nodes > 1`` (Fabric's ddp strategy:
    gloo on CPU, NCCL on GPU) Lightning Fabric launches one process per device, or joins the process group that
    torchrun or SLURM started; every process runs the same round loop and :attr:`placement` says which client
    each one computes (:mod:`lit_fl.steps.placement`). Client phases go through :meth:`run_phase`
    (:mod:`lit_fl.steps.phase`): placed on ranks, fused where they can, run dry elsewhere; a server's step through
    :meth:`run_server_step`.
    """

    def __init__(
        self,
        accelerator: str = "auto",
        devices: int = 1,
        precision: Precision = "32-true",
        num_nodes: int = 1,
        fuse: str = "off",
        tf32: bool | None = None,
        cudnn_benchmark: bool = False,
    ) -> None:
        from lit_fl.steps.trainer_config import TrainerConfig, apply_cuda_backends

        TrainerConfig(accelerator, devices, num_nodes, precision=precision, fuse=fuse)  # the keys' rules, written once
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
            _register_leave()
        self.precision = precision
        if self.device.type == "cuda":
            apply_cuda_backends(tf32, cudnn_benchmark)
        #: whether steps that can fuse same-architecture models do (``trainer.fuse``; auto = on a GPU)
        self.fuse = fuse == "on" or (fuse == "auto" and self.device.type == "cuda")
        self.placement = Placement((), self.fabric.global_rank, self.fabric.world_size)
        #: DP-SGD of every client training phase (``privacy.level sample``; set by the experiment), or None
        self.sample_privacy: PhasePrivacy | None = None
        #: where the phase runner reports the work it runs (client id, samples times millions of parameters) while a
        #: virtual clock runs (the round loop sets it: the ledger's ``record_work``), or None
        self.work_log: Callable[[int, float], None] | None = None

    @property
    def device(self) -> torch.device:
        return self.fabric.device

    @property
    def is_global_zero(self) -> bool:
        """Whether this process writes the run directory, W&B and the progress bar."""
        return self.fabric.global_rank == 0

    def place(self, costs: Sequence[float]) -> Placement:
        """Balance clients with these ``costs`` (a federation's :meth:`~lit_fl.federation.state.Federation.
        client_costs`) over the processes (a no-op placement in one process)."""
        self.placement = Placement(costs, self.fabric.global_rank, self.fabric.world_size)
        return self.placement

    def run_phase(self, works: Sequence[ClientWork | ValueWork | None]) -> list[WorkResult]:
        """Run one client phase: every client's :class:`~lit_fl.steps.phase.ClientWork` (None: the client has
        nothing to do), or every client's value work (:class:`~lit_fl.steps.predict.PredictWork`: its model's
        outputs). See :func:`lit_fl.steps.phase.run_phase`."""
        from lit_fl.steps.phase import run_phase

        return run_phase(self, works)

    def run_server_step(self, step: L.LightningModule, batches: Iterable[tuple[Tensor, ...]]) -> float:
        """Train a step nobody owns (a server's or a method's global model: FedDF's ensemble distillation,
        FedORION's noise distillation) for one pass over ``batches``, its models updated in place; returns the
        phase's mean loss per batch (:func:`phase_loss`; 0.0 without a batch). Several processes: it runs on every
        process and rank 0's models and loss are broadcast, so replicas cannot drift even where a GPU kernel is not
        deterministic. Client work goes through :meth:`run_phase`."""
        returned = self._fit_here(step, batches)
        if self.placement.distributed:
            self.placement.broadcast_module(step, src=0)
            if has_loss_counter(step):
                step.loss_sum = torch.tensor(self.placement.share_values([float(step.loss_sum)], [0], self.device)[0])
        return phase_loss(step, returned)

    def _fit_here(self, step: L.LightningModule, batches: Iterable[tuple[Tensor, ...]]) -> list[Tensor]:
        """Lightning's automatic optimisation of ``step`` over ``batches`` in this process (fused when the step
        has a fused phase and ``trainer.fuse`` is on); returns what ``training_step`` returned, per batch, for
        a step without its own loss counter (:func:`phase_loss`). The one loop every client and server step runs
        through (:func:`lit_fl.steps.phase.run_phase`, :meth:`run_server_step`)."""
        if not _on_device(step, self.device):
            step = step.to(self.device)
        step.train()
        returned: list[Tensor] = []
        with self._fusion(step):
            learns = getattr(step, "learns_here", True)
            optimizer = self.fabric.setup_optimizers(step.configure_optimizers()) if learns else None
            autocast = self.fabric.autocast
            keep = not has_loss_counter(step)
            for batch_idx, batch in enumerate(batches):
                with autocast():
                    loss = step.training_step(batch, batch_idx)
                if keep:
                    returned.append(loss.detach().float())
                if optimizer is not None:
                    self.fabric.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
        return returned

    def _fusion(self, step: L.LightningModule) -> AbstractContextManager:
        """The step's fused phase (:mod:`lit_fl.steps.fusion`) when fusion is on and the step has one."""
        fused = getattr(step, "fused", None)
        if not self.fuse or fused is None:
            return nullcontext()
        return fused()

    def any(self, flag: bool) -> bool:
        """Whether ``flag`` holds on any process (one process: ``flag``)."""
        return self.placement.any(flag, self.device)

    def autocast(self):  # noqa: ANN201 - a context manager
        """The precision context of forward passes outside training (evaluation, predict phases)."""
        return self.fabric.autocast()


def _on_device(step: torch.nn.Module, device: torch.device) -> bool:
    """Whether ``step`` (its ``device`` property included) and all its tensors already are on ``device``, so that
    ``.to`` would be a no-op that costs more than this check (clients' models live on the device)."""
    if getattr(step, "device", device) != device:
        return False
    return all(t.device == device for t in [*step.parameters(), *step.buffers()])


def leave_process_group() -> None:
    """At exit, destroy this process's torch.distributed group (if it still has one): a rank that finishes before
    the others (ranks other than 0 do not write the run directory) must not tear the interpreter down with gloo's
    threads still running, which can end the process in ``std::terminate`` (SIGABRT) and make the launcher report
    a failed run. Local: no collective, so a rank that exits on an error never waits for the others."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


_registered: list[bool] = []


def _register_leave() -> None:
    """:func:`leave_process_group` at exit, registered once per process whatever the number of runs in it."""
    if not _registered:
        atexit.register(leave_process_group)
        _registered.append(True)
