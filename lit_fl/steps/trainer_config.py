"""``trainer``: where and how steps run, the config section the runner (:class:`~lit_fl.steps.runner.StepRunner`)
checks its own arguments against; :mod:`lit_fl.config` holds it with the other sections."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Literal

from lit_fl.constraints import Bounds, PositiveInt, check_fields
from lit_fl.errors import ConfigError


@dataclass
class TrainerConfig:
    """Where and how steps run (Lightning Fabric).

    Args:
        accelerator: auto (GPU when present), cpu, gpu/cuda, mps.
        devices: processes (devices) per node. More than 1 splits the federation's work over processes
            (torch.distributed through Fabric: gloo on CPU, NCCL on GPU); the numbers stay those of 1.
        num_nodes: nodes (torchrun or SLURM start the processes on each node).
        strategy: auto or ddp: both run ddp when devices x num_nodes > 1, one process otherwise.
        precision: 32-true, bf16-mixed or 16-mixed (GPU only; with several processes each keeps its own
            gradient scaler, so 16-mixed results depend on the process count: bf16-mixed needs no scaler).
        fuse: run the models of one architecture as one vectorised module where they learn from the same batch
            (DFML's mutual learning, noise distillation), train on their own data (every method's client work:
            local training, client DML, Def-KT's fusion, ...; not models with BatchNorm) and are evaluated:
            ``on``, ``off``, or ``auto`` = on where it is faster, on a GPU (a round of small models is bound by
            kernel launches there), off on a CPU. Same math within float32 rounding; with several processes each
            fuses the work it owns.
        tf32: on a CUDA GPU under 32-true, whether matrix products and convolutions may use TF32 tensor cores
            (10-bit mantissa products, float32 sums): true both, false neither (true float32), unset PyTorch's
            defaults (convolutions TF32, matrix products float32). Ignored elsewhere.
        cudnn_benchmark: on a CUDA GPU, let cuDNN time its convolution algorithms on the first batch of each shape
            and keep the fastest (``torch.backends.cudnn.benchmark``); the choice may differ between runs, so a
            resumed run may differ from an uninterrupted one in the last bits. Ignored elsewhere.
    """

    accelerator: Literal["auto", "cpu", "gpu", "cuda", "mps", "tpu"] = "auto"
    devices: PositiveInt = 1
    num_nodes: PositiveInt = 1
    strategy: Literal["auto", "ddp"] = "auto"
    precision: Literal["32-true", "bf16-mixed", "16-mixed"] = "32-true"
    fuse: Literal["auto", "on", "off"] = "auto"
    tf32: bool | None = None
    cudnn_benchmark: bool = False

    def __post_init__(self) -> None:
        check_fields(self, "trainer.")
        if self.precision == "16-mixed" and not gpu_selected(self.accelerator):
            raise ConfigError("trainer.precision: 16-mixed needs a GPU; allowed on CPU: 32-true, bf16-mixed")
        if self.devices > 1:
            Bounds(1, device_count(self.accelerator), note="(one process per device: a CPU's cores, the visible "
                   "GPUs)").check("trainer.devices", self.devices)


def device_count(accelerator: str) -> int:
    """The devices ``accelerator`` can put one process each on: the visible CUDA GPUs where it runs on them (or
    none visible: 1, the accelerator's own check says why), else the CPU's cores (``trainer.devices: 1000`` on a
    CPU would start a thousand processes)."""
    if gpu_selected(accelerator):
        import torch

        return max(1, torch.cuda.device_count())
    return os.cpu_count() or 1


def gpu_selected(accelerator: str) -> bool:
    """Whether ``accelerator`` runs on a CUDA GPU (``auto`` does where one is visible; torch imported only then)."""
    if accelerator in ("gpu", "cuda"):
        return True
    if accelerator != "auto":
        return False
    import torch

    return torch.cuda.is_available()


def apply_cuda_backends(tf32: bool | None, cudnn_benchmark: bool) -> None:
    """Set PyTorch's CUDA backend switches of ``trainer.tf32`` and ``trainer.cudnn_benchmark`` (process-wide; they
    act on CUDA kernels only)."""
    import torch

    if tf32 is not None:
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = cudnn_benchmark
