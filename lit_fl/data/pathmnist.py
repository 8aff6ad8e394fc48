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
from lit_fl.file_schema import Array

FILE = "pathmnist.npz"
SPLITS = ("train", "val", "test")
_SPEC = IMAGE_SPECS["pathmnist"]
#: MedMNIST's arrays of one split: uint8 ``(N, H, W, 3)`` images and their N labels (stored ``(N, 1)``)
IMAGES, LABELS = Array("uint8", (None, None, 3)), Array(classes=_SPEC.num_classes)
#: what cannot be read as an ``.npz`` (a truncated or foreign file)
NPZ_ERRORS = (OSError, ValueError, zipfile.BadZipFile, EOFError)


def read_split(arrays: np.lib.npyio.NpzFile, path: Path, split: str) -> tuple[np.ndarray, np.ndarray]:
    """uint8 ``(N, H, W, 3)`` images and int64 labels ``(N,)`` of one split, checked against MedMNIST's format."""
    images, labels = f"{split}_images", f"{split}_labels"
    found = {key: arrays[key] for key in (images, labels) if key in arrays.files}
    if labels in found:
        found[labels] = found[labels].reshape(-1)
    _SPEC.schema.arrays(path, found, {images: IMAGES, labels: LABELS}, same_length=True)
    return found[images], found[labels].astype(np.int64)


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
    with _SPEC.schema.opening(path, NPZ_ERRORS, "cannot be read as MedMNIST's .npz"), \
            np.load(path, allow_pickle=False) as arrays:
        train, val, test = (read_split(arrays, path, split) for split in SPLITS)
    train_x = resize_all(np.concatenate([train[0], val[0]]), size)
    return rgb_dataset("pathmnist", train_x, np.concatenate([train[1], val[1]]), resize_all(test[0], size), test[1],
                       _SPEC.num_classes)
