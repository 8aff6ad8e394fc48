"""Dataset registry: ``@register_dataset("name")`` adds a loader, :func:`load_dataset` builds by name."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from lit_fl.data.dataset import ImageDataset
from lit_fl.errors import ConfigError

DatasetLoader = Callable[..., ImageDataset]
_DATASETS: dict[str, DatasetLoader] = {}


def register_dataset(name: str) -> Callable[[DatasetLoader], DatasetLoader]:
    """Register ``fn(root, download, seed, **options) -> ImageDataset`` under ``name``."""

    def wrap(fn: DatasetLoader) -> DatasetLoader:
        _DATASETS[name] = fn
        return fn

    return wrap


def list_datasets() -> list[str]:
    """Every registered dataset name, sorted."""
    _import_builtin()
    return sorted(_DATASETS)


def load_dataset(
    name: str, root: str | Path = "data", download: bool = False, seed: int = 0, **options: object
) -> ImageDataset:
    """Build the dataset ``name``; ``options`` go to its loader (e.g. ``num_classes`` for ``synthetic``)."""
    _import_builtin()
    if name not in _DATASETS:
        raise ConfigError(f"data.dataset: unknown dataset {name!r}; allowed: {', '.join(sorted(_DATASETS))}")
    return _DATASETS[name](root=Path(root), download=download, seed=seed, **options)


def _import_builtin() -> None:
    from lit_fl.data import bundled, synthetic, torchvision_sets  # noqa: F401  (registers on import)
