"""Knowledge codistillation's distillation data (papers/codistillation.txt sec. 2, C.1, Fig. 4): batches of the
unlabeled held-out split, or of ``data.proxy.size`` samples of it, with the paper's optional flips and mixup."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from torch import Tensor

    from lit_fl.federation.state import Federation


def distill_batches(federation: Federation, steps: int, batch_size: int,
                    augment: bool) -> Iterator[tuple[Tensor, Tensor]]:
    """``steps`` shuffled batches of ``batch_size`` of the distillation set (``federation.proxy_idx``: the held-out
    slice, or ``data.proxy.size`` samples of it; epochs repeat as needed), through :func:`flip_and_mixup` when
    ``augment``. The labels are carried along but never used."""
    from lit_fl.data.batches import ClientBatches

    data, idx = federation.data, federation.proxy_idx
    assert idx is not None  # setup refuses another dataset's proxy
    per_epoch = -(-len(idx) // batch_size)
    batches = ClientBatches(
        data.train_x,
        data.train_y,
        idx,
        batch_size,
        federation.rng.data_order,
        epochs=-(-steps // per_epoch),
        augment=data.augment,
        black=data.black,
    )
    out = islice(iter(batches), steps)
    if augment:
        seed = int(federation.rng.algorithm.integers(2**62))
        return flip_and_mixup(out, seed)
    return out


def flip_and_mixup(batches: Iterator[tuple[Tensor, Tensor]], seed: int) -> Iterator[tuple[Tensor, Tensor]]:
    """Paper C.1 on distillation data: random horizontal and vertical flips per sample, then mixup with
    ``lambda ~ Beta(2, 2)`` per batch. Draws on CPU from ``seed`` (identical on every device)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    for x, y in batches:
        n = len(x)
        h = (torch.rand(n, generator=g) < 0.5).to(x.device).view(-1, 1, 1, 1)
        v = (torch.rand(n, generator=g) < 0.5).to(x.device).view(-1, 1, 1, 1)
        x = torch.where(h, x.flip(3), x)
        x = torch.where(v, x.flip(2), x)
        # Beta(2, 2) from the same generator: the 2nd-smallest of 3 uniforms follows Beta(2, 2)
        lam = float(torch.rand(3, generator=g).sort().values[1])
        perm = torch.randperm(n, generator=g).to(x.device)
        yield lam * x + (1.0 - lam) * x[perm], y
