"""Standard image benchmarks read through ``torchvision.datasets``: cifar10, cifar100, fmnist, mnist, svhn.

The raw uint8 arrays are taken straight from the torchvision dataset object (``.data`` plus ``.targets`` or
``.labels``) and turned into one normalised float tensor per split; no PIL transform is ever run. Files live
under ``root`` in torchvision's own layout; with ``download=True`` torchvision fetches them there once.
Missing data or a failed download raises one :class:`DatasetNotFoundError` that says what to do.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.registry import register_dataset
from lit_fl.data.transforms import black_value, normalize, to_float_images


class DatasetNotFoundError(RuntimeError):
    """A dataset's files are not under its root and were not (or could not be) downloaded."""


class DatasetDownloadError(DatasetNotFoundError):
    """``download=True`` was given but fetching the dataset failed (e.g. no network)."""


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


def load_torchvision(root: Path, download: bool, seed: int, *, name: str) -> ImageDataset:
    """Load the dataset ``name`` of :data:`SPECS` from ``root`` (``seed`` is unused: the split is fixed)."""
    spec = SPECS[name]
    root = Path(root).expanduser().resolve()
    train_x, train_y = _read_split(spec, root, download, train=True)
    test_x, test_y = _read_split(spec, root, download, train=False)
    return ImageDataset(
        name, train_x, train_y, test_x, test_y, spec.num_classes, augment=spec.augment,
        black=black_value(spec.mean, spec.std),
    )


def _read_split(spec: TorchvisionSpec, root: Path, download: bool, train: bool) -> tuple[Tensor, Tensor]:
    """Normalised float ``(N, C, H, W)`` images and int64 labels of the train or test split."""
    ds = _open(spec, root, download, train)
    images = torch.from_numpy(np.ascontiguousarray(np.asarray(ds.data, dtype=np.uint8)))
    labels = torch.as_tensor(np.asarray(getattr(ds, spec.label_attr), dtype=np.int64))
    return normalize(to_float_images(images), spec.mean, spec.std), labels


def _open(spec: TorchvisionSpec, root: Path, download: bool, train: bool) -> Any:
    """The torchvision dataset object, with its errors turned into one :class:`DatasetNotFoundError`.

    Without ``download`` a root that lacks the dataset's folder fails at once, before torchvision (1 s of
    imports) is loaded."""
    if not download and not (root / spec.marker).exists():
        raise DatasetNotFoundError(_not_found_message(spec, root, f"no {spec.marker} under the root"))
    import torchvision.datasets as tvd  # imported lazily: registering the loaders stays cheap

    cls = getattr(tvd, spec.cls_name)
    which: dict[str, Any] = {"split": "train" if train else "test"} if spec.split_arg else {"train": train}
    try:
        return cls(str(root), download=download, **which)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; torchvision raises RuntimeError too
        if download:
            raise DatasetDownloadError(_download_failed_message(spec, root, err)) from err
        raise DatasetNotFoundError(_not_found_message(spec, root, err)) from err


def _not_found_message(spec: TorchvisionSpec, root: Path, err: BaseException | str) -> str:
    return (
        f"{spec.title} not found under {root} (expected {spec.files} there; torchvision said: {err}). "
        "Run once with `--data.download true` on a machine with internet (torchvision downloads it to that "
        "root), or copy the dataset files there."
    )


def _download_failed_message(spec: TorchvisionSpec, root: Path, err: BaseException) -> str:
    return (
        f"{spec.title} download to {root} failed ({type(err).__name__}: {err}). Check the network "
        f"connection and retry with `--data.download true`, or copy the dataset files ({spec.files}) into "
        f"{root} by hand and run with `--data.download false`."
    )


for _name in SPECS:
    register_dataset(_name)(partial(load_torchvision, name=_name))
