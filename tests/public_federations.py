"""A tiny federation with unlabeled public data (``data.server_fraction``), and the hand-written pieces the FedMD and
DS-FL replays share: batches, heavy-ball SGD, the losses, all in float64."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch
from torch import Tensor, nn

from lit_fl.config import DataConfig, ModelsConfig
from lit_fl.data import load_dataset
from lit_fl.federation.builder import build_federation
from lit_fl.federation.state import Federation

#: float32 weights against a float64 replay of a few dozen steps on weights of magnitude <= 1: float32's relative
#: precision (6e-8) times a few dozen rounded operations per weight, with a margin of 10 (as tests/test_scaffold.py)
ATOL = 1e-5


def public_federation(num_clients: int = 4, pool: Sequence[str] = ("cnn_4_8", "cnn_8"), server_fraction: float = 0.25,
                      seed: int = 0) -> Federation:
    """``num_clients`` clients over 400 synthetic 1x8x8 images of 4 classes, ``server_fraction`` of them held out
    unlabeled (the public data)."""
    options = {"num_classes": 4, "input_shape": (1, 8, 8), "num_train": 400, "num_test": 100}
    data = DataConfig(dataset="synthetic", num_clients=num_clients, partition="dirichlet", beta=0.5,
                      options=options, server_fraction=server_fraction)
    dataset = load_dataset("synthetic", seed=seed, **options)
    return build_federation(dataset, data, ModelsConfig(pool=list(pool)), seed)


def drawn_selection(state: dict, n: int, count: int) -> list[int]:
    """The clients ``federation.rng.selection`` draws from ``state``: ``count`` of ``n`` without replacement, sorted."""
    rng = np.random.default_rng()
    rng.bit_generator.state = state
    return sorted(int(c) for c in rng.choice(n, size=count, replace=False))


def shuffled_batches(x: Tensor, y: Tensor, batch_size: int, epochs: int,
                     generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """Each epoch a fresh permutation of ``range(len(x))`` from ``generator``, cut into batches."""
    batches = []
    for _ in range(epochs):
        order = torch.randperm(len(x), generator=generator)
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batches.append((x[idx], y[idx]))
    return batches


def client_batches(fed: Federation, train_idx: Tensor, batch_size: int, epochs: int,
                   generator: torch.Generator) -> list[tuple[Tensor, Tensor]]:
    """A client's private batches (float64 inputs), drawn as :class:`ClientBatches` draws them."""
    batches = []
    for _ in range(epochs):
        order = train_idx[torch.randperm(len(train_idx), generator=generator)]
        for start in range(0, len(order), batch_size):
            idx = order[start:start + batch_size]
            batches.append((fed.data.train_x[idx].double(), fed.data.train_y[idx]))
    return batches


def hand_ce(z: Tensor, y: Tensor) -> Tensor:
    """``logsumexp(z) - z_y``, mean over the batch."""
    return (torch.logsumexp(z, dim=1) - z.gather(1, y[:, None])[:, 0]).mean()


def hand_l1(z: Tensor, t: Tensor) -> Tensor:
    """``mean_{i,c} |z_ic - t_ic|``."""
    return (z - t).abs().sum() / z.numel()


def hand_kl(z: Tensor, t: Tensor) -> Tensor:
    """``1/B sum_i sum_c t_ic (log t_ic - log softmax(z)_ic)`` with ``0 log 0 = 0``."""
    log_q = z - torch.logsumexp(z, dim=1, keepdim=True)
    return (torch.xlogy(t, t) - t * log_q).sum() / len(z)


def momentum_sgd(model: nn.Module, batches: list[tuple[Tensor, Tensor]], loss: Callable[[Tensor, Tensor], Tensor],
                 lr: float, momentum: float, weight_decay: float) -> None:
    """Heavy-ball SGD written out: ``d = g + wd * w``; ``b = d`` at the first step, ``b = momentum * b + d`` after;
    ``w <- w - lr * b``."""
    params = list(model.parameters())
    buffers: list[Tensor | None] = [None] * len(params)
    model.train()
    for x, y in batches:
        grads = torch.autograd.grad(loss(model(x), y), params)
        with torch.no_grad():
            for k, (p, g) in enumerate(zip(params, grads)):
                d = g + weight_decay * p
                buffers[k] = d.clone() if buffers[k] is None else momentum * buffers[k] + d
                p -= lr * buffers[k]


def assert_close(got: Tensor, want: Tensor, atol: float, what: str) -> None:
    torch.testing.assert_close(got.double(), want.double(), atol=atol, rtol=0, msg=lambda m: f"{what}: {m}")
