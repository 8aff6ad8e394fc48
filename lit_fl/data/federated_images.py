"""The federated image datasets of TFF/FedJAX, read from their SQLite files under ``data.root``:

* ``femnist`` (FedJAX ``emnist``): ``federated_emnist_{train,test}.sqlite``, 3,400 writers, 62 classes (with
  ``only_digits: true`` the ``federated_emnist_digitsonly_*`` files, 10 classes). Features ``pixels`` float32
  ``(N, 28, 28)`` and ``label``; the images are ``1 - pixels`` (FedJAX ``emnist.preprocess_batch``: TFF stores
  white digits on black inverted), ``1 x 28 x 28``, no further normalisation, no augmentation.
* ``fed_cifar100`` (FedJAX ``cifar100``, TFF's Pachinko-allocation split): ``federated_cifar100_{train,test}.sqlite``,
  500 train and 100 test clients of 100 images each. Features ``image`` uint8 ``(N, 32, 32, 3)`` and ``label``;
  normalised with FedJAX's ``CIFAR100_PIXELS_MEAN``/``_INVERSE_STDDEV``; training crops (4-pixel zero padding) and
  flips drawn as ``cifar100.preprocess_image`` draws them, one offset in 0..7 and one flip per batch
  (``augment: crop_flip_per_batch``; the codistillation paper, App. C.1: "the default settings in FedJAX").
  FedJAX writes these files from TFF's (``fedjax.datasets.cifar100.load_split``); lit-fl reads the written files.

The train file's clients are the dataset's clients (``data.partition: natural``); the test file is the global
test set (all its clients pooled).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from lit_fl.data.dataset import ImageDataset
from lit_fl.data.federated import FEDJAX_URL, FederatedSplit, locate, read_split
from lit_fl.data.fedjax_sqlite import Examples
from lit_fl.data.registry import register_dataset
from lit_fl.data.transforms import black_value, normalize
from lit_fl.file_schema import Array

#: FedJAX ``cifar100.CIFAR100_PIXELS_MEAN`` and ``1 / CIFAR100_PIXELS_INVERSE_STDDEV``
CIFAR100_MEAN, CIFAR100_STD = (0.4914, 0.4822, 0.4465), (0.2023, 0.1994, 0.2010)
#: the features every client of the files holds
EMNIST_FEATURES = {"pixels": Array(trailing=(28, 28)), "label": Array()}
CIFAR_FEATURES = {"image": Array(trailing=(32, 32, 3)), "label": Array()}


def _emnist_arrays(client: str, examples: Examples) -> tuple[np.ndarray, np.ndarray]:
    x = 1.0 - np.asarray(examples["pixels"], dtype=np.float32)[:, None]
    return x, np.asarray(examples["label"], dtype=np.int64)


def _cifar_arrays(client: str, examples: Examples) -> tuple[np.ndarray, np.ndarray]:
    return np.asarray(examples["image"], dtype=np.uint8), np.asarray(examples["label"], dtype=np.int64)


def _dataset(name: str, train: FederatedSplit, test: FederatedSplit, x_of, num_classes: int,  # noqa: ANN001
             **kwargs: object) -> ImageDataset:
    return ImageDataset(name, x_of(train.x), torch.from_numpy(train.y), x_of(test.x), torch.from_numpy(test.y),
                        num_classes, clients=train.clients, client_ids=train.ids, **kwargs)


@register_dataset("femnist")
def load_femnist(root: Path, download: bool, seed: int, only_digits: bool = False,
                 num_clients: int | None = None) -> ImageDataset:
    """Federated EMNIST by writer; ``num_clients`` of the train file's writers drawn by ``seed`` (None: all)."""
    stem = "federated_emnist_digitsonly" if only_digits else "federated_emnist"
    paths = [locate(root, f"{stem}_{split}.sqlite", f"{FEDJAX_URL}/emnist/{stem}_{split}.sqlite")
             for split in ("train", "test")]
    train = read_split(paths[0], EMNIST_FEATURES, _emnist_arrays, num_clients, seed)
    test = read_split(paths[1], EMNIST_FEATURES, _emnist_arrays)
    return _dataset("femnist", train, test, torch.from_numpy, 10 if only_digits else 62)


@register_dataset("fed_cifar100")
def load_fed_cifar100(root: Path, download: bool, seed: int, num_clients: int | None = None) -> ImageDataset:
    """TFF's federated CIFAR-100 (500 train clients); ``num_clients`` of them drawn by ``seed`` (None: all)."""
    paths = [locate(root, f"federated_cifar100_{split}.sqlite",
                    "fedjax.datasets.cifar100.load_split (it converts TFF's cifar100.sqlite.lzma)")
             for split in ("train", "test")]
    train = read_split(paths[0], CIFAR_FEATURES, _cifar_arrays, num_clients, seed)
    test = read_split(paths[1], CIFAR_FEATURES, _cifar_arrays)

    def images(x: np.ndarray) -> torch.Tensor:
        return normalize(torch.from_numpy(x).permute(0, 3, 1, 2).float() / 255.0, CIFAR100_MEAN, CIFAR100_STD)

    return _dataset("fed_cifar100", train, test, images, 100, augment="crop_flip_per_batch",
                    black=black_value(CIFAR100_MEAN, CIFAR100_STD))
