"""Standard image benchmarks read through ``torchvision.datasets``: cifar10, cifar100, fmnist, mnist, svhn.

The raw uint8 arrays are taken straight from the torchvision dataset object (``.data`` plus ``.targets`` or
``.labels``) and turned into one normalised float tensor per split; no PIL transform is ever run. Files live
under ``root`` in torchvision's own layout; with ``download=True`` torchvision fetches them there once.
Missing data or a failed download raises one :class:`DatasetNotFoundError` that says what to do.

``size`` (``data.options`` / ``data.proxy.options``: ``{size: 64}``) resizes every image to ``size x size`` before
normalising: bilinear interpolation of the [0, 1] pixels with antialiasing (:func:`resize_images`, as torchvision's
``transforms.Resize(size)`` on a tensor). It gives CIFAR-100 Tiny-ImageNet's 64 x 64 input shape, FedORION's proxy
data for Tiny-ImageNet (sec. 4.3). CIFAR-100's train split at 64 x 64 holds 2.5 GB of float32.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lit_fl.constraints import PositiveInt
from lit_fl.data.dataset import ImageDataset
from lit_fl.data.registry import register_dataset
from lit_fl.data.torchvision_specs import SPECS, TorchvisionSpec, not_found_message, require_files
from lit_fl.data.transforms import black_value, normalize, to_float_images
from lit_fl.errors import DatasetNotFoundError

#: images resized per chunk (bounds the memory the interpolation needs beside the result)
RESIZE_CHUNK = 4096


class DatasetDownloadError(DatasetNotFoundError):
    """``download=True`` was given but fetching the dataset failed (e.g. no network)."""


def load_torchvision(root: Path, download: bool, seed: int, *, name: str,
                     size: PositiveInt | None = None) -> ImageDataset:
    """Load the dataset ``name`` of :data:`SPECS` from ``root`` (``seed`` is unused: the split is fixed), its images
    resized to ``size x size`` when ``size`` is given (null: the original size)."""
    spec = SPECS[name]
    root = Path(root).expanduser().resolve()
    train_x, train_y = _read_split(spec, root, download, train=True, size=size)
    test_x, test_y = _read_split(spec, root, download, train=False, size=size)
    return ImageDataset(
        name, train_x, train_y, test_x, test_y, spec.num_classes, augment=spec.augment,
        black=black_value(spec.mean, spec.std),
    )


def _read_split(spec: TorchvisionSpec, root: Path, download: bool, train: bool,
                size: int | None = None) -> tuple[Tensor, Tensor]:
    """Normalised float ``(N, C, H, W)`` images (resized to ``size x size`` if given) and int64 labels of the train
    or test split."""
    ds = _open(spec, root, download, train)
    images = torch.from_numpy(np.ascontiguousarray(np.asarray(ds.data, dtype=np.uint8)))
    labels = torch.as_tensor(np.asarray(getattr(ds, spec.label_attr), dtype=np.int64))
    x = to_float_images(images)
    if size is not None:
        x = resize_images(x, size)
    return normalize(x, spec.mean, spec.std), labels


def resize_images(x: Tensor, size: int) -> Tensor:
    """Float ``(N, C, H, W)`` images resized to ``(N, C, size, size)``: bilinear, antialiased (torchvision's
    ``Resize`` on tensors), half-pixel centres (``align_corners=False``); in chunks of :data:`RESIZE_CHUNK`."""
    import torch.nn.functional as F

    if tuple(x.shape[2:]) == (size, size):
        return x
    chunks = [F.interpolate(part, size=(size, size), mode="bilinear", align_corners=False, antialias=True)
              for part in x.split(RESIZE_CHUNK)]
    return torch.cat(chunks) if chunks else x.new_empty((0, x.shape[1], size, size))


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
