"""Data-free distillation on Gaussian noise (papers/fedorion.txt sec. 3.3, Eq. 3; Raikwar & Mishra 2022).

* :class:`NoiseDistillation` - FedORION's server step: one student (the aggregated global model) learns from
  several teachers (the received client models) on batches ``z ~ N(0, I)`` in the input shape::

      L_KD = sum_i n_i / sum_u n_u * CE(softmax(teacher_i(z)), student(z))

  (soft-target cross-entropy, teacher detached; ``n_i`` = the teacher's sample count).
* :class:`MutualNoiseDistillation` - every participant is a student of the others on noise, the teachers
  weighted like DFML Eq. 3 (used by DFML's data-free ``noise_batches`` extension, not part of the DFML paper).
* :class:`~lit_fl.steps.noise.NoiseBatches` - the iterable of ``(z, dummy)`` batches handed to
  ``StepRunner.run_server_step`` (or a client work's batches).

BatchNorm of the teachers (``bn_stats``):

* ``"current"`` (the paper): a teacher's BatchNorm layers normalise with the statistics of the CURRENT noise
  batch, so the shift between noise and the data the teacher was trained on is normalised away; their running
  statistics and ``num_batches_tracked`` stay untouched. Implemented by :func:`teacher_mode`: the teacher is
  put in eval mode and each BatchNorm layer in train mode with ``track_running_stats=False`` for the forward
  pass (PyTorch then normalises by batch statistics and neither reads nor writes the running buffers); the
  previous modes are restored afterwards. No buffer is copied or restored.
* ``"running"``: the teacher in plain eval mode (its running statistics, from its own data) - the ablation.

Every other layer of a teacher is in eval mode: dropout and drop-path are off, so the targets are a
deterministic function of ``z`` (dropout would only add noise to the soft labels). Teachers get no gradient
(their forward runs under ``torch.no_grad``) and are not in the optimizer.

The student trains in train mode (dropout on, BatchNorm on batch statistics). ``student_running_stats``
says what happens to ITS running statistics: ``"keep"`` (default) leaves them as they were - in FedORION
they come from averaging the clients' copies of the global model, i.e. from real data, and noise statistics
would be wrong for the real test data the model is evaluated on in eval mode; ``"update"`` lets them track
the noise batches (the only sensible choice for a freshly initialised student that never saw data, e.g.
the Figure 1 toy, where standardised 2-D data and ``N(0, I)`` have similar statistics).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.modules.batchnorm import _BatchNorm

from lit_fl.choices import BN_STATS, STUDENT_RUNNING_STATS, BNStats, StudentRunningStats
from lit_fl.data.tokens import is_token_batch
from lit_fl.losses import at_least_float32, peer_losses, teacher_weight_matrix
from lit_fl.steps.distillation import distilled_rows
from lit_fl.steps.noise import NoiseBatches
from lit_fl.steps.optim import SGDConfig
from lit_fl.steps.peer_learning import PeerLearningStep
from lit_fl.steps.step_loss import count_loss, reset_loss_counter

__all__ = [
    "BN_STATS",
    "STUDENT_RUNNING_STATS",
    "BNStats",
    "MutualNoiseDistillation",
    "NoiseBatches",
    "NoiseDistillation",
    "StudentRunningStats",
    "batched_soft_cross_entropy",
    "frozen_running_stats",
    "soft_cross_entropy",
    "teacher_mode",
]

@contextmanager
def teacher_mode(model: nn.Module, bn_stats: BNStats = "current") -> Iterator[nn.Module]:
    """Within the block: ``model`` in eval mode; with ``bn_stats="current"`` its BatchNorm layers normalise
    by the batch statistics without reading or updating the running buffers. Modes are restored on exit."""
    _check_bn_stats(bn_stats)
    modes = [(m, m.training) for m in model.modules()]
    tracking = [(m, m.track_running_stats) for m in model.modules() if isinstance(m, _BatchNorm)]
    try:
        model.eval()
        if bn_stats == "current":
            for m, _ in tracking:
                m.train()
                m.track_running_stats = False
        yield model
    finally:
        for m, was_tracking in tracking:
            m.track_running_stats = was_tracking
        for m, was_training in modes:
            m.training = was_training


@contextmanager
def frozen_running_stats(model: nn.Module) -> Iterator[nn.Module]:
    """Within the block a model in train mode normalises BatchNorm by batch statistics but leaves its running
    buffers (and ``num_batches_tracked``) untouched; other layers keep their modes (dropout stays on)."""
    tracking = [(m, m.track_running_stats) for m in model.modules() if isinstance(m, _BatchNorm)]
    try:
        for m, _ in tracking:
            m.track_running_stats = False
        yield model
    finally:
        for m, was_tracking in tracking:
            m.track_running_stats = was_tracking


def soft_cross_entropy(teacher_logits: Tensor, student_logits: Tensor, temperature: float = 1.0) -> Tensor:
    """``CE(softmax(teacher / T), student / T) = -sum_c p_c log q_c``, mean over the batch, scaled by ``T^2``.

    It differs from ``KL(p || q)`` by the teacher's entropy only (no gradient for the student), and is the
    ``L_XE(f(z; theta_i), f(z; theta_g))`` of FedORION Eq. 3. In float32 (float64 in a float64 run)."""
    t = temperature
    target = F.softmax(at_least_float32(teacher_logits.detach()) / t, dim=1)
    log_q = F.log_softmax(at_least_float32(student_logits) / t, dim=1)
    return -(target * log_q).sum(dim=1).mean() * (t * t)


def batched_soft_cross_entropy(teacher_logits: Tensor, student_logits: Tensor, weight: Tensor,
                               temperature: float = 1.0) -> Tensor:
    """:func:`soft_cross_entropy` of G students at once, each on its OWN batch: ``[G]`` from ``teacher_logits`` and
    ``student_logits`` ``[G, B, C]`` and the per-sample ``weight`` ``[G, B]`` of
    :class:`~lit_fl.data.batches.StackedBatches` (``1/b_g`` on student g's ``b_g`` samples, 0 on padding), so entry
    g is student g's batch mean. In float32 (float64 in a float64 run) whatever the autocast context."""
    t = temperature
    with torch.autocast(device_type=student_logits.device.type, enabled=False):
        target = F.softmax(at_least_float32(teacher_logits.detach()) / t, dim=2)
        log_q = F.log_softmax(at_least_float32(student_logits) / t, dim=2)
        return (-(target * log_q).sum(dim=2) * weight).sum(dim=1) * (t * t)


class NoiseDistillation(L.LightningModule):
    """FedORION Eq. 3: ``student`` learns from ``teachers`` on noise; see the module docstring.

    Args:
        student: the model trained (updated in place).
        teachers: fixed teachers (never updated: no gradient, running statistics untouched).
        weights: one non-negative weight per teacher (FedORION: the clients' sample counts ``n_i``);
            normalised to sum to 1.
        bn_stats: ``"current"`` (teachers' BatchNorm on the noise batch's statistics; the paper) or
            ``"running"`` (teachers in eval mode; ablation).
        student_running_stats: ``"keep"`` the student's BatchNorm running statistics or ``"update"`` them
            on the noise batches.
        temperature: softmax temperature of both sides (1 in the paper), loss scaled by ``T^2``.
        optimizer: SGD settings (FedORION server: lr 0.001, momentum 0.9).
    """

    def __init__(
        self,
        student: nn.Module,
        teachers: Sequence[nn.Module],
        weights: Sequence[float],
        bn_stats: BNStats = "current",
        student_running_stats: StudentRunningStats = "keep",
        temperature: float = 1.0,
        optimizer: SGDConfig | None = None,
    ) -> None:
        super().__init__()
        _check_bn_stats(bn_stats)
        if student_running_stats not in STUDENT_RUNNING_STATS:
            raise ValueError(
                f"student_running_stats must be one of {', '.join(STUDENT_RUNNING_STATS)}; "
                f"got {student_running_stats!r}"
            )
        if not teachers:
            raise ValueError("NoiseDistillation needs at least one teacher")
        if len(weights) != len(teachers):
            raise ValueError(f"NoiseDistillation: {len(teachers)} teachers but {len(weights)} weights")
        if any(w < 0 for w in weights) or sum(weights) <= 0:
            raise ValueError(f"NoiseDistillation: weights must be >= 0 with a positive sum, got {list(weights)}")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        self.student = student
        self.teachers = nn.ModuleList(teachers)
        total = float(sum(weights))
        self.weights = [float(w) / total for w in weights]
        matrix = torch.zeros(len(weights) + 1, len(weights) + 1)
        matrix[0, 1:] = torch.tensor(self.weights)  # the student (row 0) learns from every teacher
        self.register_buffer("weight_matrix", matrix, persistent=False)
        self.bn_stats: BNStats = bn_stats
        self.student_running_stats: StudentRunningStats = student_running_stats
        self.temperature = float(temperature)
        self.optimizer_config = optimizer or SGDConfig(lr=0.001, momentum=0.9, weight_decay=0.0)
        reset_loss_counter(self)
        #: inside :meth:`fused`: ``(teachers, FusedModels)`` of the teachers of one architecture
        self._teacher_groups: list[tuple[list[int], nn.Module]] = []

    @contextmanager
    def fused(self) -> Iterator[None]:
        """Within the block the teachers of one architecture without BatchNorm (whose teacher mode is plain eval
        mode) run as one fused module on the shared noise batch (:mod:`lit_fl.steps.fusion`); the others, and the
        student, run alone. Teachers are never written back: they do not change."""
        from lit_fl.steps.batched import per_sample
        from lit_fl.steps.fusion import FusedModels, fusion_groups, native_cpu_convolutions

        groups = fusion_groups(list(self.teachers), [per_sample(t) for t in self.teachers])
        if not groups:
            yield
            return
        self._teacher_groups = [(g, FusedModels([self.teachers[n] for n in g]).eval()) for g in groups]
        try:
            with native_cpu_convolutions(self.weight_matrix.device):
                yield
        finally:
            self._teacher_groups = []

    def teacher_logits(self, z: Tensor) -> list[Tensor]:
        """Every teacher's logits on ``z`` (no gradient, BatchNorm per ``bn_stats``)."""
        out: list[Tensor | None] = [None] * len(self.teachers)
        with torch.no_grad():
            for members, group in self._teacher_groups:
                stacked = group(z)
                for i, n in enumerate(members):
                    out[n] = stacked[i]
            for n, teacher in enumerate(self.teachers):
                if out[n] is None:
                    with teacher_mode(teacher, self.bn_stats):
                        out[n] = teacher(z)
        return out  # type: ignore[return-value]

    def student_logits(self, z: Tensor) -> Tensor:
        if self.student_running_stats == "keep":
            with frozen_running_stats(self.student):
                return self.student(z)
        return self.student(z)

    def kd_loss(self, student_logits: Tensor, teacher_logits: Sequence[Tensor]) -> Tensor:
        """``sum_i w_i CE(softmax(teacher_i), student)`` (Eq. 3): the student's row of :func:`peer_losses` over
        the stacked ``[student, teacher_1, ...]`` logits."""
        logits = torch.stack([student_logits.float(), *(t.float() for t in teacher_logits)])
        return peer_losses(logits, None, self.weight_matrix, temperature=self.temperature, teacher_entropy=False)[0]

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        z, _ = batch
        targets = self.teacher_logits(z)
        student = self.student_logits(z)
        if is_token_batch(z):  # real token sequences (FedKEMF's public data): the positions whose input is not PAD
            student, targets = distilled_rows(student, z), [distilled_rows(t, z) for t in targets]
        loss = self.kd_loss(student, targets)
        count_loss(self, loss)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.optimizer_config.build(self.student.parameters())


class MutualNoiseDistillation(PeerLearningStep):
    """Every trainable participant ``n`` learns from all the others on noise::

        L_n = sum_{q != n} w_{q|n} CE(softmax(z_q), z_n),   w_{q|n} = Phi_q / sum_{u != n} Phi_u

    (DFML Eq. 3's weights; uniform with ``weighted=False``). Per batch the logits of ALL participants are
    computed first, each ONCE, in teacher mode (eval mode, BatchNorm per ``bn_stats``, running statistics
    untouched, dropout off) - with gradient for the trainable ones, whose logits are detached where they
    serve as teachers. ``L_n`` depends on ``W_n`` alone, so one backward of ``sum_n L_n`` gives every
    participant its own gradient and one SGD over all trainable parameters equals one SGD per participant.
    Running statistics of every participant stay as they were (they come from real data).

    A :class:`~lit_fl.steps.peer_learning.PeerLearningStep`: as DFML's mutual learning, a peer work of the phase
    runner (each process computes its own participants, the logits are exchanged per batch), and under
    ``trainer.fuse`` the trainable participants of one architecture without BatchNorm (whose teacher mode is plain
    eval mode) run as one fused module. ``num_classes``: the width of the logits (needed by a process that computes
    none of the participants; default: inferred where a process computes one).
    """

    def __init__(
        self,
        models: Sequence[nn.Module],
        num_params: Sequence[int],
        trainable: Sequence[bool] | None = None,
        weighted: bool = True,
        bn_stats: BNStats = "current",
        temperature: float = 1.0,
        optimizer: SGDConfig | None = None,
        num_classes: int = 0,
    ) -> None:
        _check_bn_stats(bn_stats)
        if len(models) < 2:
            raise ValueError("MutualNoiseDistillation needs at least two models")
        if temperature <= 0:
            raise ValueError(f"temperature must be > 0, got {temperature}")
        flags = list(trainable) if trainable is not None else [True] * len(models)
        if len(flags) != len(models) or not any(flags):
            raise ValueError("trainable must give one flag per model, at least one True")
        super().__init__(models, torch.ones(num_classes), flags, "ce", optimizer)
        #: ``W[n, q]``, DFML Eq. 3's weight of teacher ``q`` for student ``n``
        self.register_buffer("weights", teacher_weight_matrix(num_params, weighted), persistent=False)
        self.bn_stats: BNStats = bn_stats
        self.temperature = float(temperature)

    def peer_losses(self, logits: Tensor, y: Tensor) -> Tensor:
        """Every participant's ``L_n`` given the stacked logits ``[N, B, C]`` on the noise batch (``y`` unused)."""
        return peer_losses(logits, None, self.weights, temperature=self.temperature, teacher_entropy=False)

    def _logits(self, n: int, x: Tensor) -> Tensor:
        """Participant ``n``'s logits in teacher mode, with gradient when it learns."""
        model = self.models[n]
        with teacher_mode(model, self.bn_stats), torch.set_grad_enabled(self.trainable[n]):
            return model(x)

    def batch_shape(self, x: Tensor, y: Tensor) -> tuple[int, ...]:
        """The noise batch's size (its labels are an empty tensor)."""
        return (x.shape[0],)

    def fusable(self, n: int) -> bool:
        """Only participants without BatchNorm fuse: their teacher mode is eval mode, whose arithmetic a fused module
        in train mode shares (a BatchNorm would normalise by, and track, the wrong statistics)."""
        from lit_fl.steps.batched import per_sample

        return per_sample(self.models[n])


def _check_bn_stats(bn_stats: str) -> None:
    if bn_stats not in BN_STATS:
        raise ValueError(f"bn_stats must be one of {', '.join(BN_STATS)}; got {bn_stats!r}")
