"""The server's model of a server method whose clients have other architectures (FedORION's global model, FedKEMF's
knowledge network, FDmeta's and codistillation's server models): which architecture, a fresh one of it, and the
checkpoint of a method that holds one (:class:`GlobalModelMethod`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lit_fl.algorithms.server import GLOBAL, check_checkpoint
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


def initial_global_model(federation: Federation, arch: str, seed_offset: int) -> nn.Module:
    """A copy of the first client's model of ``arch`` when a client has it (the builder initialises every
    architecture once for all its clients), else a fresh ``arch`` from the seed ``seed * 1000 + seed_offset``."""
    import copy

    same = [c for c in federation.clients if c.arch == arch]
    if same:
        return copy.deepcopy(same[0].model)
    return fresh_model(federation, arch, federation.seed * 1_000 + seed_offset)


class GlobalModelMethod:
    """What a server method with one server model of its own architecture (``global_arch``; None: the federation's
    smallest) shares: creating that model once (:meth:`setup_global_model`) and its checkpoint, the architecture,
    which a resumed config must build again. Mixed in before :class:`~lit_fl.algorithms.server.ServerAlgorithm`."""

    global_arch: str | None
    #: how a refused checkpoint names the model
    global_model_name = "the global model"

    def setup_global_model(self, federation: Federation, initial: Callable[[Federation, str], nn.Module]) -> str:
        """Resolve ``global_arch`` and put ``initial(federation, arch)`` on the server as :data:`GLOBAL` unless it
        is there (a resumed run); the architecture."""
        arch = self.global_arch = self.global_arch or smallest_architecture(federation)
        if GLOBAL not in federation.server:
            federation.server[GLOBAL] = initial(federation, arch)
        return arch

    def state_dict(self) -> dict[str, Any]:
        return {"global_arch": self.global_arch}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        check_checkpoint(f"{self.global_model_name} is", state["global_arch"], self.global_arch)
