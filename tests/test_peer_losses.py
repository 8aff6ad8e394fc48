"""The vectorised peer losses (``losses.peer_losses``) against the per-pair reference code (``wsm_loss``,
``cross_entropy``, ``kl_divergence``, ``weighted_kl_loss``): the same values and gradients within float32 rounding
for N = 2..26 students, full and partial batches, alpha 0 and 0.9, T 1 and 2, weighted and uniform teachers,
trainable masks, float32 and bfloat16 logits; and a number of kernels that does not grow with N."""

from __future__ import annotations

import itertools

import pytest
import torch
from torch import Tensor

from lit_fl.kernel_count import KernelCounter
from lit_fl.losses import (
    cross_entropy,
    peer_losses,
    teacher_weight_matrix,
    teacher_weights,
    weighted_kl_loss,
    wsm_loss,
)
from lit_fl.steps import MutualLearning
from lit_fl.steps.noise_distillation import soft_cross_entropy

CLASSES = 10


def reference(logits: list[Tensor], y: Tensor, beta: Tensor, alpha: float, phi: list[int], weighted: bool,
              temperature: float, loss: str) -> Tensor:
    """DFML Eq. 1 per student, one pair at a time (the code before vectorisation)."""
    sup = wsm_loss if loss == "wsm" else cross_entropy
    out = []
    for n in range(len(logits)):
        kd = weighted_kl_loss(logits, n, teacher_weights(phi, n, weighted), temperature)
        out.append((1 - alpha) * sup(logits[n], y, beta) + alpha * kd)
    return torch.stack(out)


def case(n: int, batch: int, dtype: torch.dtype, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, list[int]]:
    g = torch.Generator().manual_seed(seed)
    logits = (3 * torch.randn(n, batch, CLASSES, generator=g)).to(dtype)
    y = torch.randint(0, CLASSES, (batch,), generator=g)
    beta = torch.rand(CLASSES, generator=g)
    beta[3] = 0.0  # a class the aggregator never saw (masked out of WSM's normaliser)
    beta = beta / beta.sum()
    phi = torch.randint(1_000, 100_000, (n,), generator=g).tolist()
    return logits, y, beta, phi


GRID = [*itertools.product([2, 3, 7], [64, 5], [0.0, 0.9], [1.0, 2.0], [True, False]),
        (26, 64, 0.9, 2.0, True), (26, 5, 0.9, 1.0, False), (26, 5, 0.0, 1.0, True)]


@pytest.mark.parametrize(("n", "batch", "alpha", "temperature", "weighted"), GRID)
def test_values_and_gradients_equal_the_per_pair_code(n: int, batch: int, alpha: float, temperature: float,
                                                       weighted: bool) -> None:
    logits, y, beta, phi = case(n, batch, torch.float32)
    loss = "wsm" if n % 2 else "ce"
    fast_in = logits.clone().requires_grad_(True)
    slow_in = [z.clone().requires_grad_(True) for z in logits]
    weights = teacher_weight_matrix(phi, weighted) if alpha else None
    fast = peer_losses(fast_in, y, weights, 1 - alpha, alpha, temperature, beta, loss)
    slow = reference(slow_in, y, beta, alpha, phi, weighted, temperature, loss)
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)
    mask = torch.rand(n, generator=torch.Generator().manual_seed(n)) < 0.6  # some students learn, some teach
    (fast * mask).sum().backward()
    sum(s for s, m in zip(slow, mask) if m).backward() if mask.any() else None
    for row, z in zip(fast_in.grad, slow_in):
        expected = z.grad if z.grad is not None else torch.zeros_like(row)
        torch.testing.assert_close(row, expected, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("n", [2, 26])
def test_bfloat16_logits_are_computed_in_float32_like_the_per_pair_code(n: int) -> None:
    logits, y, beta, phi = case(n, 33, torch.bfloat16, seed=1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        fast = peer_losses(logits, y, teacher_weight_matrix(phi), 0.1, 0.9, 2.0, beta, "wsm")
        slow = reference(list(logits), y, beta, 0.9, phi, True, 2.0, "wsm")
    assert fast.dtype == torch.float32
    torch.testing.assert_close(fast, slow, rtol=1e-5, atol=1e-6)


def test_soft_cross_entropy_form_equals_the_per_pair_code() -> None:
    """``teacher_entropy=False``: ``sum_q W[n, q] CE(softmax(z_q / T), z_n / T) T^2`` (FedORION Eq. 3)."""
    logits, _, _, phi = case(5, 16, torch.float32, seed=2)
    weights = teacher_weight_matrix(phi, weighted=False)
    fast = peer_losses(logits, None, weights, temperature=2.0, teacher_entropy=False)
    slow = [sum(weights[n, q] * soft_cross_entropy(logits[q], logits[n], 2.0) for q in range(5) if q != n)
            for n in range(5)]
    torch.testing.assert_close(fast, torch.stack(slow), rtol=1e-5, atol=1e-6)


def test_the_mutual_learning_step_sums_only_trainable_students() -> None:
    logits, y, beta, phi = case(4, 12, torch.float32, seed=3)
    models = [torch.nn.Linear(1, CLASSES) for _ in range(4)]
    step = MutualLearning(models, beta, 0.7, phi, trainable=[True, False, True, False], temperature=2.0)
    expected = reference(list(logits), y, beta, 0.7, phi, True, 2.0, "wsm")
    torch.testing.assert_close(step.learning_loss(step.peer_losses(logits, y)), expected[0] + expected[2])


def kernels(n: int) -> int:
    logits, y, beta, phi = case(n, 64, torch.float32)
    logits.requires_grad_(True)
    weights = teacher_weight_matrix(phi)
    with KernelCounter() as counter:
        peer_losses(logits, y, weights, 0.1, 0.9, 2.0, beta, "wsm").sum().backward()
    return counter.total


def test_the_kernel_count_does_not_grow_with_the_number_of_students() -> None:
    assert kernels(2) == kernels(26) < 60
