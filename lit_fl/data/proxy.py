"""Public (proxy) data: unlabeled inputs on the server, for the distillation baselines of FedORION (papers/fedorion.txt
sec. 4: FedMD, KT-pFL, FedDF, DS-FL, FDmeta, FedKEMF); docs/baselines.md "Proxy data (data.proxy)".

``data.proxy`` names where the inputs come from:

* ``dataset: null`` (default): the held-out slice of the federation's own train split (``data.server_fraction``),
  which no client holds;
* ``dataset: NAME``: the train split of a second dataset of the registry (or ``module:loader``), e.g. CIFAR-100
  for CIFAR-10 (FedORION sec. 4: "For CIFAR10, we use CIFAR100 as the proxy dataset for all the baselines").
  Its inputs must have the federation's input shape.

``size`` samples are drawn from that source without replacement by the partition seed (``null``: all of it); from the
held-out slice, :func:`held_out_proxy_idx` gives their train indices (codistillation's distillation set). Labels
are never kept: :attr:`Federation.proxy <lit_fl.federation.state.Federation.proxy>` is the ``(size, C, H, W)``
tensor of inputs only, on the models' device and memory layout; :func:`proxy_batches` shuffles it into batches
from ``federation.rng.data_order`` (checkpointed, so a resumed run draws the same batches).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from lit_fl.constraints import Bounds
from lit_fl.data.proxy_config import PROXY_STREAM, ProxyConfig, as_proxy_config
from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import Tensor

    from lit_fl.data.dataset import ImageDataset

__all__ = ["PROXY_STREAM", "ProxyConfig", "as_proxy_config", "build_proxy", "draw", "held_out_proxy_idx",
           "proxy_batches"]


def draw(num_available: int, size: int | None, seed: int, source: str) -> np.ndarray:
    """Positions ``0..num_available - 1`` of the ``size`` proxy samples (sorted; all when ``size`` is None), drawn
    from stream :data:`PROXY_STREAM` of the partition seed."""
    import numpy as np

    if size is None:
        return np.arange(num_available)
    available = Bounds(1, num_available, note=f"({source} has {num_available} samples; null for all)")
    available.check("data.proxy.size", size)
    rng = np.random.default_rng([seed, PROXY_STREAM])
    return np.sort(rng.choice(num_available, size=size, replace=False))


def held_out_proxy_idx(proxy: ProxyConfig, server_idx: np.ndarray, seed: int) -> np.ndarray | None:
    """The train indices of the proxy samples when the proxy is the held-out slice (``data.proxy.dataset: null``):
    ``size`` of ``server_idx`` drawn by :func:`draw` (all of it, in order, for ``size: null``); None when the proxy
    is another dataset's."""
    if proxy.dataset is not None:
        return None
    if len(server_idx) == 0:
        if proxy.size is not None:
            raise ConfigError("data.proxy.size: the proxy is the held-out slice (data.proxy.dataset: null) and "
                              "data.server_fraction is 0; set data.server_fraction > 0 or data.proxy.dataset")
        return server_idx
    return server_idx[draw(len(server_idx), proxy.size, seed, "the held-out slice (data.server_fraction)")]


def build_proxy(proxy: ProxyConfig, dataset: ImageDataset, server_idx: np.ndarray, seed: int, root: str = "data",
                download: bool = False, channels_last: bool = False) -> Tensor:
    """The proxy inputs ``(size, C, H, W)`` on ``dataset``'s device, channels-last when the federation's images are
    (an empty tensor when the source is the held-out slice and ``data.server_fraction`` is 0)."""
    import torch

    device = dataset.train_x.device
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    held_out = held_out_proxy_idx(proxy, server_idx, seed)
    if held_out is not None:
        if len(held_out) == 0:
            return dataset.train_x[:0].clone()
        idx = torch.as_tensor(held_out, dtype=torch.long, device=device)
        return dataset.train_x[idx].contiguous(memory_format=fmt)
    from lit_fl.data.registry import load_dataset

    other = load_dataset(proxy.dataset, root, download, seed, **proxy.options)
    if other.input_shape != dataset.input_shape:
        raise ConfigError(f"data.proxy.dataset: {proxy.dataset} has inputs of shape {_shape(other.input_shape)}, "
                          f"the federation's {dataset.name} {_shape(dataset.input_shape)}; allowed: a dataset of "
                          f"shape {_shape(dataset.input_shape)}")
    picked = draw(len(other.train_x), proxy.size, seed, f"{proxy.dataset}'s train split")
    x = other.train_x[torch.as_tensor(picked, dtype=torch.long)]
    return x.to(device).contiguous(memory_format=fmt)


def proxy_batches(inputs: Tensor, batch_size: int, steps: int, generator: torch.Generator) -> Iterator[Tensor]:
    """``steps`` batches of ``batch_size`` proxy inputs: epochs of a fresh permutation from ``generator`` (CPU),
    the last batch of an epoch possibly smaller; empty when there is no proxy input."""
    import torch

    n = len(inputs)
    done = 0
    while n and done < steps:
        order = torch.randperm(n, generator=generator).to(inputs.device)
        for start in range(0, n, batch_size):
            if done == steps:
                return
            yield inputs[order[start:start + batch_size]]
            done += 1


def _shape(shape: tuple[int, ...]) -> str:
    return "x".join(str(s) for s in shape)
