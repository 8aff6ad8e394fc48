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
   runs the others one by one; other processes' works are not computed here (their draws were made in 1); a peer
   work (``ClientWork(..., owners=...)``: one step that trains several clients' models, DFML's mutual learning) runs
   on every process, each computing its own clients' models (:func:`run_peer_work`);
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
from typing import TYPE_CHECKING, Any, Protocol

import lightning as L
from torch import Tensor

from lit_fl.data.batches import PlannedBatch, StackedBatches
from lit_fl.steps.step_loss import phase_loss
from lit_fl.steps.unfused import say_unfused
from lit_fl.steps.work_result import WorkResult

if TYPE_CHECKING:
    from lit_fl.steps.dp_sgd import DPSGD
    from lit_fl.steps.predict import ValueWork
    from lit_fl.steps.runner import StepRunner


class WorkBatches(Protocol):
    """A work's batches: :meth:`plan` draws one pass (every process, in the works' order), :meth:`cut` makes a planned
    batch (:class:`~lit_fl.data.batches.ClientBatches`, :class:`~lit_fl.steps.noise.NoiseBatches`)."""

    def plan(self) -> list[Any]: ...

    def cut(self, planned: Any) -> tuple[Tensor, ...]: ...


@dataclass(frozen=True)
class ClientWork:
    """What client ``client`` does in a phase: ``step`` (a LightningModule whose modules are the client's models it
    trains) for one pass over ``batches`` (the client's :class:`~lit_fl.data.batches.ClientBatches`, or any
    :class:`WorkBatches`: noise).

    ``owners``: a peer step (:class:`~lit_fl.steps.peer_learning.PeerLearningStep`, e.g. DFML's mutual learning at
    client ``client``) trains the models of several clients, ``owners[n]`` the client of its ``n``-th model: with
    several processes each rank then computes the models of its own clients (by cost, or fused whole architectures per
    rank) and the logits are exchanged per batch (:func:`run_peer_work`); None: the work runs on one rank."""

    client: int
    step: L.LightningModule
    batches: WorkBatches
    owners: tuple[int, ...] | None = None


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
    say_unfused(runner, jobs)  # once per step class and run, a line naming a step that cannot fuse
    plans = [job.batches.plan() for job in jobs]  # every process draws every order, in the works' order
    if runner.work_log is not None:  # the virtual clock charges every work where it is drawn, on every process
        for job, plan in zip(jobs, plans):
            runner.work_log(job.client, work_cost(job, plan))
    private = runner.sample_privacy
    noises = private.phase(jobs, plans) if private is not None else None  # DP-SGD: seeds drawn, steps counted
    placement = runner.placement
    owners = _assign(runner, jobs)
    mine = [k for k, owner in enumerate(owners) if owner == placement.rank]
    losses = [math.nan] * len(jobs)
    for group, batched in fusion_plan([jobs[k] for k in mine], [plans[k] for k in mine], runner.fuse):
        chosen = [mine[i] for i in group]
        dp = private.dp_sgd([noises[k] for k in chosen]) if private is not None and noises is not None else None
        for k, loss in zip(chosen, _run_group(runner, [jobs[k] for k in chosen], [plans[k] for k in chosen],
                                              batched, dp)):
            losses[k] = loss
    for k, owner in enumerate(owners):
        if owner == PEERS:  # every process takes part; the losses come out equal everywhere
            if private is not None and noises is not None and (dp := private.dp_sgd([noises[k]])) is not None:
                from lit_fl.steps.dp_sgd import attach

                attach(jobs[k].step, dp)
            losses[k] = run_peer_work(runner, jobs[k], plans[k])
    if placement.distributed:
        for job, owner in zip(jobs, owners):
            if owner != PEERS:
                placement.broadcast_module(job.step, src=owner)
        losses = placement.share_values(losses, [max(owner, 0) for owner in owners], runner.device)
    results = [WorkResult()] * len(works)
    for n, loss in zip(todo, losses):
        results[n] = WorkResult(loss)
    return results


#: the owner of a peer work (:attr:`ClientWork.owners`): every process runs its own models of it
PEERS = -1


def _assign(runner: StepRunner, jobs: Sequence[ClientWork]) -> list[int]:
    """The rank of every work (:data:`PEERS` for a peer work): by cost, or fused, whole kinds per rank."""
    placed = [k for k, job in enumerate(jobs) if job.owners is None]
    clients = [jobs[k].client for k in placed]
    placement = runner.placement
    ranks = placement.assign_kinds(clients, [work_kind(jobs[k]) for k in placed]) if runner.fuse else \
        placement.assign(clients)
    owners = [PEERS] * len(jobs)
    for k, rank in zip(placed, ranks):
        owners[k] = rank
    return owners


def run_peer_work(runner: StepRunner, job: ClientWork, plan: list[Any]) -> float:
    """A peer work (:attr:`ClientWork.owners`) on every process: each computes the models of the clients it is
    assigned (by cost, or fused, whole architectures per rank: :meth:`Placement.assign_kinds`) and joins every
    batch's exchange of logits (:meth:`~lit_fl.steps.peer_learning.PeerLearningStep.shard`: the one-process math, bit
    for bit); then every trained model is broadcast from its rank. Its mean loss, the same on every process."""
    from lit_fl.steps.fusion import signature

    step, placement = job.step, runner.placement
    batches = (job.batches.cut(p) for p in plan)
    if not placement.distributed:
        return phase_loss(step, runner._fit_here(step, batches))
    assert job.owners is not None
    kinds = [signature(m) for m in step.models]
    ranks = placement.assign_kinds(job.owners, kinds) if runner.fuse else placement.assign(job.owners)
    step.shard([r == placement.rank for r in ranks], placement.all_reduce_sum)
    returned = runner._fit_here(step, batches)
    step.gather_losses(placement.all_reduce_sum)
    for model, rank, trainable in zip(step.models, ranks, step.trainable):
        if trainable:
            placement.broadcast_module(model, src=rank)
    return phase_loss(step, returned)


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


def work_cost(job: ClientWork, plan: Sequence[Any]) -> float:
    """What a work costs the virtual clock: the samples of its batches times the millions of parameters of the
    models its step trains (a batch without sample indices, noise images, counts as its batch of the step's size)."""
    samples = sum(len(p.indices) if hasattr(p, "indices") else getattr(job.batches, "batch_size", 0) for p in plan)
    return sample_mparams(samples, trained_params(job.step))


def trained_params(step: L.LightningModule) -> int:
    """The parameters ``step`` trains (those of its models that require a gradient)."""
    return sum(p.numel() for m in _models_of(step) for p in m.parameters() if p.requires_grad)


def sample_mparams(samples: int, params: int) -> float:
    """``samples`` trained on a model of ``params`` parameters, in sample-Mparams (the clock's unit of work)."""
    return samples * params / 1e6


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
    runner: StepRunner, jobs: list[ClientWork], plans: list[list[PlannedBatch]], batched: bool, dp: DPSGD | None
) -> list[float]:
    """One work alone, or works as one batched step (under DP-SGD, ``dp`` of their clients); their mean losses."""
    from lit_fl.steps.dp_sgd import attach

    if not batched:
        job, plan = jobs[0], plans[0]
        if dp is not None:
            attach(job.step, dp)
        return [phase_loss(job.step, runner._fit_here(job.step, (job.batches.cut(p) for p in plan)))]
    stacked = StackedBatches([job.batches for job in jobs], plans)
    step = type(jobs[0].step).batched([job.step for job in jobs], stacked.num_batches)
    if dp is not None:
        attach(step, dp)
    runner._fit_here(step, stacked)
    return step.mean_losses()
