"""Dataset registry: ``@register_dataset("name")`` adds a loader, :func:`load_dataset` builds by name.

The built-in datasets are known by name without importing their modules (:data:`BUILTIN`): a config names and
checks a dataset without importing torch; the module that registers its loader is imported on first load.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from lit_fl.data.torchvision_specs import SPECS
from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    from lit_fl.data.dataset import ImageDataset

DatasetLoader = Callable[..., "ImageDataset"]
_DATASETS: dict[str, DatasetLoader] = {}

#: built-in dataset name -> the module that registers its loader
BUILTIN: dict[str, str] = {
    "mnist5k": "lit_fl.data.bundled",
    "digits": "lit_fl.data.bundled",
    "synthetic": "lit_fl.data.synthetic",
    **dict.fromkeys(SPECS, "lit_fl.data.torchvision_sets"),
}


def register_dataset(name: str) -> Callable[[DatasetLoader], DatasetLoader]:
    """Register ``fn(root, download, seed, **options) -> ImageDataset`` under ``name``."""

    def wrap(fn: DatasetLoader) -> DatasetLoader:
        _DATASETS[name] = fn
        return fn

    return wrap


def is_registered(name: str) -> bool:
    """Whether a loader for ``name`` is registered already: a user's own, or a built-in whose module was imported."""
    return name in _DATASETS


def list_datasets() -> list[str]:
    """Every built-in and registered dataset name, sorted."""
    return sorted({*BUILTIN, *_DATASETS})


def load_dataset(
    name: str, root: str | Path = "data", download: bool = False, seed: int = 0, **options: object
) -> ImageDataset:
    """Build the dataset ``name``; ``options`` go to its loader (e.g. ``num_classes`` for ``synthetic``)."""
    from lit_fl.user_code import is_user_spec, load_object

    if is_user_spec(name) and name not in _DATASETS:  # module:loader of the user's own
        return load_object(name, "data.dataset")(root=Path(root), download=download, seed=seed, **options)
    if name not in _DATASETS and name in BUILTIN:
        importlib.import_module(BUILTIN[name])  # registers the loader
    if name not in _DATASETS:
        raise ConfigError(f"data.dataset: unknown dataset {name!r}; allowed: {', '.join(list_datasets())}")
    return _DATASETS[name](root=Path(root), download=download, seed=seed, **options)
