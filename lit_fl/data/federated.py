"""A federated dataset's splits read from its TFF/FedJAX SQLite files (:mod:`lit_fl.data.fedjax_sqlite`) into one
:class:`~lit_fl.data.dataset.ImageDataset` whose ``clients`` are the file's clients (``data.partition: natural``).

A loader names its files, the features it needs (each an :class:`~lit_fl.file_schema.Array`: its declared shape, checked
for every client by :func:`~lit_fl.data.fedjax_sqlite.check_examples`) and how one client's examples become ``(x, y)``
arrays (FedJAX's
``preprocess_client``/``preprocess_batch`` of the dataset); this module finds the files under ``data.root``, draws the
clients to read (:func:`~lit_fl.data.natural.select_clients`: a large file is read only for the drawn clients), and
concatenates the clients' arrays, each client holding a contiguous range of the train tensors.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from lit_fl.constraints import Bounds
from lit_fl.data.fedjax_sqlite import SQLITE, TABLE, Examples, FederatedSQLite, check_examples
from lit_fl.data.natural import NATURAL_STREAM, select_clients
from lit_fl.errors import DatasetNotFoundError
from lit_fl.file_schema import Array

#: where FedJAX publishes its files (``fedjax/datasets/*.py``)
FEDJAX_URL = "https://storage.googleapis.com/gresearch/fedjax"

#: one client's examples -> ``(x, y)`` arrays with one row per sample, or ``(x, y, domains)`` with each sample's
#: domain name (:mod:`lit_fl.data.domains`)
Preprocess = Callable[[str, Examples], tuple[np.ndarray, ...]]


@dataclass
class FederatedSplit:
    """One split's samples: ``x``, ``y`` and each client's rows (``clients[k]``, client id ``ids[k]``); ``domains``
    each sample's domain name where the loader's preprocessing gives them."""

    x: np.ndarray
    y: np.ndarray
    clients: tuple[np.ndarray, ...]
    ids: tuple[str, ...]
    domains: np.ndarray | None = None


def locate(root: Path, filename: str, url: str) -> Path:
    """``root/filename``, or one :class:`DatasetNotFoundError` line saying where to get it."""
    path = Path(root) / filename
    if not path.is_file():
        raise DatasetNotFoundError(f"data.root: {path} not found; expected the FedJAX file {filename} there "
                                   f"(get it from {url})")
    return path


def read_split(path: Path, features: Mapping[str, Array], preprocess: Preprocess, num_clients: int | None = None,
               seed: int = 0) -> FederatedSplit:
    """Every client of ``path`` (``num_clients=None``) or ``num_clients`` of them drawn by ``seed``, in file order;
    each client's examples hold the ``features`` as declared."""
    xs, ys, domains, ids = [], [], [], []
    with FederatedSQLite(path) as db:
        rows = None
        if num_clients is not None:
            every = db.rows()
            rows = [every[i] for i in select_clients(len(every), num_clients, seed, str(path))]
        for cid, examples in db.clients(rows):
            check_examples(path, cid, examples, features)
            x, y, *domain = preprocess(cid, examples)
            xs.append(x)
            ys.append(y)
            domains += domain
            ids.append(cid)
    SQLITE.require(path, bool(xs), f"the table {TABLE} has no client")
    bounds = np.cumsum([0, *(len(x) for x in xs)])
    clients = tuple(np.arange(a, b) for a, b in zip(bounds[:-1], bounds[1:]))
    labels = np.concatenate(domains) if domains else None
    return FederatedSplit(np.concatenate(xs), np.concatenate(ys), clients, tuple(ids), labels)


def sample_rows(split: FederatedSplit, size: int | None, seed: int, key: str) -> FederatedSplit:
    """The split's ``size`` samples drawn without replacement by ``seed`` (all of them for None), in order, as one
    client; the codistillation paper evaluates on 100,000 of StackOverflow's ~16M test examples (sec. 3, Table 3)."""
    if size is None:
        return split
    available = Bounds(1, len(split.x), note=f"(the split has {len(split.x)} samples; null for all)")
    available.check(f"data.options.{key}", size)
    rng = np.random.default_rng([seed, NATURAL_STREAM, 1])
    keep = np.sort(rng.choice(len(split.x), size=size, replace=False))
    domains = None if split.domains is None else split.domains[keep]
    return FederatedSplit(split.x[keep], split.y[keep], (np.arange(size),), ("sample",), domains)
