"""Small federations on synthetic data for fast algorithm tests."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.state import Federation


def tiny_federation(
    num_clients: int = 6,
    pool: Sequence[str] = ("cnn_4_8", "cnn_8"),
    seed: int = 0,
    partition: str = "dirichlet",
    beta: float = 0.5,
    num_classes: int = 4,
) -> Federation:
    """``num_clients`` clients over 400 synthetic 1x8x8 images of ``num_classes`` classes."""
    options = {"num_classes": num_classes, "input_shape": (1, 8, 8), "num_train": 400, "num_test": 100}
    data = DataConfig(dataset="synthetic", num_clients=num_clients, partition=partition, beta=beta, options=options)
    dataset = load_dataset("synthetic", seed=seed, **options)
    return build_federation(dataset, data, ModelsConfig(pool=list(pool)), seed)


def snapshot(federation: Federation) -> list[dict[str, torch.Tensor]]:
    """A deep copy of every client's regular weights."""
    return [{k: v.detach().clone() for k, v in c.model.state_dict().items()} for c in federation.clients]


def same_weights(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return all(torch.equal(a[k], b[k]) for k in a)


def full_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Parameters AND buffers (running_mean/var, num_batches_tracked), cloned."""
    return {k: v.detach().clone() for k, v in model.state_dict().items()}
