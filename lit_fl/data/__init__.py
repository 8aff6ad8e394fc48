"""Datasets (registry by name), partitioners and client batches. The package imports lazily
(:mod:`lit_fl.lazy`): the registry's names load without torch; torch loads when a dataset, partition or batch is
first used. (The partitioner itself is :func:`lit_fl.data.partition.partition`: ``lit_fl.data.partition`` is its
module.)"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.lazy import lazy_exports

if TYPE_CHECKING:
    from lit_fl.data.batches import ClientBatches
    from lit_fl.data.dataset import ImageDataset
    from lit_fl.data.partition import PARTITIONS, ClientSplit, class_proportions, split_train_val
    from lit_fl.data.registry import list_datasets, load_dataset, register_dataset

__getattr__, __dir__, __all__ = lazy_exports(globals())
