"""Exact identity of a model's weights: a BLAKE2b-256 digest of every tensor's name, dtype, shape and bytes; and
the :func:`stamp` that says, without reading a byte, whether a model may have changed since it was last hashed.

Two models with the same digest hold the same weights (a collision would need 2^128 work), so the evaluator
can evaluate a set of weights once however many clients hold it: every member of a cluster after FedAvg, a
peak model equal to its regular model, a model received unchanged. Hashing reads each byte once: it costs
about as much as one copy of the weights, far less than one forward pass over a test set. The memory layout
does not matter (a channels-last copy of the same values has the same digest).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Sequence

import torch
from torch import nn
from torch.utils.weak import WeakIdKeyDictionary

Fingerprint = bytes
#: per parameter and buffer: ``(serial, data_ptr, version counter)``
Stamp = tuple[tuple[int, int, int], ...]

_serials: WeakIdKeyDictionary = WeakIdKeyDictionary()  # tensor -> its serial number (while it lives)
_next_serial = itertools.count()


def _serial(tensor: torch.Tensor) -> int:
    """A number no other tensor of this process ever gets (``id`` and addresses are reused after a free)."""
    serial = _serials.get(tensor)
    if serial is None:
        serial = _serials[tensor] = next(_next_serial)
    return serial


def stamp(model: nn.Module) -> Stamp:
    """A witness of the model's current weights that costs no kernel: every parameter's and buffer's identity (a
    serial number), storage address and autograd version counter. PyTorch bumps a tensor's version counter on
    every in-place change (an optimizer step, ``load_state_dict``, ``copy_``, ``mul_`` under ``no_grad``), and
    replacing a tensor changes its identity or address; so equal stamps mean unchanged weights, whatever code
    changed them. The one exception is writing through ``.data`` (``p.data.mul_(2)``), which PyTorch hides from
    version counters (and from autograd): write under ``torch.no_grad()`` instead. A changed stamp may still hold
    the same weights (the fingerprint decides)."""
    return tuple((_serial(t), t.data_ptr(), t._version) for t in (*model.parameters(), *model.buffers()))


@torch.no_grad()
def fingerprint(model: nn.Module) -> Fingerprint:
    """The digest of ``model.state_dict()`` (parameters and persistent buffers)."""
    return fingerprints([model])[0]


@torch.no_grad()
def fingerprints(models: Sequence[nn.Module]) -> list[Fingerprint]:
    """:func:`fingerprint` of each model, their bytes brought to the host in one transfer per device (on a GPU,
    one wait for the device however many models and tensors; a copy per tensor was a wait each)."""
    layouts: list[list[tuple[str, torch.dtype, tuple[int, ...], int]]] = []
    parts: dict[torch.device, list[torch.Tensor]] = {}
    for model in models:
        layout = []
        for name, tensor in model.state_dict().items():
            data = tensor.detach().contiguous().reshape(-1)
            layout.append((name, tensor.dtype, tuple(tensor.shape), data.numel() * data.element_size()))
            if data.numel():
                parts.setdefault(data.device, []).append(data.view(torch.uint8))
        layouts.append(layout)
    host = {device: torch.cat(chunks).cpu().numpy() for device, chunks in parts.items()}
    offsets = dict.fromkeys(host, 0)
    out = []
    for model, layout in zip(models, layouts):
        digest = hashlib.blake2b(digest_size=32)
        for (name, dtype, shape, size), tensor in zip(layout, model.state_dict().values()):
            digest.update(f"{name}:{dtype}:{shape};".encode())
            if size:
                start = offsets[tensor.device]
                digest.update(host[tensor.device][start : start + size])
                offsets[tensor.device] = start + size
        out.append(digest.digest())
    return out
