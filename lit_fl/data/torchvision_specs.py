"""What lit-fl knows of each torchvision benchmark without importing torch or torchvision: its class, statistics and
files, and whether the files are under a root (so a missing dataset is refused before a run starts)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lit_fl.errors import DatasetNotFoundError


@dataclass(frozen=True)
class TorchvisionSpec:
    """How to read one torchvision dataset: its class, where it keeps labels, and its statistics."""

    title: str  # human-readable name used in messages
    cls_name: str  # attribute of ``torchvision.datasets``
    num_classes: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    files: str  # where torchvision expects the files, relative to root (for the error message)
    marker: str  # a path under root that exists once the dataset is there (checked before torchvision loads)
    augment: str = "none"  # the dataset's default ``data.augment``
    label_attr: str = "targets"
    split_arg: bool = False  # the class takes ``split="train"/"test"`` instead of ``train=True/False``


SPECS: dict[str, TorchvisionSpec] = {
    "cifar10": TorchvisionSpec(
        "CIFAR-10", "CIFAR10", 10, (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616),
        "cifar-10-batches-py/", "cifar-10-batches-py", augment="crop_flip",
    ),
    "cifar100": TorchvisionSpec(
        "CIFAR-100", "CIFAR100", 100, (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762),
        "cifar-100-python/", "cifar-100-python", augment="crop_flip",
    ),
    "fmnist": TorchvisionSpec(
        "FashionMNIST", "FashionMNIST", 10, (0.2860,), (0.3530,), "FashionMNIST/raw/*-ubyte", "FashionMNIST",
    ),
    "mnist": TorchvisionSpec("MNIST", "MNIST", 10, (0.1307,), (0.3081,), "MNIST/raw/*-ubyte", "MNIST"),
    "svhn": TorchvisionSpec(
        "SVHN", "SVHN", 10, (0.4377, 0.4438, 0.4728), (0.1980, 0.2010, 0.1970),
        "train_32x32.mat, test_32x32.mat", "train_32x32.mat", label_attr="labels", split_arg=True,
    ),
}


def require_files(spec: TorchvisionSpec, root: str | Path) -> None:
    """Raise :class:`DatasetNotFoundError` when the dataset's files are not under ``root`` (checked before
    torchvision loads; nothing is downloaded here)."""
    root = Path(root).expanduser().resolve()
    if not (root / spec.marker).exists():
        raise DatasetNotFoundError(not_found_message(spec, root, f"no {spec.marker} under the root"))


def not_found_message(spec: TorchvisionSpec, root: Path, err: BaseException | str) -> str:
    return (
        f"{spec.title} not found under {root} (expected {spec.files} there; torchvision said: {err}). "
        "Run once with `--data.download true` on a machine with internet (torchvision downloads it to that "
        "root), or copy the dataset files there."
    )
