"""``PeerLearningStep``: the shared shape of every step in which several models learn from each other's
logits on the same batch (DFML's multi-student mutual learning, deep mutual learning).

Every batch: the logits of ALL models first (teachers without gradient), stacked ``[N, B, C]``, then every
model's loss at once (:meth:`PeerLearningStep.peer_losses`, a tensor expression whose kernel count does not grow
with N) and the sum of the trainable models' losses. Each loss depends on its own model's weights alone (peers are
detached), so one backward pass gives every model exactly its own gradient, and one SGD over all trainable
parameters equals one SGD per model (SGD, momentum and weight decay are all per parameter).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import lightning as L
import torch
from torch import Tensor, nn

from lit_fl.choices import SupervisedLoss
from lit_fl.errors import ConfigError
from lit_fl.steps.dp_sgd import data_loss, dp_sgd_of
from lit_fl.steps.fusion import FusedModels, fusion_groups, native_cpu_convolutions
from lit_fl.steps.local_training import LOSSES
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.step_loss import count_loss, reset_loss_counter


class PeerLearningStep(L.LightningModule):
    """Subclasses define :meth:`peer_losses`; ``trainable[n] = False`` makes model ``n`` a fixed teacher;
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
        self.loss_name: SupervisedLoss = loss
        learners = [n for n, t in enumerate(self.trainable) if t]
        #: the trainable models' rows of :meth:`peer_losses` (None: all of them)
        self.register_buffer("learners", None if len(learners) == len(models) else torch.tensor(learners),
                             persistent=False)
        self.optimizer_config = optimizer or SGDConfig()
        if model_optimizers is not None and len(model_optimizers) != len(models):
            raise ValueError(f"model_optimizers must give one entry per model, got {len(model_optimizers)}")
        #: per model: its own SGD settings (e.g. FedORION's eta_g for the global copy), None = ``optimizer``
        self.model_optimizers = list(model_optimizers) if model_optimizers is not None else [None] * len(models)
        reset_loss_counter(self)
        #: several processes: which models this rank computes, and the sum over ranks (see :meth:`shard`)
        self.local: list[bool] | None = None
        self._all_reduce: Callable[[Tensor], Tensor] | None = None
        self._student_losses: list[Tensor] = []  # per batch, every trainable model's loss (0 where not local)
        self._mine: Tensor | None = None  # the trainable models this process computes (their loss rows)
        #: inside :meth:`fused`: the fused groups of trainable same-architecture models
        self.fused_groups: nn.ModuleList | None = None
        self._fused_order: Tensor | None = None  # participant order of the fused logits' rows (None: identity)
        self._fused_members: list[list[int]] = []  # the models of each fused group
        self._fused_index: list[Tensor] = []  # the same, as index tensors on the device
        self._fused_settings: list[SGDConfig] = []  # the SGD settings of each fused group
        self._unfused: list[int] = []

    @abstractmethod
    def peer_losses(self, logits: Tensor, y: Tensor) -> Tensor:
        """Every model's loss ``[N]`` given the stacked logits ``[N, B, C]`` of all models on the batch (peers
        detached inside)."""

    def model_loss(self, logits: Sequence[Tensor], y: Tensor, n: int) -> Tensor:
        """The loss of model ``n`` given every model's logits on the batch."""
        return self.peer_losses(torch.stack(list(logits)), y)[n]

    def learning_loss(self, losses: Tensor) -> Tensor:
        """The sum of the trainable models' losses (the quantity whose backward trains them all)."""
        return (losses if self.learners is None else losses.index_select(0, self.learners)).sum()

    def data_loss(self, x: Tensor, y: Tensor) -> Tensor:
        """The sum of the trainable models' losses on the batch: every term reads the batch's samples (DP-SGD clips
        each sample's gradient over all the trained models at once, :mod:`lit_fl.steps.dp_sgd`)."""
        return self.learning_loss(self.peer_losses(self.all_logits(x), y))

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        x, y = batch
        if self.local is not None:
            if dp_sgd_of(self) is not None:
                raise ConfigError("privacy.level: sample (DP-SGD) in a peer step over several processes (DFML's "
                                  "mutual learning at trainer.devices > 1) is not built; run it on one device")
            return self._sharded_step(x, y)
        total = data_loss(self, x, y, batch_idx)
        count_loss(self, total)
        return total

    # -- several processes --------------------------------------------------------------------------------

    def shard(self, local: Sequence[bool], all_reduce: Callable[[Tensor], Tensor]) -> None:
        """Compute only the models with ``local[n]``; the others' logits arrive through ``all_reduce`` (a sum
        over processes, each contributing its own models' logits and zeros elsewhere: exact)."""
        self.local, self._all_reduce, self._student_losses = list(local), all_reduce, []
        self._mine = None

    @property
    def learns_here(self) -> bool:
        """Whether this process trains any model of the step (it still joins every batch's exchange if not)."""
        return self.local is None or any(t and here for t, here in zip(self.trainable, self.local))

    def _sharded_step(self, x: Tensor, y: Tensor) -> Tensor:
        assert self.local is not None and self._all_reduce is not None
        own, rows = self._own_logits(x)
        reference = next(iter(own.values()), None)
        shared = x.new_zeros((len(self.models), *self.batch_shape(x, y), self.num_outputs(own)), dtype=torch.float32)
        for index, z in rows:
            shared.index_copy_(0, index, z.detach().float())
        self._all_reduce(shared)
        dtype = reference.dtype if reference is not None else torch.float32
        logits = torch.stack([own[n] if n in own else shared[n].to(dtype) for n in range(len(self.models))])
        losses = self.peer_losses(logits, y)
        kept = torch.zeros_like(losses, dtype=torch.float32)
        self.num_batches += 1
        if not self.learns_here:
            self._student_losses.append(kept)
            return losses.new_zeros(())
        if self._mine is None or self._mine.device != losses.device:  # once per phase
            mine = [n for n, (t, here) in enumerate(zip(self.trainable, self.local)) if t and here]
            self._mine = torch.tensor(mine, device=losses.device)
        self._student_losses.append(kept.index_copy(0, self._mine, losses.detach().float().index_select(0, self._mine)))
        return losses.index_select(0, self._mine).sum()

    def _own_logits(self, x: Tensor) -> tuple[dict[int, Tensor], list[tuple[Tensor, Tensor]]]:
        """The logits of the models this process computes, by model, and as ``(rows, logits)`` blocks for the
        exchange (inside :meth:`fused`: one block per fused group of this process's students)."""
        own: dict[int, Tensor] = {}
        rows: list[tuple[Tensor, Tensor]] = []
        for members, index, group in zip(self._fused_members, self._fused_index, self.fused_groups or []):
            z = group(x)
            rows.append((index, z))
            own.update({n: z[i] for i, n in enumerate(members)})
        grouped = {n for members in self._fused_members for n in members}
        for n in range(len(self.models)):
            if self.local is not None and self.local[n] and n not in grouped:
                own[n] = self._logits(n, x)
                rows.append((torch.tensor([n], device=x.device), own[n].unsqueeze(0)))
        return own, rows

    def batch_shape(self, x: Tensor, y: Tensor) -> tuple[int, ...]:
        """The shape of a batch's logits without the class axis: the labels' (``[B]``, or ``[B, T]`` for token
        sequences)."""
        return tuple(y.shape)

    def fusable(self, n: int) -> bool:
        """Whether model ``n`` may run in a fused module (:meth:`fused`; besides being a trainable, deterministic
        model of this process)."""
        return True

    def num_outputs(self, own: dict[int, Tensor]) -> int:
        """Classes of the logits (a local model's output width, else the length of the class proportions)."""
        if own:
            return next(iter(own.values())).shape[-1]
        return self.class_proportions.numel()

    def gather_losses(self, all_reduce: Callable[[Tensor], Tensor]) -> None:
        """After a sharded pass: every student's per-batch loss from its process, summed in the one-process
        order, so ``loss_sum`` is bit for bit what one process reports."""
        if self.local is None:
            return
        if self._student_losses:
            table = all_reduce(torch.stack(self._student_losses))
            loss_sum = torch.zeros((), dtype=torch.float32, device=table.device)
            for row in table:  # per batch, summed as one process sums its batch (learning_loss)
                loss_sum = loss_sum + self.learning_loss(row)
            self.loss_sum = loss_sum
        self.local, self._all_reduce, self._student_losses = None, None, []

    def all_logits(self, x: Tensor) -> Tensor:
        """Every model's logits on ``x``, stacked ``[N, B, C]``; inside :meth:`fused` each fused group runs as
        one module."""
        if self.fused_groups is None:
            return torch.stack([self._logits(n, x) for n in range(len(self.models))])
        parts = [group(x) for group in self.fused_groups]
        parts += [self._logits(n, x).unsqueeze(0) for n in self._unfused]
        logits = torch.cat(parts) if len(parts) > 1 else parts[0]
        return logits if self._fused_order is None else logits.index_select(0, self._fused_order)

    @contextmanager
    def fused(self) -> Iterator[None]:
        """Within the block the trainable models of one architecture run fused (:mod:`lit_fl.steps.fusion`) and
        :meth:`configure_optimizers` trains the stacked weights; on exit every model gets its weights back.
        Teachers and models that draw random numbers run unfused; models with their own SGD settings fuse only with
        models of the same settings. Sharded over processes (:meth:`shard`), each process fuses its own students.
        """
        settings = [own or self.optimizer_config for own in self.model_optimizers]
        candidates = [t and (self.local is None or self.local[n]) and self.fusable(n)
                      for n, t in enumerate(self.trainable)]
        groups = [g for key in dict.fromkeys(map(_settings_key, settings))
                  for g in fusion_groups(self.models, [c and _settings_key(o) == key
                                                       for c, o in zip(candidates, settings)])]
        if not groups:
            yield
            return
        fused = [n for g in groups for n in g]
        self._unfused = [n for n in range(len(self.models)) if n not in set(fused)]
        order = fused + self._unfused
        position = [order.index(n) for n in range(len(self.models))]
        device = self.class_proportions.device
        self._fused_order = None if order == list(range(len(order))) else torch.tensor(position, device=device)
        self.fused_groups = nn.ModuleList([FusedModels([self.models[n] for n in g]) for g in groups])
        self.fused_groups.train(self.training)
        self._fused_members = [list(g) for g in groups]
        self._fused_index = [torch.tensor(g, device=device) for g in groups]
        self._fused_settings = [settings[g[0]] for g in groups]
        try:
            with native_cpu_convolutions(device):
                yield
        finally:
            groups_done, self.fused_groups = self.fused_groups, None
            self._fused_order, self._unfused = None, []
            self._fused_members, self._fused_index = [], []
            for group in groups_done:
                group.write_back()

    def trainable_parameters(self) -> list[nn.Parameter]:
        """The parameters the optimizer trains: the fused stacks and every other trainable model's."""
        return [p for params, _ in self.parameter_groups() for p in params]

    def parameter_groups(self) -> list[tuple[list[nn.Parameter], SGDConfig]]:
        """The trainable parameters with their SGD settings: each fused group's stacks (inside :meth:`fused`) and
        every other trainable model's own parameters."""
        own = [own or self.optimizer_config for own in self.model_optimizers]
        if self.fused_groups is None:
            return [(list(m.parameters()), own[n]) for n, (m, t) in enumerate(zip(self.models, self.trainable)) if t]
        groups = [(list(group.parameters()), config) for group, config in zip(self.fused_groups, self._fused_settings)]
        return groups + [(list(self.models[n].parameters()), own[n]) for n in self._unfused if self.trainable[n]]

    def _logits(self, n: int, x: Tensor) -> Tensor:
        model = self.models[n]
        if self.trainable[n]:
            return model(x)
        return frozen_teacher_logits(model, x)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        """One SGD over the trainable models (fused stacks included), a parameter group per model with its own
        settings."""
        groups = self.parameter_groups()
        if all(_settings_key(config) == _settings_key(self.optimizer_config) for _, config in groups):
            return self.optimizer_config.build([p for params, _ in groups for p in params])
        return torch.optim.SGD([{"params": params, "lr": c.lr, "momentum": c.momentum, "weight_decay": c.weight_decay}
                                for params, c in groups], lr=self.optimizer_config.lr, foreach=True)


def _settings_key(config: SGDConfig) -> tuple[float, float, float]:
    return (config.lr, config.momentum, config.weight_decay)


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
