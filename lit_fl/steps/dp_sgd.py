"""Sample-level differential privacy: DP-SGD (Abadi et al., CCS 2016, "Deep Learning with Differential Privacy",
Algorithm 1) in any client training phase, vectorised across fused clients.

A step of client ``k`` at its local step ``t``, over its batch ``B_t`` (expected size ``b``):

    g_i        = grad of the step's data loss on the batch of one {i}   (per sample: torch.func vmap over grad)
    g_i^clip   = g_i * min(1, C / (||g_i|| + 1e-6))                     (one l2 norm over all of the client's weights)
    g~         = (sum_i g_i^clip + N(0, (sigma C)^2 I)) / b
    loss       = data loss (its value) whose gradient is g~, plus the step's own data-free terms (FedProx's proximal
                 term), then the step's SGD (momentum, weight decay) as without privacy.

The gradient enters as a value: :func:`private_loss` returns the data loss's value plus ``S - S.detach()`` with
``S = sum_p <p, g~_p>``, so the runner's one loop (``training_step`` -> ``backward`` -> ``optimizer.step``) and the
step's own bookkeeping are unchanged, and mixed precision scales ``g~`` as it scales any gradient.

Fused (:class:`~lit_fl.steps.batched.BatchedClientStep`): every architecture's clients are one stack ``[k, ...]`` of
weights; the per-sample gradients are taken on the stack by ``vmap`` over the sample axis of ``[G, B, ...]``
batches, so ``g_i`` of client ``k`` lives in row ``k`` of the stack and its norm is taken over that row alone (never
across two clients' slices); padding samples (weight 0) are masked out before the sum. Each client draws its noise
from its own stream (:func:`client_noise`: the phase's noise in one draw from a generator seeded by the client's
phase seed), so a fused phase draws exactly the numbers each client draws alone, and a finished client's rows get
no gradient.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    import lightning as L

    from lit_fl.steps.batched import BatchedClientStep

#: added to a per-sample norm before dividing (Opacus's constant): a zero gradient is not divided by zero
NORM_EPSILON = 1e-6
#: the odd constant that spreads a phase seed over its local steps (the golden ratio's 64-bit fraction, mod 2^63)
_STEP_STRIDE = 0x1E3779B97F4A7C15
_SEED_RANGE = 2**63


@dataclass(frozen=True)
class ClientNoise:
    """DP-SGD of one client in one phase: its noise stream's seed, the steps it takes (its batches) and the
    denominator of its noised mean (its expected batch size)."""

    seed: int
    steps: int
    expected_batch: int


@dataclass(frozen=True)
class DPSGD:
    """What the phase runner attaches to a step (``step.dp_sgd``) under ``privacy.level sample``: the per-sample
    clip norm C, the noise multiplier sigma, and each of the step's clients' :class:`ClientNoise` (one for a client's
    own step; a fused step's in its client order)."""

    clip_norm: float
    noise_multiplier: float
    clients: tuple[ClientNoise, ...]


class PhasePrivacy(Protocol):
    """What the phase runner asks of DP-SGD (``runner.sample_privacy``; lit-fl's is
    :class:`lit_fl.privacy.sample_level.SamplePrivacy`, which also keeps every client's accountant)."""

    def phase(self, works: Sequence[Any], plans: Sequence[Sequence[object]]) -> list[ClientNoise | None]:
        """Every work's noise stream (None: a work on data-free batches), drawn in the works' order."""
        ...

    def dp_sgd(self, noises: Sequence[ClientNoise | None]) -> DPSGD | None:
        """The DP-SGD of a step that trains on these clients' data."""
        ...


def dp_sgd_of(step: nn.Module) -> DPSGD | None:
    """The step's DP-SGD, or None (not private)."""
    return getattr(step, "dp_sgd", None)


def client_noise(noise: ClientNoise, numel: int, like: Tensor) -> Tensor:
    """The client's noise of the whole phase, ``N(0, I)`` of shape ``[steps, numel]`` (row t: its local step t), in
    one draw from its own stream: the same numbers whether it trains alone or fused, on ``like``'s device and
    dtype."""
    generator = torch.Generator(device=like.device)
    generator.manual_seed(noise.seed)
    return torch.randn(noise.steps, numel, generator=generator, device=like.device, dtype=like.dtype)


def _noise_rows(step: nn.Module, group: int, clients: Sequence[ClientNoise], local_step: int, like: Tensor) -> Tensor:
    """Row ``local_step`` of every client's phase noise, ``[k, P]`` (zeros for a client past its last step, whose
    rows get no gradient); each client's phase noise is drawn at the group's first step and kept on the step."""
    drawn = step.__dict__.setdefault("_dp_noise", {})
    if group not in drawn:
        drawn[group] = [client_noise(c, like.shape[1], like) for c in clients]
    zero = like.new_zeros(like.shape[1]) if any(local_step >= c.steps for c in clients) else None
    return torch.stack([noise[local_step] if local_step < c.steps else zero
                        for noise, c in zip(drawn[group], clients)])


class _DataLoss(nn.Module):
    """A step's ``data_loss`` as a module's forward, so that ``functional_call`` can swap the step's weights."""

    def __init__(self, step: nn.Module) -> None:
        super().__init__()
        self.step = step

    def forward(self, *batch: Tensor) -> Tensor:
        return self.step.data_loss(*batch)


def _trainable(step: nn.Module) -> dict[str, nn.Parameter]:
    """The parameters the step's optimizer trains, by name (a peer step names them: ``trainable_parameters``)."""
    chosen = getattr(step, "trainable_parameters", None)
    ids = {id(p) for p in chosen()} if callable(chosen) else None
    return {f"step.{name}": p for name, p in step.named_parameters()
            if p.requires_grad and (ids is None or id(p) in ids)}


def data_loss(step: L.LightningModule, x: Tensor, y: Tensor, local_step: int) -> Tensor:
    """``step.data_loss(x, y)``: the step's loss on its client's data (a batch mean whose value on a batch of one is
    that sample's loss); under ``privacy.level sample`` (``step.dp_sgd``, set by the phase runner) its value is the
    mean of the per-sample losses and its gradient DP-SGD's (module docstring). A step's ``training_step`` computes
    its data term through this function and adds its data-free terms (a regulariser) itself."""
    dp = dp_sgd_of(step)
    if dp is None:
        return step.data_loss(x, y)
    from torch.func import functional_call, grad, vmap

    assert len(dp.clients) == 1
    params = _trainable(step)
    wrapper = _DataLoss(step)

    def one(weights: dict[str, Tensor], xi: Tensor, yi: Tensor) -> tuple[Tensor, Tensor]:
        loss = functional_call(wrapper, weights, (xi.unsqueeze(0), yi.unsqueeze(0)), strict=False)
        return loss, loss.detach()

    detached = {k: p.detach() for k, p in params.items()}
    grads, losses = vmap(grad(one, has_aux=True), in_dims=(None, 0, 0), randomness="different")(detached, x, y)
    per_sample = [g.unsqueeze(1) for g in grads.values()]  # [b, 1, *shape]: one client's stack of one
    private = _private_gradient(per_sample, torch.ones_like(losses).unsqueeze(1), dp, dp.clients,
                                lambda like: _noise_rows(step, 0, dp.clients, local_step, like))
    return _WithGradient.apply(losses.mean(), [(None, private, False)], *params.values())


def client_data_losses(step: BatchedClientStep, x: Tensor, y: Tensor, weight: Tensor, local_step: int) -> Tensor:
    """Every fused client's data loss ``[G]`` on its own batch: ``step.data_loss(x, y, weight)``; under
    ``privacy.level sample`` its value is each client's mean per-sample loss and its gradient DP-SGD's on the
    client's own rows of slot 0's stacks (module docstring): the data loss of a batch of one per client
    (``x[:, i]``, weight 1, or 0 on padding), ``vmap`` over the sample axis."""
    dp = dp_sgd_of(step)
    if dp is None:
        return step.data_loss(x, y, weight)
    from torch.func import functional_call, grad, vmap

    assert len(dp.clients) == step.size
    slot = step.slots[0]
    names = {id(p): f"step.{n}" for n, p in step.named_parameters()}
    groups = [[names[id(p)] for p in group.params] for group in slot.groups]
    params = {n: p for n, p in _trainable(step).items() if any(n in g for g in groups)}
    wrapper = _DataLoss(step)
    real = (weight > 0).to(weight.dtype)  # [G, B]

    def one(weights: dict[str, Tensor], xi: Tensor, yi: Tensor, wi: Tensor) -> tuple[Tensor, Tensor]:
        losses = functional_call(wrapper, weights, (xi.unsqueeze(1), yi.unsqueeze(1), wi.unsqueeze(1)), strict=False)
        return losses.sum(), losses.detach()

    detached = {k: p.detach() for k, p in params.items()}
    grads, losses = vmap(grad(one, has_aux=True), in_dims=(None, 1, 1, 1), randomness="different")(
        detached, x, y, real)  # grads [B, k, *shape] per stack; losses [B, G]
    value = (losses.transpose(0, 1) * weight).sum(1)  # every client's batch mean [G]
    privates = []
    for i, (rows, group) in enumerate(zip(slot.members, groups)):
        mask = real.index_select(0, slot.rows(i)).transpose(0, 1)  # [B, k]
        clients = [dp.clients[g] for g in rows]
        private = _private_gradient([grads[n] for n in group], mask, dp, clients,
                                    lambda like, i=i, clients=clients: _noise_rows(step, i, clients, local_step, like))
        privates.append((None if slot.identity and len(groups) == 1 else slot.rows(i), private, True))
    return _WithGradient.apply(value, privates, *(params[n] for group in groups for n in group))


def _private_gradient(per_sample: Sequence[Tensor], mask: Tensor, dp: DPSGD, clients: Sequence[ClientNoise],
                      noise: Callable[[Tensor], Tensor]) -> Tensor:
    """``g~ = (sum_i g_i min(1, C / (||g_i|| + eps)) + sigma C N(0, I)) / b`` of every row of a stack, flat
    ``[k, P]``: ``per_sample[p]`` ``[B, k, *shape]`` is sample i's gradient of row k's tensor p (one norm over a
    row's tensors alone, never across rows), ``mask`` ``[B, k]`` (0: padding), ``noise(sums)`` the rows' ``N(0, I)``
    (:func:`_noise_rows`), ``b`` each client's expected batch."""
    flat = torch.cat([g.flatten(2) for g in per_sample], dim=2)  # [B, k, P]
    norms = torch.linalg.vector_norm(flat, dim=2)  # [B, k]
    factor = (dp.clip_norm / (norms + NORM_EPSILON)).clamp(max=1.0) * mask
    summed = torch.einsum("bk,bkp->kp", factor.to(flat.dtype), flat)
    batch = torch.tensor([float(c.expected_batch) for c in clients], dtype=summed.dtype, device=summed.device)
    return (summed + (dp.noise_multiplier * dp.clip_norm) * noise(summed)) / batch.unsqueeze(1)


class _WithGradient(torch.autograd.Function):
    """``value`` (a loss, ``[]`` or ``[G]``, detached) whose gradient with respect to the stacks is the private one:
    for every group ``(rows, g~, stacked)`` (``g~`` ``[k, P]``; ``rows``: its k entries of ``value``, None: all, in
    order) and its tensors (the next of ``stacks``: ``[k, *shape]`` stacks, or with ``stacked`` False one client's own
    tensors), ``d value_j / d stack[j] = g~_j``,
    so ``backward`` hands each stack ``g~`` times the gradient its rows of ``value`` receive (one multiply a tensor,
    no graph)."""

    @staticmethod
    def forward(ctx, value: Tensor, privates: list[tuple[Tensor | None, Tensor, bool]],  # noqa: ANN001
                *stacks: Tensor) -> Tensor:
        ctx.privates = privates
        ctx.shapes = [s.shape for s in stacks]
        return value.view_as(value)

    @staticmethod
    def backward(ctx, grad_out: Tensor) -> tuple[Tensor | None, ...]:  # noqa: ANN001
        grads: list[Tensor] = []
        shapes = iter(ctx.shapes)
        for rows, private, stacked in ctx.privates:
            scale = grad_out.reshape(-1) if rows is None else grad_out.index_select(0, rows)  # [k]
            scale = scale.unsqueeze(1).to(private.dtype)
            start = 0
            while start < private.shape[1]:  # a multiply per tensor: its gradient comes out contiguous
                shape = next(shapes)
                numel = math.prod(shape[1:]) if stacked else math.prod(shape)
                grads.append((private[:, start:start + numel] * scale).reshape(shape))
                start += numel
        return (None, None, *grads)


def attach(step: nn.Module, dp: DPSGD) -> None:
    """Mark ``step`` private for the phase (the phase runner does this; a method never does)."""
    step.dp_sgd = dp


def per_sample_refusal(models: Sequence[nn.Module], names: Sequence[str]) -> str | None:
    """Why DP-SGD cannot take these models (one line), or None: BatchNorm has no per-sample gradient."""
    from lit_fl.steps.batched import per_sample

    for model, name in zip(models, names):
        if not per_sample(model):
            return (f"models.pool: privacy.level sample (DP-SGD) needs per-sample gradients and {name} has "
                    "BatchNorm, whose batch statistics mix a batch's samples; use a GroupNorm or LayerNorm model "
                    "(cnn_<c1>_<c2>... instead of cnn_bn_...)")
    return None
