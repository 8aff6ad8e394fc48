"""Standard image benchmarks read through ``torchvision.datasets``: cifar10, cifar100, fmnist, mnist, svhn.

The raw uint8 arrays are taken straight from the torchvision dataset object (``.data`` plus ``.targets`` or
``.labels``) and turned into one normalised float tensor per split; no PIL transform is ever run. Files live
under ``root`` in torchvision's own layout; with ``download=True`` torchvision fetches them there once.
Missing data or a failed download raises one :class:`DatasetNotFoundError` that says what to do.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.registry import register_dataset
from lit_fl.data.torchvision_specs import SPECS, TorchvisionSpec, not_found_message, require_files
from lit_fl.data.transforms import black_value, normalize, to_float_images
from lit_fl.errors import DatasetNotFoundError


class DatasetDownloadError(DatasetNotFoundError):
    """``download=True`` was given but fetching the dataset failed (e.g. no network)."""


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
    if not download:
        require_files(spec, root)
    import torchvision.datasets as tvd  # imported lazily: registering the loaders stays cheap

    cls = getattr(tvd, spec.cls_name)
    which: dict[str, Any] = {"split": "train" if train else "test"} if spec.split_arg else {"train": train}
    try:
        return cls(str(root), download=download, **which)
    except (OSError, RuntimeError) as err:  # URLError is an OSError; torchvision raises RuntimeError too
        if download:
            raise DatasetDownloadError(_download_failed_message(spec, root, err)) from err
        raise DatasetNotFoundError(not_found_message(spec, root, err)) from err


def _download_failed_message(spec: TorchvisionSpec, root: Path, err: BaseException) -> str:
    return (
        f"{spec.title} download to {root} failed ({type(err).__name__}: {err}). Check the network "
        f"connection and retry with `--data.download true`, or copy the dataset files ({spec.files}) into "
        f"{root} by hand and run with `--data.download false`."
    )


for _name in SPECS:
    register_dataset(_name)(partial(load_torchvision, name=_name))
