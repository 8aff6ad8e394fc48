"""StepRunner: Lightning's automatic-optimisation contract through Fabric, precision, and Trainer parity."""

from __future__ import annotations

import copy

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from lit_fl.steps import LocalTraining, SGDConfig, StepRunner


def _batches(n: int = 4) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(0)
    return [(torch.randn(8, 5, generator=g), torch.randint(0, 3, (8,), generator=g)) for _ in range(n)]


def _step(model: torch.nn.Module) -> LocalTraining:
    return LocalTraining(model, torch.tensor([0.5, 0.3, 0.2]), "wsm", SGDConfig(lr=0.1))


def test_runner_equals_a_plain_loop() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    plain = copy.deepcopy(model)
    StepRunner(accelerator="cpu").run_server_step(_step(model), _batches())
    opt = SGDConfig(lr=0.1).build(plain.parameters())
    reference = _step(plain)
    for i, batch in enumerate(_batches()):
        loss = reference.training_step(batch, i)
        loss.backward()
        opt.step()
        opt.zero_grad()
    for p, q in zip(model.parameters(), plain.parameters()):
        torch.testing.assert_close(p, q)


def test_the_same_step_runs_under_a_lightning_trainer() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    twin = copy.deepcopy(model)
    StepRunner(accelerator="cpu").run_server_step(_step(model), _batches())
    trainer = L.Trainer(
        max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
        enable_progress_bar=False, enable_model_summary=False,
    )
    trainer.fit(_step(twin), train_dataloaders=DataLoader(_batches(), batch_size=None))
    for p, q in zip(model.parameters(), twin.parameters()):
        torch.testing.assert_close(p, q)


def test_bf16_mixed_runs_on_cpu_and_learns() -> None:
    torch.manual_seed(0)
    model = torch.nn.Linear(5, 3)
    step = _step(model)
    batches = _batches(20)
    before = sum(float(step.training_step(b, 0)) for b in batches)
    StepRunner(accelerator="cpu", precision="bf16-mixed").run_server_step(step, batches)
    after = sum(float(_step(model).training_step(b, 0)) for b in batches)
    assert after < before


def test_bad_precision_and_devices_are_refused() -> None:
    with pytest.raises(ValueError, match="trainer.precision"):
        StepRunner(accelerator="cpu", precision="8-bit")  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="16-mixed needs a GPU"):
            StepRunner(accelerator="cpu", precision="16-mixed")
    with pytest.raises(ValueError, match="trainer.devices"):
        StepRunner(accelerator="cpu", devices=0)


class OwnStep(L.LightningModule):
    """A user's step that keeps no loss counter: ``run_server_step`` averages what ``training_step`` returns."""

    def __init__(self) -> None:
        super().__init__()
        self.model = torch.nn.Linear(3, 2)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        return torch.nn.functional.cross_entropy(self.model(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.0)  # lr 0: every batch's loss is the starting model's


def test_a_server_step_returns_the_phase_mean_loss_with_or_without_the_steps_own_counter() -> None:
    torch.manual_seed(0)
    batches = [(torch.randn(5, 3), torch.randint(0, 2, (5,))) for _ in range(3)]
    own = OwnStep()
    expected = sum(float(torch.nn.functional.cross_entropy(own.model(x), y)) for x, y in batches) / 3
    assert StepRunner("cpu").run_server_step(own, batches) == pytest.approx(expected, rel=1e-6)
    assert StepRunner("cpu").run_server_step(OwnStep(), []) == 0.0
    step = _step(torch.nn.Linear(5, 3))
    mean = StepRunner("cpu").run_server_step(step, _batches())
    assert mean == float(step.loss_sum) / step.num_batches


def test_a_method_runs_models_through_a_phase_or_a_server_step_only() -> None:
    """The runner's public surface (issue 36): client work goes through ``run_phase`` (training, predictions,
    gradients), a server's step through ``run_server_step``; the rest places clients and reads the setup."""
    public = {name for name in vars(StepRunner) if not name.startswith("_")}
    assert public == {"run_phase", "run_server_step", "place", "device", "is_global_zero", "any", "autocast"}


@pytest.mark.parametrize(("tf32", "autotune"), [(True, True), (False, False), (None, False)])
def test_the_cuda_backend_switches_follow_the_trainer_keys(tf32: bool | None, autotune: bool) -> None:
    """``trainer.tf32`` sets both TF32 switches (matrix products and cuDNN convolutions), unset leaves PyTorch's;
    ``trainer.cudnn_benchmark`` sets cuDNN's autotuner. The flags are process-wide: restored after the test."""
    from lit_fl.steps.trainer_config import apply_cuda_backends

    saved = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark)
    try:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True  # PyTorch's defaults
        apply_cuda_backends(tf32, autotune)
        expected = (False, True) if tf32 is None else (tf32, tf32)
        assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32) == expected
        assert torch.backends.cudnn.benchmark is autotune
    finally:
        (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
         torch.backends.cudnn.benchmark) = saved
