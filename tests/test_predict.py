"""The predict phase and the gradient work (:mod:`lit_fl.steps.predict`, :mod:`lit_fl.steps.gradient`): the phase
runner computes every client's eval-mode outputs (or gradient on one batch) as a value, equal to the model alone;
fused per architecture, equal to one by one within float64 rounding.

Tolerances: the fused side sums in other orders (grouped convolutions, batched matmuls), which float64 rounds about
1e-16 relative per operation; :data:`RTOL` leaves 10^4 of amplification through a few layers and stays far below any
float32 effect (1e-7) or a wrong model (O(1))."""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from lit_fl.losses import LOSSES
from lit_fl.models import create_model
from lit_fl.steps import StepRunner
from lit_fl.steps.gradient import GradientWork
from lit_fl.steps.phase import ClientWork
from lit_fl.steps.predict import PredictWork

#: float64's unit roundoff (1.1e-16) x 10^4 (module docstring)
RTOL = 1e-12
SHAPE = (1, 8, 8)


def models(arch: str, count: int, classes: int = 4) -> list[nn.Module]:
    """``count`` differently initialised models of ``arch``, in train mode, BatchNorm statistics moved off their
    initial values (so that eval mode differs from train mode)."""
    out = []
    for n in range(count):
        torch.manual_seed(n)
        model = create_model(arch, SHAPE, classes)
        with torch.no_grad():
            model.train()(torch.randn(16, *SHAPE) * 3 + 1)
        out.append(model)
    return out


def alone(model: nn.Module, x: torch.Tensor, chunk: int = 4) -> torch.Tensor:
    """The model's eval-mode logits on ``x``, ``chunk`` inputs per forward pass."""
    copied = copy.deepcopy(model).eval()
    return torch.cat([copied(x[i : i + chunk]).detach() for i in range(0, len(x), chunk)])


@pytest.mark.parametrize("fuse", ["off", "on"])
def test_predict_is_each_model_alone_in_eval_mode_and_keeps_the_modes(fuse: str) -> None:
    clients = models("cnn_bn_4_8", 3)
    x = torch.randn(11, *SHAPE)
    before = [copy.deepcopy(m.state_dict()) for m in clients]
    results = StepRunner("cpu", fuse=fuse).run_phase([PredictWork(n, m, x, chunk=4) for n, m in enumerate(clients)])
    for model, state, result in zip(clients, before, results):
        assert model.training and all(m.training for m in model.modules())  # every module's mode restored
        assert all(torch.equal(v, state[k]) for k, v in model.state_dict().items())  # running statistics untouched
        assert not result.value.requires_grad and result.value.shape == (11, 4)
        want = alone(model, x)
        if fuse == "off":
            assert torch.equal(result.value, want)
        else:
            torch.testing.assert_close(result.value, want, rtol=1e-5, atol=1e-5)  # float32 fused: rounding only


@pytest.mark.parametrize("arch", ["cnn_4_8", "cnn_bn_4_8"])  # hand-fused CNN, and vmap with BatchNorm
@pytest.mark.parametrize("shared", [True, False])
def test_fused_predict_equals_one_by_one(float64_native: None, arch: str, shared: bool) -> None:
    clients = [*models(arch, 3), *models("cnn_8", 2)]  # two architectures: two fused groups
    inputs = [torch.randn(9, *SHAPE)] * 5 if shared else [torch.randn(9, *SHAPE) for _ in clients]
    works = [PredictWork(n, m, x, chunk=4) for n, (m, x) in enumerate(zip(clients, inputs))]
    fused = StepRunner("cpu", fuse="on").run_phase(works)
    unfused = StepRunner("cpu", fuse="off").run_phase(works)
    for model, x, a, b in zip(clients, inputs, fused, unfused):
        assert torch.equal(b.value, alone(model, x))
        torch.testing.assert_close(a.value, b.value, rtol=RTOL, atol=RTOL * float(b.value.abs().max()))


def test_an_output_function_of_tuples_fuses_too(float64_native: None) -> None:
    """UA-PDFL's outputs: the logits and the classifier's input, for every model at once."""
    from lit_fl.algorithms.unit_representation import ModelSplit

    clients, split, x = models("cnn_bn_4_8", 3), ModelSplit(), torch.ones(1, *SHAPE)
    works = [PredictWork(n, m, x, split.forward_with_features) for n, m in enumerate(clients)]
    fused = StepRunner("cpu", fuse="on").run_phase(works)
    for model, result in zip(clients, fused):
        logits, features = split.forward_with_features(copy.deepcopy(model).eval(), x)
        torch.testing.assert_close(result.value[0], logits.detach(), rtol=RTOL, atol=1e-14)
        torch.testing.assert_close(result.value[1], features.detach(), rtol=RTOL, atol=1e-14)


def test_a_none_work_has_no_value_and_kinds_do_not_mix() -> None:
    model = models("cnn_4_8", 1)[0]
    runner = StepRunner("cpu")
    results = runner.run_phase([None, PredictWork(1, model, torch.randn(3, *SHAPE))])
    assert results[0].value is None and results[0].loss != results[0].loss  # NaN
    assert results[1].value.shape == (3, 4)
    from lit_fl.data.batches import ClientBatches
    from lit_fl.steps import LocalTraining

    train = ClientWork(0, LocalTraining(model, torch.ones(4)), ClientBatches(
        torch.randn(4, *SHAPE), torch.zeros(4, dtype=torch.long), torch.arange(4), 2, torch.Generator()))
    with pytest.raises(ValueError, match="not both"):
        runner.run_phase([train, PredictWork(1, model, torch.randn(3, *SHAPE))])


@pytest.mark.parametrize("loss", ["ce", "wsm"])
def test_gradient_work_is_the_eval_mode_gradient_and_fuses(float64_native: None, loss: str) -> None:
    clients = models("cnn_bn_4_8", 3)
    batches = [(torch.randn(6, *SHAPE), torch.randint(0, 4, (6,))) for _ in clients]
    proportions = [torch.softmax(torch.randn(4), 0) for _ in clients]
    works = [GradientWork(n, m, x, y, p, loss) for n, (m, (x, y), p) in enumerate(zip(clients, batches, proportions))]
    before = [copy.deepcopy(m.state_dict()) for m in clients]
    unfused = StepRunner("cpu", fuse="off").run_phase(works)
    fused = StepRunner("cpu", fuse="on").run_phase(works)
    for model, state, (x, y), p, a, b in zip(clients, before, batches, proportions, fused, unfused):
        assert model.training and all(torch.equal(v, state[k]) for k, v in model.state_dict().items())
        reference = copy.deepcopy(model).eval()
        params = list(reference.parameters())
        want = torch.autograd.grad(LOSSES[loss](reference(x), y, p.float()), params)  # beta in float32, as DisPFL
        assert len(b.value) == len(want) and all(torch.equal(g, w) for g, w in zip(b.value, want))
        for g, w in zip(a.value, want):
            torch.testing.assert_close(g, w, rtol=RTOL, atol=RTOL * float(w.abs().max()))
