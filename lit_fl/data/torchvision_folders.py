"""DFML's fine-grained datasets (sec. 4.1, Tables 5 and 7) read through torchvision's own classes, each image
decoded once with PIL and resized to ``data.options.size`` (:mod:`lit_fl.data.image_specs` says why 224):

* ``caltech101``: ``torchvision.datasets.Caltech101`` (101 categories, BACKGROUND_Google left out). It has no test
  split; DFML sec. 4.1: "For Caltech101, samples are first split 80:20, where the 20% represents the global test
  set". The split is stratified (20% of every category, so each of the 101 is tested) and drawn by
  ``data.options.split_seed`` (default 0), not the run's seed: every run of a sweep is tested on the same images.
* ``oxford_pets``: ``torchvision.datasets.OxfordIIITPet``, 37 breeds, its ``trainval`` split for training and
  ``test`` as the global test set.
* ``stanford_cars``: ``torchvision.datasets.StanfordCars``, 196 models, its ``train`` and ``test`` splits
  (torchvision can no longer download it).

The class count is the one torchvision reads from the files (101, 37 and 196 for the real datasets). Missing files
are one :class:`DatasetNotFoundError` naming the expected layout; a file that cannot be read is one
:class:`ConfigError` naming it.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

from lit_fl.data.bundled import stratified_split
from lit_fl.data.dataset import ImageDataset
from lit_fl.data.image_specs import IMAGE_SPECS, image_options, require_layout
from lit_fl.data.registry import register_dataset
from lit_fl.data.rgb_images import resized_rgb, rgb_dataset, stack_rgb
from lit_fl.data.torchvision_sets import DatasetDownloadError
from lit_fl.errors import DatasetNotFoundError

#: the fraction of Caltech101 held out as the global test set (DFML sec. 4.1)
CALTECH101_TEST_FRACTION = 0.2


def _open(name: str, root: Path, download: bool, build: Callable[[], Any]) -> Any:
    """The torchvision dataset object ``build()``, its errors turned into one line."""
    spec = IMAGE_SPECS[name]
    require_layout(name, root, download)
    try:
        with spec.schema.reading(root, (ValueError,), f"{spec.title}: an annotation file cannot be read"):
            return build()  # a malformed annotation line or .mat file: a ValueError
    except (OSError, RuntimeError) as err:  # URLError is an OSError; torchvision raises RuntimeError when absent
        if download:
            raise DatasetDownloadError(
                f"data.download: {spec.title} download to {root} failed ({type(err).__name__}: {err}); check the "
                f"network and retry, or put {spec.layout} there and run with `--data.download false`") from err
        raise DatasetNotFoundError(f"data.root: {spec.title} not readable under {root} ({err}); expected "
                                   f"{spec.layout}") from err


def _decode(name: str, dataset: Any, size: int) -> tuple[np.ndarray, np.ndarray]:
    """Every image of a torchvision dataset (whose ``transform`` is :func:`resized_rgb`) and its label."""
    images, labels = [], []
    spec = IMAGE_SPECS[name]
    for index in range(len(dataset)):
        with spec.schema.reading(getattr(dataset, "root", spec.title), (OSError, ValueError),  # PIL names the file
                                 f"{spec.title} image {index} cannot be read"):
            image, label = dataset[index]
        images.append(image)
        labels.append(int(label))
    return stack_rgb(images, size), np.asarray(labels, dtype=np.int64)


def _resize(size: int) -> Callable[[Any], np.ndarray]:
    return partial(resized_rgb, size=size)


@register_dataset("caltech101")
def load_caltech101(root: Path, download: bool, seed: int, **options: object) -> ImageDataset:
    """Caltech101 at ``size`` x ``size``, split 80:20 (stratified, ``split_seed``) into train and global test."""
    import torchvision.datasets as tvd  # lazy: registering the loaders stays cheap

    chosen = image_options("caltech101", options)
    root = Path(root).expanduser().resolve()
    dataset = _open("caltech101", root, download, lambda: tvd.Caltech101(
        str(root), target_type="category", transform=_resize(chosen["size"]), download=download))
    images, labels = _decode("caltech101", dataset, chosen["size"])
    train, test = stratified_split(labels, CALTECH101_TEST_FRACTION, chosen["split_seed"])
    return rgb_dataset("caltech101", images[train], labels[train], images[test], labels[test],
                       len(dataset.categories))


def _two_splits(name: str, root: Path, download: bool, options: dict[str, object],
                build: Callable[[str, Callable[[Any], np.ndarray]], Any], splits: tuple[str, str]) -> ImageDataset:
    """A dataset whose torchvision class has a train and a test split (``build(split, transform)``)."""
    chosen = image_options(name, options)
    root = Path(root).expanduser().resolve()
    datasets = [_open(name, root, download, partial(build, split, _resize(chosen["size"]))) for split in splits]
    (train_x, train_y), (test_x, test_y) = (_decode(name, dataset, chosen["size"]) for dataset in datasets)
    return rgb_dataset(name, train_x, train_y, test_x, test_y, len(datasets[0].classes))


@register_dataset("oxford_pets")
def load_oxford_pets(root: Path, download: bool, seed: int, **options: object) -> ImageDataset:
    """Oxford-IIIT Pet at ``size`` x ``size``: ``trainval`` for training, ``test`` as the global test set."""
    import torchvision.datasets as tvd

    def build(split: str, transform: Callable[[Any], np.ndarray]) -> Any:
        return tvd.OxfordIIITPet(str(Path(root).expanduser().resolve()), split=split, target_types="category",
                                 transform=transform, download=download)

    return _two_splits("oxford_pets", root, download, options, build, ("trainval", "test"))


@register_dataset("stanford_cars")
def load_stanford_cars(root: Path, download: bool, seed: int, **options: object) -> ImageDataset:
    """Stanford Cars at ``size`` x ``size``: its ``train`` and ``test`` splits (files copied by hand)."""
    import torchvision.datasets as tvd

    def build(split: str, transform: Callable[[Any], np.ndarray]) -> Any:
        return tvd.StanfordCars(str(Path(root).expanduser().resolve()), split=split, transform=transform)

    return _two_splits("stanford_cars", root, download, options, build, ("train", "test"))
