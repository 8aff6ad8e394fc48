"""Exact identity of a model's weights: a BLAKE2b-256 digest of every tensor's name, dtype, shape and bytes.

Two models with the same digest hold the same weights (a collision would need 2^128 work), so the evaluator
can evaluate a set of weights once however many clients hold it: every member of a cluster after FedAvg, a
peak model equal to its regular model, a model received unchanged. Hashing reads each byte once: it costs
about as much as one copy of the weights, far less than one forward pass over a test set. The memory layout
does not matter (a channels-last copy of the same values has the same digest).
"""

from __future__ import annotations

import hashlib

import torch
from torch import nn

Fingerprint = bytes


@torch.no_grad()
def fingerprint(model: nn.Module) -> Fingerprint:
    """The digest of ``model.state_dict()`` (parameters and persistent buffers)."""
    digest = hashlib.blake2b(digest_size=32)
    for name, tensor in model.state_dict().items():
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)};".encode())
        data = tensor.detach().to("cpu").contiguous().reshape(-1)
        digest.update(data.view(torch.uint8).numpy() if data.numel() else b"")
    return digest.digest()
