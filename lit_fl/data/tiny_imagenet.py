"""``tiny_imagenet``: Tiny-ImageNet (200 classes of 64 x 64 images; FedORION Table 2's TinyImagenet column), read
from the layout it is distributed in (``tiny-imagenet-200.zip``) under ``data.root``::

    tiny-imagenet-200/wnids.txt                        one WordNet id per line: the 200 classes, in label order
    tiny-imagenet-200/train/<wnid>/images/*.JPEG       500 training images per class
    tiny-imagenet-200/val/images/val_<i>.JPEG          10,000 validation images
    tiny-imagenet-200/val/val_annotations.txt          <file>\\t<wnid>\\t<x0>\\t<y0>\\t<x1>\\t<y1> per image

The test split of the archive has no labels, so the labelled validation split is the global test set (what
FedORION's "test set of the respective dataset" can be). Label ``k`` is the ``k``-th id of ``wnids.txt``. Images keep
their 64 x 64 (``data.options.size`` resizes them); grayscale ones are converted to RGB.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.image_specs import IMAGE_SPECS, image_options, require_layout
from lit_fl.data.registry import register_dataset
from lit_fl.data.rgb_images import resized_rgb, rgb_dataset, stack_rgb

BASE = "tiny-imagenet-200"
_SPEC = IMAGE_SPECS["tiny_imagenet"]
#: the layout under ``data.root`` (:attr:`~lit_fl.data.image_specs.ImageFileSpec.layout`), every file checked by it
LAYOUT = _SPEC.schema


def read_wnids(path: Path) -> list[str]:
    """The class ids of ``wnids.txt`` in file order (blank lines skipped); a repeated id is refused."""
    wnids = [line.strip() for line in LAYOUT.read_text(path).splitlines() if line.strip()]
    LAYOUT.require(path, len(set(wnids)) == len(wnids) > 0, f"{len(wnids)} lines with {len(set(wnids))} distinct "
                   "WordNet ids (one distinct id per line)")
    return wnids


def train_files(base: Path, wnids: list[str]) -> list[tuple[Path, int]]:
    """``(image, label)`` for every ``train/<wnid>/images/*.JPEG``, classes in ``wnids`` order, files sorted."""
    files = []
    for label, wnid in enumerate(wnids):
        folder = base / "train" / wnid / "images"
        images = sorted(folder.glob("*.JPEG"))
        LAYOUT.require(folder, bool(images), f"no *.JPEG training images of class {wnid}")
        files += [(image, label) for image in images]
    return files


def val_files(base: Path, wnids: list[str]) -> list[tuple[Path, int]]:
    """``(image, label)`` for every line of ``val/val_annotations.txt``, in file order."""
    annotations = base / "val" / "val_annotations.txt"
    label_of = {wnid: label for label, wnid in enumerate(wnids)}
    files = []
    for number, line in enumerate(LAYOUT.read_text(annotations).splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        LAYOUT.require(annotations, len(fields) >= 2 and fields[1] in label_of,
                       f"line {number} is {line[:80]!r}, not <file>\\t<wnid of wnids.txt>\\t<box>")
        files.append((base / "val" / "images" / fields[0], label_of[fields[1]]))
    return files


def decode(files: list[tuple[Path, int]], size: int) -> tuple[np.ndarray, np.ndarray]:
    """uint8 ``(N, size, size, 3)`` images and int64 labels; an unreadable or missing image is one line naming it."""
    images = []
    for path, _ in files:
        with LAYOUT.opening(path, (OSError, ValueError), "cannot be read as an image"), Image.open(path) as image:
            images.append(resized_rgb(image, size))
    return stack_rgb(images, size), np.asarray([label for _, label in files], dtype=np.int64)


@register_dataset("tiny_imagenet")
def load_tiny_imagenet(root: Path, download: bool, seed: int, **options: object) -> ImageDataset:
    """Tiny-ImageNet's train split and its labelled validation split (the global test set), ``seed`` unused."""
    size = image_options("tiny_imagenet", options)["size"]
    require_layout("tiny_imagenet", root, download)
    base = Path(root).expanduser().resolve() / BASE
    wnids = read_wnids(base / "wnids.txt")
    train_x, train_y = decode(train_files(base, wnids), size)
    test_x, test_y = decode(val_files(base, wnids), size)
    return rgb_dataset("tiny_imagenet", train_x, train_y, test_x, test_y, len(wnids))
