"""The server's model of a server method whose clients have other architectures (FedORION's global model, FedKEMF's
knowledge network, FDmeta's and codistillation's server models): which architecture, and a fresh one of it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.models import create_model, num_parameters

if TYPE_CHECKING:
    import torch
    from torch import nn

    from lit_fl.federation.state import Federation


def smallest_architecture(federation: Federation) -> str:
    """The federation's architecture with the fewest trainable parameters (first in client order on ties)."""
    sizes: dict[str, int] = {}
    for client in federation.clients:
        sizes.setdefault(client.arch, num_parameters(client.model))
    return min(sizes, key=sizes.__getitem__)


def memory_format(model: nn.Module) -> torch.memory_format:
    """The layout of a model's 4-D weights (channels-last when the federation's models use it)."""
    import torch

    for p in model.parameters():
        if p.dim() == 4:
            channels_last = p.is_contiguous(memory_format=torch.channels_last)
            return torch.channels_last if channels_last else torch.contiguous_format
    return torch.contiguous_format


def fresh_model(federation: Federation, arch: str, seed: int) -> nn.Module:
    """A new ``arch`` for the federation's data, initialised from ``seed`` (the global torch stream is left as it
    was), on the clients' device and in their layout."""
    import torch

    first = federation.clients[0].model
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = create_model(arch, federation.data.input_shape, federation.num_classes)
    return model.to(next(first.parameters()).device, memory_format=memory_format(first))
