"""``pathmnist``: PathMNIST (MedMNIST v2, Yang et al. 2023; UA-PDFL sec. 5.1.2 and Table 5), 9 tissue classes of
3 x 28 x 28 colour images, read from MedMNIST's own ``pathmnist.npz`` under ``data.root``: uint8 arrays
``train_images`` ``(89996, 28, 28, 3)``, ``val_images`` ``(10004, ...)``, ``test_images`` ``(7180, ...)`` and
``*_labels`` ``(N, 1)`` in 0..8.

MedMNIST's train and val splits both come from NCT-CRC-HE-100K and are merged into lit-fl's train split (every
client draws its own validation share from it, 80:20, as UA-PDFL's clients do; the paper's "over 100,000
real-world images"); the test split (CRC-VAL-HE-7K, another clinical centre) is the global test set. Images keep
their 28 x 28 unless ``data.options.size`` resizes them (bilinear, PIL).
"""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
from PIL import Image

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.image_specs import IMAGE_SPECS, image_options, require_layout
from lit_fl.data.registry import register_dataset
from lit_fl.data.rgb_images import resized_rgb, rgb_dataset, stack_rgb
from lit_fl.errors import ConfigError

FILE = "pathmnist.npz"
SPLITS = ("train", "val", "test")
_SPEC = IMAGE_SPECS["pathmnist"]


def read_split(arrays: np.lib.npyio.NpzFile, path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 ``(N, H, W, 3)`` images and int64 labels ``(N,)`` of one split, checked against MedMNIST's format."""
    keys = (f"{split}_images", f"{split}_labels")
    if any(key not in arrays.files for key in keys):
        raise ConfigError(f"data.root: {path}: no {' / '.join(k for k in keys if k not in arrays.files)}; expected "
                          f"{_SPEC.layout}")
    images, labels = arrays[keys[0]], arrays[keys[1]].reshape(-1)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3 or len(images) != len(labels):
        raise ConfigError(f"data.root: {path}: {keys[0]} is {images.dtype} {images.shape} with {len(labels)} labels; "
                          "expected uint8 (N, H, W, 3) images and N labels")
    if len(labels) and (labels.min() < 0 or labels.max() >= _SPEC.num_classes):
        raise ConfigError(f"data.root: {path}: {keys[1]} has labels outside 0..{_SPEC.num_classes - 1}")
    return images, labels.astype(np.int64)


def resize_all(images: np.ndarray, size: int) -> np.ndarray:
    """``images`` at ``size`` x ``size`` (unchanged when they are that size already)."""
    if images.shape[1:3] == (size, size):
        return images
    return stack_rgb((resized_rgb(Image.fromarray(image), size) for image in images), size)


@register_dataset("pathmnist")
def load_pathmnist(root: Path, download: bool, seed: int, **options: object) -> ImageDataset:
    """MedMNIST's train + val as the train split, its test split as the global test set (``seed`` unused)."""
    size = image_options("pathmnist", options)["size"]
    require_layout("pathmnist", root, download)
    path = Path(root).expanduser().resolve() / FILE
    try:
        with np.load(path, allow_pickle=False) as arrays:
            train, val, test = (read_split(arrays, path, split) for split in SPLITS)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as err:
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"data.root: {path}: cannot be read as MedMNIST's .npz ({type(err).__name__}: {err}); "
                          f"expected {_SPEC.layout}") from err
    train_x = resize_all(np.concatenate([train[0], val[0]]), size)
    return rgb_dataset("pathmnist", train_x, np.concatenate([train[1], val[1]]), resize_all(test[0], size), test[1],
                       _SPEC.num_classes)
