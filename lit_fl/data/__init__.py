"""Datasets (registry by name), partitioners and client batches. The package imports lazily
(:mod:`lit_fl.lazy`): the registry's names load without torch; torch loads when a dataset, partition or batch is
first used. (The partitioner itself is :func:`lit_fl.data.partition.partition`: ``lit_fl.data.partition`` is its
module.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.lazy import lazy_exports

_EXPORTS: dict[str, str] = {
    "ClientBatches": "lit_fl.data.batches",
    "ImageDataset": "lit_fl.data.dataset",
    **dict.fromkeys(("PARTITIONS", "ClientSplit", "class_proportions", "split_train_val"), "lit_fl.data.partition"),
    **dict.fromkeys(("list_datasets", "load_dataset", "register_dataset"), "lit_fl.data.registry"),
}
__all__ = [
    "PARTITIONS",
    "ClientBatches",
    "ClientSplit",
    "ImageDataset",
    "class_proportions",
    "list_datasets",
    "load_dataset",
    "register_dataset",
    "split_train_val",
]

if TYPE_CHECKING:
    from lit_fl.data.batches import ClientBatches
    from lit_fl.data.dataset import ImageDataset
    from lit_fl.data.partition import PARTITIONS, ClientSplit, class_proportions, split_train_val
    from lit_fl.data.registry import list_datasets, load_dataset, register_dataset

__getattr__, __dir__ = lazy_exports(__name__, globals(), _EXPORTS)
