"""Saying, once per step class and run, that a step runs client by client although ``trainer.fuse`` is on.

The phase runner (:func:`lit_fl.steps.phase.run_phase`) fuses the works whose step defines the fusion contract: a
``fusion_key()`` that returns a key, and a classmethod ``batched(steps, num_batches)`` (docs/extending.md, "Fuse
your step"). Any other work runs alone, which computes the same numbers, only with the kernel launches of one client
at a time. :func:`say_unfused` tells the user so on the run's console (stderr, on the process that writes the run
directory), in one line per step class over the whole run, naming the step and what it lacks.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING
from weakref import WeakKeyDictionary

from torch import nn

if TYPE_CHECKING:
    from lit_fl.steps.phase import ClientWork
    from lit_fl.steps.runner import StepRunner


#: per runner (one per run): the step classes already named
_SAID: WeakKeyDictionary[StepRunner, set[type]] = WeakKeyDictionary()


def why_unfused(step: nn.Module) -> str | None:
    """What keeps ``step`` out of fusion, as a phrase; None when it fuses (the test :func:`lit_fl.steps.phase.
    fusion_key` makes)."""
    cls = type(step)
    has_key, has_batched = callable(getattr(step, "fusion_key", None)), hasattr(cls, "batched")
    if not has_key and not has_batched:
        return "it defines neither fusion_key() nor the classmethod batched(steps, num_batches)"
    if not has_key:
        return "it defines the classmethod batched(steps, num_batches) but no fusion_key()"
    if not has_batched:
        return "it defines fusion_key() but no classmethod batched(steps, num_batches)"
    if step.fusion_key() is not None:
        return None
    return "its fusion_key() returned None" + _model_reason(step)


def _model_reason(step: nn.Module) -> str:
    """Why a step's models may not fuse, when a module of the step shows it (the built-in steps' reasons)."""
    from lit_fl.steps.batched import per_sample
    from lit_fl.steps.fusion import fusible

    if not per_sample(step):
        return " (its model has BatchNorm in training mode, whose batch statistics padding would change)"
    if not fusible(step):
        return " (its model has a random layer whose draws fused training cannot make per model)"
    return ""


def say_unfused(runner: StepRunner, jobs: Sequence[ClientWork]) -> None:
    """With ``runner.fuse`` on, one stderr line for each step class among ``jobs`` that cannot fuse and was not named
    in this run yet (rank 0 only: the other processes run the same phases)."""
    if not runner.fuse:
        return
    said = _SAID.setdefault(runner, set())
    for job in jobs:
        cls = type(job.step)
        if cls in said:
            continue
        reason = why_unfused(job.step)
        if reason is None:
            continue
        said.add(cls)
        if runner.placement.rank == 0:
            print(f"lit-fl: trainer.fuse is on, but step {cls.__module__}.{cls.__qualname__} runs client by client: "
                  f"{reason} (docs/extending.md, \"Fuse your step\")", file=sys.stderr, flush=True)
