"""``TargetDistillation``, the one fixed-target distillation step of FedMD, DS-FL, KT-pFL and FDmeta: each loss, at
each method's setting, on hand cases (value and the gradient of the student's bias), and its refusals.

The student is ``nn.Linear(3, C)`` with zero weights, so its logits are its bias ``b`` for every input and the
gradient of the loss with respect to ``b`` is the sum over the batch of ``dL/dz_i``."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from lit_fl.steps import SGDConfig, TargetDistillation

EPS32 = float(torch.finfo(torch.float32).eps)
#: hand values of magnitude <= 4 computed by lit-fl in float32 through at most eight rounded operations (softmax,
#: log, products, sums, the T^2 and weight factors): eight roundings of float32's relative precision at that scale
TOL = 8 * EPS32 * 4
#: ``KL((1/4, 3/4) || (1/2, 1/2)) = 1/4 ln(1/2) + 3/4 ln(3/2) = 3/4 ln 3 - ln 2``; the cross-entropy is ``ln 2``
KL_QUARTER = 0.75 * math.log(3) - math.log(2)


def student(bias: list[float]) -> nn.Linear:
    model = nn.Linear(3, len(bias))
    with torch.no_grad():
        model.weight.zero_()
        model.bias.copy_(torch.tensor(bias))
    return model


def loss_and_bias_grad(step: TargetDistillation, targets: list[list[float]]) -> tuple[float, list[float]]:
    x = torch.randn(len(targets), 3)
    loss = step.training_step((x, torch.tensor(targets)), 0)
    loss.backward()
    return float(loss.detach()), step.model.bias.grad.tolist()


def test_logit_distances_are_the_mean_over_samples_and_classes() -> None:
    """FedMD's digest. ``z = (1, -1)`` for both samples, targets ``(0, 1)`` and ``(3, -1)``: differences ``(1, -2)`` and
    ``(-2, 0)``; ``l1 = (1 + 2 + 2 + 0) / 4``, its gradient ``sum_i sign(z_i - t_i) / 4 = (0, -1/4)`` (``sign(0) = 0``);
    ``mse = (1 + 4 + 4 + 0) / 4``, its gradient ``sum_i 2 (z_i - t_i) / 4 = (-1/2, -1)``."""
    targets = [[0.0, 1.0], [3.0, -1.0]]
    for loss, want, grad in (("l1", 1.25, [0.0, -0.25]), ("mse", 2.25, [-0.5, -1.0])):
        step = TargetDistillation(student([1.0, -1.0]), loss=loss, target="logits", optimizer=SGDConfig(0.1, 0.0, 0.0))
        got, got_grad = loss_and_bias_grad(step, targets)
        assert got == pytest.approx(want, abs=TOL)
        assert got_grad == pytest.approx(grad, abs=TOL)


@pytest.mark.parametrize(("loss", "target", "temperature", "weight", "targets", "want", "grad"), [
    # DS-FL (T = 1): p = (1/4, 3/4) against q = (1/2, 1/2); dL/dz = (q - p) / B
    ("kl", "probabilities", 1.0, 1.0, [[0.25, 0.75]], KL_QUARTER, [0.25, -0.25]),
    # the mean over the batch: a second sample whose target is q adds nothing but halves both
    ("kl", "probabilities", 1.0, 1.0, [[0.25, 0.75], [0.5, 0.5]], KL_QUARTER / 2, [0.125, -0.125]),
    # KT-pFL: lambda T^2 KL at T = 2, lambda = 1/2 (q stays uniform); dL/dz = lambda T (q - p)
    ("kl", "probabilities", 2.0, 0.5, [[0.25, 0.75]], 0.5 * 4 * KL_QUARTER, [0.25, -0.25]),
    # FDmeta: CE with the soft labels softmax(t / T) of the logits t = (0, ln 3) at T = 1 and (0, 2 ln 3) at T = 2,
    # both p = (1/4, 3/4): T^2 ln 2, the same gradient as the KL
    ("ce", "logits", 1.0, 1.0, [[0.0, math.log(3)]], math.log(2), [0.25, -0.25]),
    ("ce", "logits", 2.0, 1.0, [[0.0, 2 * math.log(3)]], 4 * math.log(2), [0.5, -0.5]),
    # the other two pairings: KL of logit targets, CE of probability targets
    ("kl", "logits", 2.0, 1.0, [[0.0, 2 * math.log(3)]], 4 * KL_QUARTER, [0.5, -0.5]),
    ("ce", "probabilities", 1.0, 0.5, [[0.25, 0.75]], 0.5 * math.log(2), [0.125, -0.125]),
])
def test_soft_label_losses_on_hand_cases(
    loss: str, target: str, temperature: float, weight: float, targets: list[list[float]], want: float,
    grad: list[float],
) -> None:
    step = TargetDistillation(student([0.0, 0.0]), loss=loss, target=target, temperature=temperature, weight=weight,
                              optimizer=SGDConfig(0.1, 0.0, 0.0))
    got, got_grad = loss_and_bias_grad(step, targets)
    assert got == pytest.approx(want, abs=TOL)
    assert got_grad == pytest.approx(grad, abs=TOL)
    assert step.num_batches == 1 and float(step.loss_sum) == got


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"loss": "l2", "target": "logits"}, "loss must be one of l1, mse, kl, ce, got 'l2'"),
    ({"loss": "kl", "target": "soft"}, "target must be one of probabilities, logits, got 'soft'"),
    ({"loss": "ce", "target": "logits", "temperature": 0.0}, "temperature must be > 0, got 0.0"),
    ({"loss": "kl", "target": "probabilities", "weight": -1.0}, "weight must be >= 0, got -1.0"),
    ({"loss": "l1", "target": "probabilities"}, "loss 'l1' compares logits with logits"),
    ({"loss": "mse", "target": "logits", "temperature": 2.0}, "loss 'mse' compares logits with logits"),
])
def test_settings_that_name_no_loss_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TargetDistillation(nn.Linear(3, 2), **kwargs)
