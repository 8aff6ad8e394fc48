"""``PeerLearningStep``: the shared shape of every step in which several models learn from each other's
logits on the same batch (DFML's multi-student mutual learning, deep mutual learning).

Every batch: the logits of ALL models first (teachers without gradient), then the sum of the trainable
models' own losses. Each loss depends on its own model's weights alone (peers are detached), so one
backward pass gives every model exactly its own gradient, and one SGD over all trainable parameters equals
one SGD per model (SGD, momentum and weight decay are all per parameter).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Sequence

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.steps.local_training import LOSSES
from lit_fl.steps.optim import SGDConfig


class PeerLearningStep(L.LightningModule):
    """Subclasses define :meth:`model_loss`; ``trainable[n] = False`` makes model ``n`` a fixed teacher;
    ``model_optimizers[n]`` gives model ``n`` SGD settings of its own (default: ``optimizer``)."""

    def __init__(
        self,
        models: Sequence[nn.Module],
        class_proportions: Tensor,
        trainable: Sequence[bool] | None = None,
        loss: SupervisedLoss = "wsm",
        optimizer: SGDConfig | None = None,
        model_optimizers: Sequence[SGDConfig | None] | None = None,
    ) -> None:
        super().__init__()
        if loss not in LOSSES:
            raise ValueError(f"loss must be one of {', '.join(LOSSES)}; got {loss!r}")
        self.models = nn.ModuleList(models)
        self.register_buffer("class_proportions", class_proportions.float(), persistent=False)
        self.trainable = [bool(t) for t in trainable] if trainable is not None else [True] * len(models)
        self.loss_fn = LOSSES[loss]
        self.optimizer_config = optimizer or SGDConfig()
        if model_optimizers is not None and len(model_optimizers) != len(models):
            raise ValueError(f"model_optimizers must give one entry per model, got {len(model_optimizers)}")
        #: per model: its own SGD settings (e.g. FedORION's eta_g for the global copy), None = ``optimizer``
        self.model_optimizers = list(model_optimizers) if model_optimizers is not None else [None] * len(models)
        self.loss_sum = torch.zeros(())
        self.num_batches = 0
        #: several processes: which models this rank computes, and the sum over ranks (see :meth:`shard`)
        self.local: list[bool] | None = None
        self._all_reduce: Callable[[Tensor], Tensor] | None = None
        self._student_losses: list[Tensor] = []  # per batch, every trainable model's loss (0 where not local)

    @abstractmethod
    def model_loss(self, logits: Sequence[Tensor], y: Tensor, n: int) -> Tensor:
        """The loss of model ``n`` given every model's logits on the batch (peers to be detached)."""

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        if self.local is not None:
            return self._sharded_step(x, y)
        logits = [self._logits(n, x) for n in range(len(self.models))]
        total = logits[0].new_zeros((), dtype=torch.float32)
        for n, trainable in enumerate(self.trainable):
            if trainable:
                total = total + self.model_loss(logits, y, n)
        self.loss_sum = self.loss_sum.to(total.device) + total.detach()
        self.num_batches += 1
        return total

    # -- several processes --------------------------------------------------------------------------------

    def shard(self, local: Sequence[bool], all_reduce: Callable[[Tensor], Tensor]) -> None:
        """Compute only the models with ``local[n]``; the others' logits arrive through ``all_reduce`` (a sum
        over processes, each contributing its own models' logits and zeros elsewhere: exact)."""
        self.local, self._all_reduce, self._student_losses = list(local), all_reduce, []

    @property
    def learns_here(self) -> bool:
        """Whether this process trains any model of the step (it still joins every batch's exchange if not)."""
        return self.local is None or any(t and here for t, here in zip(self.trainable, self.local))

    def _sharded_step(self, x: Tensor, y: Tensor) -> Tensor:
        assert self.local is not None and self._all_reduce is not None
        own = {n: self._logits(n, x) for n in range(len(self.models)) if self.local[n]}
        reference = next(iter(own.values()), None)
        shared = x.new_zeros((len(self.models), len(y), self.num_outputs(own)), dtype=torch.float32)
        for n, z in own.items():
            shared[n] = z.detach().float()
        self._all_reduce(shared)
        dtype = reference.dtype if reference is not None else torch.float32
        logits = [own[n] if n in own else shared[n].to(dtype) for n in range(len(self.models))]
        losses = shared.new_zeros(len(self.models))
        total = shared.new_zeros((), requires_grad=False)
        for n, trainable in enumerate(self.trainable):
            if trainable and self.local[n]:
                loss = self.model_loss(logits, y, n)
                losses[n] = loss.detach().float()
                total = total + loss
        self._student_losses.append(losses)
        self.num_batches += 1
        return total

    def num_outputs(self, own: dict[int, Tensor]) -> int:
        """Classes of the logits (a local model's output width, else the length of the class proportions)."""
        if own:
            return next(iter(own.values())).shape[1]
        return self.class_proportions.numel()

    def gather_losses(self, all_reduce: Callable[[Tensor], Tensor]) -> None:
        """After a sharded pass: every student's per-batch loss from its process, summed in the one-process
        order, so ``loss_sum`` is bit for bit what one process reports."""
        if self.local is None:
            return
        if self._student_losses:
            table = all_reduce(torch.stack(self._student_losses))
            loss_sum = torch.zeros((), dtype=torch.float32, device=table.device)
            for row in table:
                total = torch.zeros((), dtype=torch.float32, device=table.device)
                for n, trainable in enumerate(self.trainable):
                    if trainable:
                        total = total + row[n]
                loss_sum = loss_sum + total
            self.loss_sum = loss_sum
        self.local, self._all_reduce, self._student_losses = None, None, []

    def _logits(self, n: int, x: Tensor) -> Tensor:
        model = self.models[n]
        if self.trainable[n]:
            return model(x)
        return frozen_teacher_logits(model, x)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """One SGD over the trainable models, a parameter group per model with its own settings."""
        if all(o is None for o in self.model_optimizers):
            params = [p for m, t in zip(self.models, self.trainable) if t for p in m.parameters()]
            return self.optimizer_config.build(params)
        groups = []
        for model, trainable, own in zip(self.models, self.trainable, self.model_optimizers):
            if trainable:
                config = own or self.optimizer_config
                groups.append({"params": list(model.parameters()), "lr": config.lr, "momentum": config.momentum,
                               "weight_decay": config.weight_decay})
        return torch.optim.SGD(groups, lr=self.optimizer_config.lr)


def frozen_teacher_logits(model: nn.Module, x: Tensor) -> Tensor:
    """Logits of a teacher that does not learn: eval mode (BatchNorm uses and keeps its running statistics,
    dropout is off) under no_grad, so every parameter and buffer of the teacher stays bit-identical; the
    model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            return model(x)
    finally:
        model.train(was_training)
