"""``BatchedClientStep``: the client steps of G clients, each on its own batches, as one fused step.

A client step trains one or more models (its *slots*: local training has one, deep mutual learning two). G steps
of one kind with the same losses and SGD settings run as one step: in slot ``s`` the clients' models of each
architecture become one :class:`~lit_fl.steps.fusion.FusedModels` fed per-model inputs (a :class:`FusedSlot`), every
client's loss is computed from its own logits and its own samples, and one SGD (a parameter group per slot, with
that slot's settings) trains every stack. Clients of several architectures share one step: per batch each
architecture's models run once, and the loss and the optimizer run once for all. A client's loss depends on its
own weights and its own samples alone, so one backward pass gives every model exactly its own gradient, and SGD,
momentum and weight decay act per element: every model's update is the one its client's step makes alone, within
float32 rounding.

Batches are :class:`~lit_fl.data.batches.StackedBatches` ``(x, y, weight)``: step ``t`` is every client's ``t``-th
batch, padded, with ``weight`` the per-sample weights (``1/b_g`` on client g's ``b_g`` samples, 0 on padding).
Clients with fewer batches stop early: from the step after its last batch a client's loss is 0 (no gradient), its
stacked rows are copied back into its modules, and what momentum and weight decay later do to those rows is never
read. Only models whose training output for a sample depends on that sample alone can be batched this way
(padding must not change any statistic): no BatchNorm in training mode (:func:`per_sample`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.steps.fusion import FusedModels, native_cpu_convolutions
from lit_fl.steps.optim import SGDConfig


def per_sample(model: nn.Module) -> bool:
    """Whether each sample's training-mode output depends on that sample alone: no batch normalisation."""
    return not any(isinstance(m, nn.modules.batchnorm._BatchNorm) or "batchnorm" in type(m).__name__.lower()
                   for m in model.modules())


class FusedSlot(nn.Module):
    """Slot ``s`` of G clients: their models grouped by architecture (:func:`~lit_fl.steps.fusion.signature`, in
    first-appearance order), each group one :class:`~lit_fl.steps.fusion.FusedModels`. :meth:`forward` gives the
    logits of all G in client order; a group whose clients have all finished is not computed (its rows are
    zeros)."""

    def __init__(self, models: Sequence[nn.Module], num_batches: Sequence[int]) -> None:
        super().__init__()
        from lit_fl.steps.fusion import signature

        members: dict[tuple, list[int]] = {}
        for g, model in enumerate(models):
            members.setdefault(signature(model), []).append(g)
        self.members = list(members.values())
        self.groups = nn.ModuleList([FusedModels([models[g] for g in rows]) for rows in self.members])
        #: the last step (exclusive) at which a group has a client that trains
        self.until = [max(num_batches[g] for g in rows) for rows in self.members]
        order = [g for rows in self.members for g in rows]
        self.identity = order == list(range(len(order)))
        for i, rows in enumerate(self.members):
            self.register_buffer(f"rows_{i}", torch.tensor(rows), persistent=False)
        self.register_buffer("inverse", torch.argsort(torch.tensor(order)), persistent=False)
        self.__dict__["_width"] = None

    def rows(self, i: int) -> Tensor:
        return getattr(self, f"rows_{i}")

    def forward(self, x: Tensor, step: int) -> Tensor:
        """The G models' logits ``[G, B, C]``, each on its own inputs ``x[g]``, at ``step`` of the phase."""
        if len(self.groups) == 1:
            return self.groups[0](x, per_model=True)
        parts = []
        for i, group in enumerate(self.groups):
            if step < self.until[i]:
                parts.append(group(x.index_select(0, self.rows(i)), per_model=True))
                self.__dict__["_width"] = parts[-1].shape[-1]
            else:
                parts.append(None)
        width = self.__dict__["_width"]
        filled = [p if p is not None else x.new_zeros((len(rows), x.shape[1], width))
                  for p, rows in zip(parts, self.members)]
        logits = torch.cat(filled)
        return logits if self.identity else logits.index_select(0, self.inverse)

    def per_client(self, values: Sequence[Tensor]) -> Tensor:
        """``[G]`` in client order from one ``[k]`` tensor per group."""
        out = values[0] if len(values) == 1 else torch.cat(list(values))
        return out if self.identity else out.index_select(0, self.inverse)

    def write_back(self, rows: Sequence[int]) -> None:
        """Copy the trained weights of the clients ``rows`` into their modules."""
        chosen = set(rows)
        for members, group in zip(self.members, self.groups):
            local = [i for i, g in enumerate(members) if g in chosen]
            if local:
                group.write_back(local)


class BatchedClientStep(L.LightningModule):
    """G client steps of one kind as one step. Subclasses define :meth:`client_losses`.

    Args:
        slots: ``slots[s][g]`` is client g's model in slot s (every slot: G models of one architecture).
        trainable: per slot, whether it learns (a fixed teacher runs in eval mode without gradient).
        optimizers: per slot, its SGD settings.
        num_batches: ``num_batches[g]``: how many of the stacked batches client g trains on.
    """

    def __init__(
        self,
        slots: Sequence[Sequence[nn.Module]],
        trainable: Sequence[bool],
        optimizers: Sequence[SGDConfig],
        num_batches: Sequence[int],
    ) -> None:
        super().__init__()
        self.slots = nn.ModuleList([FusedSlot(models, num_batches) for models in slots])
        self.slot_trainable = [bool(t) for t in trainable]
        self.slot_optimizers = list(optimizers)
        self.num_batches_of = list(num_batches)
        steps = torch.arange(max(self.num_batches_of)).unsqueeze(1)
        #: ``[T, G]``: whether client g trains at step t
        self.register_buffer("active", steps < torch.tensor(self.num_batches_of), persistent=False)
        self.loss_sums = torch.zeros(len(self.num_batches_of))
        self._written: list[int] = []
        self._step = 0

    @property
    def size(self) -> int:
        """G, the number of clients."""
        return len(self.num_batches_of)

    @abstractmethod
    def client_losses(self, x: Tensor, y: Tensor, weight: Tensor) -> Tensor:
        """Every client's loss ``[G]`` on its own batch: ``x`` ``[G, B, ...]``, ``y`` ``[G, B]``, ``weight``
        ``[G, B]`` (a client's batch mean is ``(per_sample * weight).sum(1)``)."""

    def slot_logits(self, s: int, x: Tensor) -> Tensor:
        """Slot ``s``'s logits ``[G, B, C]``, each model on its own inputs; a fixed teacher in eval mode without
        gradient (its weights and running statistics stay bit-identical)."""
        slot = self.slots[s]
        if self.slot_trainable[s]:
            return slot(x, self._step)
        was_training = slot.training
        slot.eval()
        try:
            with torch.no_grad():
                return slot(x, self._step)
        finally:
            slot.train(was_training)

    def training_step(self, batch: tuple[Tensor, Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y, weight = batch
        self._step = batch_idx
        self._write_back_finished(batch_idx)
        losses = torch.where(self.active[batch_idx], self.client_losses(x, y, weight), 0.0)
        self.loss_sums = self.loss_sums.to(losses.device) + losses.detach()
        return losses.sum()

    def _write_back_finished(self, step: int) -> None:
        """Copy back the clients whose last batch was the previous step (their rows are final)."""
        done = [g for g, n in enumerate(self.num_batches_of) if n == step]
        if done:
            self._write_back(done)

    def _write_back(self, rows: list[int]) -> None:
        for slot, trainable in zip(self.slots, self.slot_trainable):
            if trainable:
                slot.write_back(rows)
        self._written += rows

    @contextmanager
    def fused(self) -> Iterator[None]:
        """The phase (the runner's automatic-optimisation loop runs it inside this block): PyTorch's own
        convolutions on a CPU (see :func:`~lit_fl.steps.fusion.native_cpu_convolutions`); on exit every client not
        copied back yet gets its trained weights."""
        try:
            with native_cpu_convolutions(self.active.device):
                yield
        finally:
            written = set(self._written)
            self._write_back([g for g in range(self.size) if g not in written])

    def mean_losses(self) -> list[float]:
        """Every client's mean batch loss (one read from the device)."""
        sums = self.loss_sums.tolist()
        return [s / max(n, 1) for s, n in zip(sums, self.num_batches_of)]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """One SGD, a parameter group per trainable slot with that slot's settings."""
        groups = [{"params": list(slot.parameters()), "lr": config.lr, "momentum": config.momentum,
                   "weight_decay": config.weight_decay}
                  for slot, trainable, config in zip(self.slots, self.slot_trainable, self.slot_optimizers)
                  if trainable]
        return torch.optim.SGD(groups, lr=groups[0]["lr"], foreach=True)
