"""The predict phase: the eval-mode outputs of many clients' models, as one value per client.

A method builds one :class:`PredictWork` per client (``PredictWork(client, model, inputs)``: ``model``'s outputs on
``inputs``; None where the client has nothing to compute) and hands the list to :meth:`StepRunner.run_phase
<lit_fl.steps.runner.StepRunner.run_phase>`, as it hands training works. The phase (:func:`run_value_phase`)

1. places the works on the processes by cost (fused: whole architectures per rank, as a training phase);
2. on each process computes the works it owns: every model in eval mode (BatchNorm on its running statistics, no
   dropout), without gradients, in the runner's precision, ``chunk`` inputs at a time (a memory bound: the values
   are the model's, up to the rounding of a kernel chosen for another batch size); with ``trainer.fuse`` on, the
   works of one architecture (with one output function and inputs of one shape) run as one
   :class:`~lit_fl.steps.fusion.FusedModels` per chunk: on shared inputs (one tensor, e.g. the public data) every
   model sees the chunk, on inputs of their own each model sees its own;
3. broadcasts every value from the process that computed it;
4. returns one :class:`~lit_fl.steps.phase.WorkResult` per work whose ``value`` is the outputs, on the device and the
   same on every process (a tuple when the output function returns one).

The outputs are ``model(x)`` (the logits), or ``outputs(model, x)`` for another function of the model (UA-PDFL's
logits and features); the works fuse when they pass the same function object. Fused and one by one, the values agree
within float rounding (a grouped convolution sums in another order).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar, Protocol

import torch
from torch import Tensor, nn

from lit_fl.steps.placement import Value
from lit_fl.steps.work_result import WorkResult

if TYPE_CHECKING:
    from lit_fl.steps.runner import StepRunner

#: inputs per forward pass of a predict work (memory only: no effect on the values)
CHUNK = 256

OutputFn = Callable[[nn.Module, Tensor], Value]


class ValueWork(Protocol):
    """A work that computes a value of a client's model without training it (:class:`PredictWork`,
    :class:`~lit_fl.steps.gradient.GradientWork`): :func:`run_value_phase` places, fuses and broadcasts it."""

    client: int

    def fusion_kind(self) -> Hashable:
        """The works of one kind compute as one fused group (fused phases only)."""

    @classmethod
    def compute(cls, runner: StepRunner, works: Sequence[ValueWork], fused: bool) -> list[Value]:
        """The values of ``works`` (all of one kind when ``fused``: one fused computation; else one by one)."""


@dataclass(frozen=True)
class PredictWork:
    """Client ``client``'s outputs of ``model`` on ``inputs`` (``[N, ...]``) in eval mode, without gradients:
    ``model(x)``, or ``outputs(model, x)`` when given, concatenated over chunks of ``chunk`` inputs."""

    client: int
    model: nn.Module
    inputs: Tensor
    outputs: OutputFn | None = None
    chunk: int = CHUNK

    kind_name: ClassVar[str] = "predict"

    def fusion_kind(self) -> Hashable:
        """Works fuse when their models share an architecture, their output function is one, and their inputs have
        one shape (shared inputs: the same tensor)."""
        from lit_fl.steps.fusion import signature

        x = self.inputs
        return (self.kind_name, signature(self.model), self.outputs, tuple(x.shape), x.dtype, self.chunk)

    @classmethod
    def compute(cls, runner: StepRunner, works: Sequence[PredictWork], fused: bool) -> list[Value]:  # type: ignore[override]
        if not fused or len(works) == 1:  # one model: stacking it would only add kernels
            return [work.predict_alone(runner) for work in works]
        return predict_fused(runner, works)

    def predict_alone(self, runner: StepRunner) -> Value:
        """This work's outputs, chunk by chunk, the model alone."""
        fn = self.outputs or _forward
        x = self.inputs
        with eval_mode(self.model), torch.no_grad(), runner.autocast():
            parts = [fn(self.model, x[i : i + self.chunk].to(runner.device)) for i in range(0, len(x), self.chunk)]
        return concatenate(parts, dim=0)


def predict_fused(runner: StepRunner, works: Sequence[PredictWork]) -> list[Value]:
    """The outputs of works of one kind as one :class:`~lit_fl.steps.fusion.FusedModels`, chunk by chunk: on the
    shared inputs, or on every model's own (stacked ``[G, N, ...]``)."""
    from lit_fl.steps.fusion import FusedModels, native_cpu_convolutions

    first = works[0]
    shared = all(work.inputs is first.inputs for work in works)
    x = first.inputs if shared else torch.stack([work.inputs for work in works])
    length, chunk = len(first.inputs), first.chunk
    group = FusedModels([work.model for work in works]).eval()
    parts = []
    with torch.no_grad(), native_cpu_convolutions(runner.device), runner.autocast():
        for i in range(0, length, chunk):
            piece = (x[i : i + chunk] if shared else x[:, i : i + chunk]).to(runner.device)
            if first.outputs is None:
                parts.append(group(piece, per_model=not shared))
            else:
                parts.append(group.apply_in_eval(first.outputs, piece, per_model=not shared))
    stacked = concatenate(parts, dim=1)
    if isinstance(stacked, tuple):
        return [tuple(t[g] for t in stacked) for g in range(len(works))]
    return [stacked[g] for g in range(len(works))]


def run_value_phase(runner: StepRunner, works: Sequence[ValueWork | None]) -> list[WorkResult]:
    """Run a phase of value works (see the module docstring); one :class:`~lit_fl.steps.phase.WorkResult` per entry
    of ``works`` (``value`` None and ``loss`` NaN for None)."""
    todo = [n for n, work in enumerate(works) if work is not None]
    jobs: list[ValueWork] = [works[n] for n in todo]  # type: ignore[misc]
    placement = runner.placement
    kinds: list[Hashable] = [job.fusion_kind() for job in jobs] if runner.fuse else [("alone", k) for k in todo]
    clients = [job.client for job in jobs]
    owners = placement.assign_kinds(clients, kinds) if runner.fuse else placement.assign(clients)
    values: list[Value | None] = [None] * len(jobs)
    groups: dict[Hashable, list[int]] = {}
    for k, owner in enumerate(owners):
        if owner == placement.rank:
            groups.setdefault(kinds[k], []).append(k)
    for group in groups.values():
        members = [jobs[k] for k in group]
        for k, value in zip(group, type(members[0]).compute(runner, members, runner.fuse)):
            values[k] = value
    if placement.distributed:
        values = placement.share_tensors(values, owners, runner.device)  # type: ignore[assignment]
    results = [WorkResult()] * len(works)
    for n, value in zip(todo, values):
        results[n] = WorkResult(value=value)
    return results


def _forward(model: nn.Module, x: Tensor) -> Tensor:
    return model(x)


def concatenate(parts: Sequence[Value], dim: int) -> Value:
    """Chunks' values joined along ``dim`` (per position for tuples); a single chunk as it is."""
    if len(parts) == 1:
        return parts[0]
    if isinstance(parts[0], tuple):
        return tuple(torch.cat([p[i] for p in parts], dim=dim) for i in range(len(parts[0])))  # type: ignore[index]
    return torch.cat(list(parts), dim=dim)  # type: ignore[arg-type]


@contextmanager
def eval_mode(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block ``model`` is in eval mode; every module's own mode is restored on exit."""
    modes = [(m, m.training) for m in model.modules()]
    try:
        model.eval()
        yield model
    finally:
        for m, was_training in modes:
            m.training = was_training
