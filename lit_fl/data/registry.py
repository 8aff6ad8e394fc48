"""Dataset registry: ``@register_dataset("name")`` adds a loader, :func:`load_dataset` builds by name.

The built-in datasets are known by name without importing their modules (:data:`BUILTIN`): a config names and
checks a dataset without importing torch; the module that registers its loader is imported on first load.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lit_fl.data.image_specs import IMAGE_SPECS
from lit_fl.data.options import check_options
from lit_fl.data.torchvision_specs import SPECS
from lit_fl.errors import ConfigError
from lit_fl.registry import Registry

if TYPE_CHECKING:
    from lit_fl.data.dataset import ImageDataset

DatasetLoader = Callable[..., "ImageDataset"]
#: dataset name -> ``loader(root, download, seed, **options)``
DATASETS: Registry[DatasetLoader] = Registry("dataset")

#: the TFF/FedJAX federated datasets (their own clients: ``data.partition: natural``) -> the module of the loader;
#: their loaders take ``num_clients`` and read only the clients drawn
#: (:func:`lit_fl.federation.builder.load_configured`)
FEDERATED: dict[str, str] = {
    "femnist": "lit_fl.data.federated_images",
    "fed_cifar100": "lit_fl.data.federated_images",
    "shakespeare": "lit_fl.data.shakespeare",
    "stackoverflow": "lit_fl.data.stackoverflow",
}
#: built-in dataset name -> the module that registers its loader
BUILTIN: dict[str, str] = {
    "mnist5k": "lit_fl.data.bundled",
    "digits": "lit_fl.data.bundled",
    "synthetic": "lit_fl.data.synthetic",
    **dict.fromkeys(SPECS, "lit_fl.data.torchvision_sets"),
    **dict.fromkeys(("caltech101", "oxford_pets", "stanford_cars"), "lit_fl.data.torchvision_folders"),
    "tiny_imagenet": "lit_fl.data.tiny_imagenet",
    "pathmnist": "lit_fl.data.pathmnist",
    **FEDERATED,
}
assert set(IMAGE_SPECS) <= set(BUILTIN), "every image-file dataset has a loader module"


def register_dataset(name: str) -> Callable[[DatasetLoader], DatasetLoader]:
    """Decorator: register ``fn(root, download, seed, **options) -> ImageDataset`` under ``name``. A taken name is
    refused, naming both loaders, whatever the import order: a built-in's name first imports the built-in's module
    (:data:`BUILTIN`), which registers it, so a loader of your own named ``cifar10`` is refused even when lit-fl's
    would only have been imported later, on first load. The loader is returned (and registered) with its options
    checked against its signature on every call (:func:`~lit_fl.data.options.check_options`)."""
    if name in BUILTIN and name not in DATASETS:
        importlib.import_module(BUILTIN[name])  # from the built-in's own module (being imported): that module as is

    def decorate(loader: DatasetLoader) -> DatasetLoader:
        @functools.wraps(loader)
        def checked(root: Path, download: bool, seed: int, **options: Any) -> ImageDataset:
            check_options(name, loader, options)
            return loader(root, download, seed, **options)

        return DATASETS.add(name, checked, defined_by=loader)

    return decorate


def is_registered(name: str) -> bool:
    """Whether a loader for ``name`` is registered already: a user's own, or a built-in whose module was imported."""
    return name in DATASETS


def list_datasets() -> list[str]:
    """Every built-in and registered dataset name, sorted."""
    return sorted({*BUILTIN, *DATASETS})


def load_dataset(
    name: str, root: str | Path = "data", download: bool = False, seed: int = 0, **options: object
) -> ImageDataset:
    """Build the dataset ``name``; ``options`` go to its loader (e.g. ``num_classes`` for ``synthetic``)."""
    from lit_fl.user_code import is_user_spec, load_object

    if is_user_spec(name) and name not in DATASETS:  # module:loader of the user's own
        return load_object(name, "data.dataset")(root=Path(root), download=download, seed=seed, **options)
    if name not in DATASETS and name in BUILTIN:
        importlib.import_module(BUILTIN[name])  # registers the loader
    check_dataset_name(name, "data.dataset")
    return DATASETS[name](root=Path(root), download=download, seed=seed, **options)


def check_dataset_name(name: str, key: str, also: str = "") -> None:
    """``name`` (of ``data.dataset``, ``data.proxy.dataset``) is a built-in or registered dataset; ``also`` adds
    the other values ``key`` takes to the message."""
    if name not in DATASETS and name not in BUILTIN:
        raise ConfigError(f"{key}: unknown dataset {name!r}; allowed: {', '.join(list_datasets())}{also}")
