"""Domains of a dataset's samples: a label per train and test sample naming the part of the data it comes from
(StackOverflow's post ``type``, ``question`` or ``answer``, with ``data.options.domains: type``).

The knowledge codistillation paper's domain-shifted pools (papers/codistillation.txt sec. 3.3, Table 2) train the
high-capacity pool on questions only and the low-capacity pool on answers only, distil on the mixed held-out data
and evaluate each server model on the whole test set ("mixed") and on its questions and its answers. A method
restricts a pool to one domain with :meth:`Domains.train_subset` (codistillation's ``algorithm.pool_domains``);
evaluation reports ``server_acc/<model>/<domain>`` on each domain's test samples (:meth:`Domains.test_subset`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from lit_fl.errors import ConfigError


@dataclass(frozen=True)
class Domains:
    """``names[train[i]]`` is train sample ``i``'s domain, ``names[test[j]]`` test sample ``j``'s."""

    names: tuple[str, ...]
    train: np.ndarray
    test: np.ndarray

    def __post_init__(self) -> None:
        for split in (self.train, self.test):
            if split.ndim != 1 or (len(split) and not 0 <= int(split.min()) <= int(split.max()) < len(self.names)):
                raise ValueError(f"domains: every sample needs the index of one of {self.names}")

    @classmethod
    def from_labels(cls, names: tuple[str, ...], train: np.ndarray, test: np.ndarray) -> Domains:
        """Domains from each sample's name (``train``/``test``: arrays of names, each one of ``names``)."""
        return cls(names, _codes(names, train), _codes(names, test))

    def index(self, name: str, key: str) -> int:
        """The position of domain ``name``; one line naming ``key`` and the domains when there is none."""
        if name not in self.names:
            raise ConfigError(f"{key}: {name!r} is not a domain of the data; allowed: {', '.join(self.names)}")
        return self.names.index(name)

    def train_subset(self, indices: Tensor, name: str, key: str) -> Tensor:
        """The train ``indices`` whose samples are of domain ``name`` (in the same order)."""
        mask = torch.from_numpy(self.train == self.index(name, key))
        return indices[mask[indices.cpu()].to(indices.device)]

    def test_subset(self, name: str) -> np.ndarray:
        """The positions of the test samples of domain ``name``."""
        return np.flatnonzero(self.test == self.index(name, "domain"))


def _codes(names: tuple[str, ...], labels: np.ndarray) -> np.ndarray:
    codes = np.full(len(labels), -1, dtype=np.int64)
    for k, name in enumerate(names):
        codes[np.asarray(labels) == name] = k
    if (codes < 0).any():
        raise ValueError(f"domains: a sample's domain is not one of {names}")
    return codes
