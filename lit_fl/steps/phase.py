"""The client-work contract: a method says what each client does in a phase as a value, one function runs it.

A method builds one :class:`ClientWork` per client (``ClientWork(client, step, batches)``: run ``step``, a
LightningModule, for one pass over the client's ``batches``; None where the client has nothing to do) and hands
the list to :meth:`StepRunner.run_phase <lit_fl.steps.runner.StepRunner.run_phase>`. :func:`run_phase` then

1. draws every work's batch order in the works' order (on every process alike: the same draws as running them
   one by one, since a step never draws from the data-order stream);
2. places the works on the processes by cost (:meth:`Placement.assign <lit_fl.steps.placement.Placement.assign>`);
3. on each process, groups the works it owns that can fuse (``trainer.fuse``; steps of one kind whose
   ``fusion_key()`` agree: same losses and SGD settings, any architectures) into one batched step (the step
   class's ``batched(steps, num_batches)``), in which every model trains on its own batches in the order it draws
   alone (a lone fusable work runs batched too: a work's arithmetic never depends on the works beside it), and
   runs the others one by one; other processes' works are not computed here (their draws were made in 1);
4. broadcasts every work's step (its models) from the process that ran it, and every work's values;
5. returns one :class:`WorkResult` per work: the mean batch loss (NaN for None), the same on every process.

A phase of value works computes without training: :class:`~lit_fl.steps.predict.PredictWork` (the eval-mode outputs
of a client's model: the logits its method sends) and :class:`~lit_fl.steps.gradient.GradientWork` (the gradient of a
loss on one batch); they are placed, fused per architecture and broadcast alike, and each result's ``value`` holds
what the work computed (:mod:`lit_fl.steps.predict`).

A step takes part in fusion by defining ``fusion_key()`` (None: never fuses) and the classmethod ``batched``; the
built-in client steps (:class:`~lit_fl.steps.LocalTraining`, :class:`~lit_fl.steps.AuxProximalTraining`,
:class:`~lit_fl.steps.DeepMutualLearning`) do. A step of your own without them runs one client at a time, still
placed and broadcast.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import lightning as L

from lit_fl.data.batches import ClientBatches, PlannedBatch, StackedBatches
from lit_fl.steps.runner import phase_loss

if TYPE_CHECKING:
    from lit_fl.steps.predict import ValueWork
    from lit_fl.steps.runner import StepRunner


@dataclass(frozen=True)
class ClientWork:
    """What client ``client`` does in a phase: ``step`` (a LightningModule whose modules are the client's models it
    trains) for one pass over ``batches`` (the client's :class:`~lit_fl.data.batches.ClientBatches`)."""

    client: int
    step: L.LightningModule
    batches: ClientBatches


@dataclass(frozen=True)
class WorkResult:
    """What a work reports: its mean batch loss (NaN where the client had no work or the work trains nothing), and
    the value a value work computed (:class:`~lit_fl.steps.predict.PredictWork`'s outputs; None otherwise)."""

    loss: float = math.nan
    value: Any = None


def run_phase(runner: StepRunner, works: Sequence[ClientWork | ValueWork | None]) -> list[WorkResult]:
    """Run a client phase (see the module docstring); one :class:`WorkResult` per entry of ``works``. A phase of
    value works (:class:`~lit_fl.steps.predict.PredictWork`, :class:`~lit_fl.steps.gradient.GradientWork`) runs
    through :func:`~lit_fl.steps.predict.run_value_phase`."""
    kinds = {isinstance(work, ClientWork) for work in works if work is not None}
    if kinds == {False}:
        from lit_fl.steps.predict import run_value_phase

        return run_value_phase(runner, works)  # type: ignore[arg-type]
    if len(kinds) > 1:
        raise ValueError("run_phase: a phase holds training works (ClientWork) or value works, not both")
    todo = [n for n, work in enumerate(works) if work is not None]
    jobs: list[ClientWork] = [works[n] for n in todo]  # type: ignore[misc]
    plans = [job.batches.plan() for job in jobs]  # every process draws every order, in the works' order
    placement = runner.placement
    clients = [job.client for job in jobs]
    owners = placement.assign_kinds(clients, [work_kind(job) for job in jobs]) if runner.fuse else \
        placement.assign(clients)
    mine = [k for k, owner in enumerate(owners) if owner == placement.rank]
    losses = [math.nan] * len(jobs)
    for group, batched in fusion_plan([jobs[k] for k in mine], [plans[k] for k in mine], runner.fuse):
        chosen = [mine[i] for i in group]
        for k, loss in zip(chosen, _run_group(runner, [jobs[k] for k in chosen], [plans[k] for k in chosen],
                                              batched)):
            losses[k] = loss
    if placement.distributed:
        for job, owner in zip(jobs, owners):
            placement.broadcast_module(job.step, src=owner)
        losses = placement.share_values(losses, owners, runner.device)
    results = [WorkResult()] * len(works)
    for n, loss in zip(todo, losses):
        results[n] = WorkResult(loss)
    return results


def fusion_plan(
    jobs: Sequence[ClientWork], plans: Sequence[list[PlannedBatch]], fuse: bool
) -> list[tuple[list[int], bool]]:
    """The order in which a process runs its works, as ``(works, batched)``: with ``fuse``, the works with equal
    fusion keys as one batched step each (in first-appearance order; a lone fusable work too, so that its arithmetic
    is the same whichever works it shares a process with), then every other work alone, in the works' order."""
    groups: dict[Hashable, list[int]] = {}
    if fuse:
        for k, (job, plan) in enumerate(zip(jobs, plans)):
            key = fusion_key(job.step) if plan else None
            if key is not None:
                groups.setdefault(key, []).append(k)
    grouped = {k for g in groups.values() for k in g}
    return [(g, True) for g in groups.values()] + [([k], False) for k in range(len(jobs)) if k not in grouped]


def work_kind(job: ClientWork) -> Hashable:
    """What a work fuses with inside a batched step: its step's fusion key and its models' architectures (a work
    that cannot fuse is a kind of its own)."""
    from lit_fl.steps.fusion import signature

    key = fusion_key(job.step)
    if key is None:
        return ("alone", job.client, id(job.step))
    return (key, tuple(signature(m) for m in _models_of(job.step)))


def _models_of(step: L.LightningModule) -> list:
    """The models a step trains: its ``models`` (peer steps) or its ``model``."""
    models = getattr(step, "models", None)
    if models is not None:
        return list(models)
    model = getattr(step, "model", None)
    return [model] if model is not None else []


def fusion_key(step: L.LightningModule) -> Hashable | None:
    """The step's fusion key, or None when it cannot fuse (it defines no ``fusion_key``/``batched``)."""
    key = getattr(step, "fusion_key", None)
    if key is None or not hasattr(type(step), "batched"):
        return None
    return key()


def _run_group(
    runner: StepRunner, jobs: list[ClientWork], plans: list[list[PlannedBatch]], batched: bool
) -> list[float]:
    """One work alone, or works as one batched step; their mean losses."""
    if not batched:
        job, plan = jobs[0], plans[0]
        return [phase_loss(job.step, runner.fit_here(job.step, (job.batches.cut(p) for p in plan)))]
    stacked = StackedBatches([job.batches for job in jobs], plans)
    step = type(jobs[0].step).batched([job.step for job in jobs], stacked.num_batches)
    runner.fit_here(step, stacked)
    return step.mean_losses()
