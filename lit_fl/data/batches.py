"""Batches of one client's samples, cut from the dataset tensors on the target device; and the batches of
several clients side by side (:class:`StackedBatches`, batched local training)."""

from __future__ import annotations

import copy
from bisect import bisect_right
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from lit_fl.data.transforms import batch_crop_flip, random_crop_flip

#: ``augment`` -> the batch transform it runs (``none``: the batch as it is)
AUGMENTATIONS = {"crop_flip": random_crop_flip, "crop_flip_per_batch": batch_crop_flip}


class ClientBatches:
    """Shuffled ``(x, y)`` mini-batches over ``indices`` of ``(x_all, y_all)`` for ``epochs`` epochs.

    The order comes from ``generator`` (a CPU generator: identical streams on every device, so a resumed
    run on another machine draws the same batches); ``augment`` (``crop_flip``, ``crop_flip_per_batch``) runs
    random crop (padding of value ``black``, the normalised black pixel) and flip on the batch tensor.
    Iterating twice draws two different orders: the generator advances.
    """

    def __init__(
        self,
        x_all: Tensor,
        y_all: Tensor,
        indices: Tensor,
        batch_size: int,
        generator: torch.Generator,
        epochs: int = 1,
        augment: str = "none",
        black: tuple[float, ...] = (0.0,),
    ) -> None:
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        self.x_all, self.y_all = x_all, y_all
        self.indices = indices.to(torch.long).cpu()
        if augment != "none" and augment not in AUGMENTATIONS:
            raise ValueError(f"augment must be none or one of {', '.join(AUGMENTATIONS)}, got {augment!r}")
        self.batch_size, self.epochs, self.augment, self.black = batch_size, epochs, augment, black
        self.generator = generator
        #: partial work (:meth:`within`): whether a prefix of a pass can be done in time; None: the whole pass
        self.budget: Callable[[list[PlannedBatch]], bool] | None = None
        #: the batches of the last :meth:`plan` drawn and kept (they differ under a budget)
        self.drawn = self.kept = 0

    def within(self, budget: Callable[[list[PlannedBatch]], bool]) -> ClientBatches:
        """These batches cut to the longest prefix of each pass that ``budget`` allows (partial work under a
        deadline, :mod:`lit_fl.system.partial`): the pass is drawn whole, so the data-order stream advances as it
        would without the budget; ``budget`` must allow every prefix of a prefix it allows."""
        cut = copy.copy(self)
        cut.budget = budget
        return cut

    def __len__(self) -> int:
        per_epoch = -(-len(self.indices) // self.batch_size)
        return per_epoch * self.epochs

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor]]:
        for planned in self.plan():
            yield self.cut(planned)

    def plan(self) -> list[PlannedBatch]:
        """Every batch of one iteration, as sample indices and augmentation seeds, drawn from ``generator``
        exactly as iterating draws them (iterating is cutting the plan's batches in order)."""
        plan = []
        for _ in range(self.epochs):
            order = self.indices[torch.randperm(len(self.indices), generator=self.generator)]
            for start in range(0, len(order), self.batch_size):
                seed = None
                if self.augment != "none":
                    seed = int(torch.randint(0, 2**62, (1,), generator=self.generator))
                plan.append(PlannedBatch(order[start : start + self.batch_size], seed))
        self.drawn = len(plan)
        if self.budget is not None:
            plan = plan[:longest_allowed(plan, self.budget)]
        self.kept = len(plan)
        return plan

    def cut(self, planned: PlannedBatch) -> tuple[Tensor, Tensor]:
        """The batch ``planned`` names: its samples on the data's device, augmented with its own seed."""
        idx = planned.indices.to(self.x_all.device)
        return self.augmented(self.x_all[idx], planned.seed), self.y_all[idx]

    def skip(self) -> None:
        """Advance ``generator`` exactly as one iteration would, without cutting a batch (a process that does not
        compute this client's phase keeps its streams in step with the one that does)."""
        self.plan()

    def augmented(self, x: Tensor, seed: int | None) -> Tensor:
        """``x`` with the random crop and flip drawn from ``seed`` (``x`` itself without augmentation)."""
        if seed is None:
            return x
        g = torch.Generator(device=x.device).manual_seed(seed)
        return AUGMENTATIONS[self.augment](x, padding=4, generator=g, fill=self.black)


def longest_allowed(plan: list[PlannedBatch], allows: Callable[[list[PlannedBatch]], bool]) -> int:
    """The largest ``m`` with ``allows(plan[:m])``, by bisection (``allows`` holds for every prefix of a prefix it
    allows)."""
    return bisect_right(range(1, len(plan) + 1), False, key=lambda m: not allows(plan[:m]))


@dataclass(frozen=True)
class PlannedBatch:
    """One batch of a :class:`ClientBatches` iteration: its sample indices (CPU) and augmentation seed."""

    indices: Tensor
    seed: int | None = None


class StackedBatches:
    """G clients' batches side by side, step by step: step ``t`` gives every client its own ``t``-th batch.

    The clients index the same tensors ``x_all`` and ``y_all`` (the federation's train split; FDmeta's public subset
    and its target logits, whose ``y`` rows are ``[C]``). Yields ``(x, y, weight)`` with ``x`` of shape
    ``[G, B, ...]``, ``y`` ``[G, B, ...]`` and ``weight`` ``[G, B]``, where
    ``weight[g, i] = 1 / b_g`` on the ``b_g`` samples of client g's batch and 0 on padding: a client whose batch
    is short (its last one) or who has no batch left at step ``t`` (fewer samples than the others) is padded with
    copies of one of its samples, so ``(per_sample_loss * weight).sum(1)`` is every client's batch mean and a
    padded position contributes nothing. ``plans`` are :meth:`ClientBatches.plan` of each client, drawn in the
    clients' order, so every client sees exactly the batches it sees when it trains alone.
    """

    def __init__(self, clients: Sequence[ClientBatches], plans: Sequence[list[PlannedBatch]]) -> None:
        self.clients, self.plans = list(clients), list(plans)
        self.x_all, self.y_all = self.clients[0].x_all, self.clients[0].y_all
        if any(c.x_all is not self.x_all or c.y_all is not self.y_all for c in self.clients):
            raise ValueError("StackedBatches: every client's batches must index the same x_all and y_all tensors")
        steps = max(len(plan) for plan in self.plans)
        # every step is as wide as the clients' batch size, whatever the group: a client's padded row, and so every
        # reduction over it, is the same in any group (a phase fused on two processes equals one fused process)
        width = max(max(len(p.indices) for plan in self.plans for p in plan), *(c.batch_size for c in self.clients))
        index, weight = [], []  # built as lists: one tensor each, not one write per batch
        for t in range(steps):
            for plan in self.plans:
                samples = plan[t].indices.tolist() if t < len(plan) else []
                pad = plan[0].indices[:1].tolist() * (width - len(samples))
                index.append(samples + pad)
                weight.append([1.0 / len(samples)] * len(samples) + [0.0] * len(pad) if samples else [0.0] * width)
        shape = (steps, len(self.plans), width)
        device = self.x_all.device
        self.index = torch.tensor(index, dtype=torch.long).view(shape).to(device)
        self.weight = torch.tensor(weight).view(shape).to(device)

    @property
    def num_batches(self) -> list[int]:
        """How many batches each client trains on."""
        return [len(plan) for plan in self.plans]

    def __len__(self) -> int:
        return len(self.index)

    def __iter__(self) -> Iterator[tuple[Tensor, Tensor, Tensor]]:
        for t in range(len(self.index)):
            idx = self.index[t]
            x = self.x_all[idx]
            for g, (client, plan) in enumerate(zip(self.clients, self.plans)):
                if t < len(plan) and plan[t].seed is not None:  # each client's own crops, drawn for its b samples
                    b = len(plan[t].indices)
                    x[g, :b] = client.augmented(x[g, :b], plan[t].seed)
            yield x, self.y_all[idx], self.weight[t]
