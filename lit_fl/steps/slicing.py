"""Functional partial training over state dicts (DFML A.3.3, Algorithm 3, Eq. 6-9).

Federated Dropout, HeteroFL and FedRolex train width-scaled copies of one architecture. The largest
participating model is the global model ``W_g``; every participant is a *sub-model* of it: for each tensor
of the participant's state dict with the same key in ``W_g``, every dimension is either

* **whole**: same size in both (image channels of the first layer, class outputs, kernel dims), or
* **scaled**: size ``n < J`` (``J`` = the size in ``W_g``); the participant's ``n`` entries along that
  dimension sit at an *index set* of ``n`` positions of ``0..J-1`` chosen by the method.

:func:`extract` cuts a participant out of ``W_g`` and :func:`aggregate` puts participants back (Eq. 6).

Index rule (consistency)
------------------------
A layer's input channels must follow the previous layer's output indices, and the layers of a residual
stage (ResNet) must share indices across the stage (``x + f(x)``). Both hold with one rule: **index sets are
keyed by the global dimension size J**. Within a round, every scaled dimension of global size ``J`` and
local size ``n`` gets the same set ``rule(J, n)``, in every tensor and every participant:

* HeteroFL (Eq. 8): ``arange(n)``;
* FedRolex (Eq. 9): ``(offset + arange(n)) % J``: a window rolling with the round, wrapping around ``J``;
* Federated Dropout (Eq. 7): one random permutation of ``0..J-1`` per ``J`` per round, drawn from the
  algorithm's generator; the set is its first ``n`` entries, sorted.

Coupled dimensions (a layer's outputs and the next layer's inputs, the channels of a residual stage, a
BatchNorm's channels) always have the same ``(J, n)``, hence the same index set. The consequence: layers
of equal global width are also sliced alike even when nothing couples them, e.g. Federated Dropout drops
the same channels in every 64-wide layer of a model and FedRolex windows of equal-width layers move in
lockstep; layers of different widths roll (mod their own ``J``) and drop independently. For a given ``J``
the sets of different ``n`` are prefixes of one ordering, so smaller participants sit inside larger ones
(HeteroFL, FedRolex and Federated Dropout alike), as in the paper's nested sub-models.

Views (how a model family declares reshapes)
--------------------------------------------
Some tensors must be reshaped before slicing so that a scaled axis is a dimension of its own, e.g. the
CNN classifier weight ``[classes, C*H*W]`` over the flattened feature map is viewed as ``[classes, C, H*W]``
(whole channel blocks are taken), or a ViT's fused qkv projection ``[3*inner, dim]`` as ``[3, inner, dim]``.
A view is a row-major reshape of the stored tensor; the participant's view has the same rank and each
dimension is its own size. A model declares views in either of two ways (first match wins):

1. a method on the model: ``partial_view(self, key: str, shape: tuple[int, ...]) -> tuple[int, ...] | None``
   (``None``: slice ``key`` as stored);
2. :func:`register_partial_view` ``(model_type, key_regex, fn)`` with ``fn(model, shape) -> view | None``,
   for classes one cannot edit (timm, vit-pytorch): the CNN classifier below is registered this way.

Without a view a tensor is sliced as stored.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor, nn

from lit_fl.models.cnn import CNN
from lit_fl.models.vit import attention_shape
from lit_fl.registry import Registry

Shape = tuple[int, ...]
#: ``rule(J, n) -> LongTensor`` of ``n`` distinct positions in ``0..J-1`` (the index set of a scaled dim).
IndexRule = Callable[[int, int], Tensor]
#: ``fn(model, stored_shape) -> view_shape | None``.
ViewFn = Callable[[nn.Module, Shape], "Shape | None"]

#: ``(model type, key regex)`` -> ``(model type, compiled regex, view function)``
PARTIAL_VIEWS: Registry[tuple[type, re.Pattern[str], ViewFn]] = Registry("slicing rule")


# -- views ----------------------------------------------------------------------------------------------


def register_partial_view(model_type: type, key_pattern: str) -> Callable[[ViewFn], ViewFn]:
    """Decorator: slice the tensors of ``model_type`` models whose state-dict key fully matches ``key_pattern`` in
    the view ``fn(model, stored_shape)`` (a row-major reshape; ``None`` = as stored). One rule per model type and
    pattern: a second is refused, naming both."""

    def decorate(fn: ViewFn) -> ViewFn:
        key = (f"{model_type.__module__}.{model_type.__qualname__}", key_pattern)
        PARTIAL_VIEWS.add(key, (model_type, re.compile(key_pattern), fn), defined_by=fn)
        return fn

    return decorate


def partial_view(model: nn.Module, key: str, shape: Sequence[int]) -> Shape:
    """The shape in which ``model``'s tensor ``key`` (stored as ``shape``) is sliced."""
    shape = tuple(int(s) for s in shape)
    view = None
    hook = getattr(model, "partial_view", None)
    if callable(hook):
        view = hook(key, shape)
    if view is None:
        for _, (model_type, pattern, fn) in PARTIAL_VIEWS.items():
            if isinstance(model, model_type) and pattern.fullmatch(key):
                view = fn(model, shape)
                if view is not None:
                    break
    if view is None:
        return shape
    view = tuple(int(s) for s in view)
    if math.prod(view) != math.prod(shape):
        raise ValueError(f"partial view of {key}: {view} does not hold the {math.prod(shape)} entries of {shape}")
    return view


def view_shapes(model: nn.Module) -> dict[str, Shape]:
    """Every state-dict key of ``model`` with the shape it is sliced in."""
    return {key: partial_view(model, key, t.shape) for key, t in model.state_dict().items()}


@register_partial_view(CNN, r"classifier\.weight")
def _cnn_classifier_view(model: nn.Module, shape: Shape) -> Shape:
    channels, height, width = model.feature_map
    return (shape[0], channels, height * width)


def _is_vit(model: nn.Module) -> bool:
    """vit-pytorch's ViT, recognised without importing vit-pytorch (seconds of import time)."""
    return type(model).__module__.startswith("vit_pytorch")


@register_partial_view(nn.Module, r".*\.to_qkv\.weight")
def _vit_qkv_view(model: nn.Module, shape: Shape) -> Shape | None:
    """Fused ``to_qkv`` weight ``[3 * heads * dim_head, dim]`` sliced per projection and per head."""
    if not _is_vit(model):
        return None
    heads, dim_head = attention_shape(shape[1])
    return (3, heads, dim_head, shape[1])


@register_partial_view(nn.Module, r".*\.to_out\.0\.weight")
def _vit_out_view(model: nn.Module, shape: Shape) -> Shape | None:
    """``to_out`` weight ``[dim, heads * dim_head]`` sliced per head."""
    if not _is_vit(model):
        return None
    heads, dim_head = attention_shape(shape[0])
    return (shape[0], heads, dim_head)



# -- index rules (Eq. 7-9) ------------------------------------------------------------------------------


def heterofl_indices(global_size: int, size: int) -> Tensor:
    """HeteroFL (Eq. 8): the first ``size`` positions."""
    return torch.arange(size)


def fedrolex_rule(offset: int) -> IndexRule:
    """FedRolex (Eq. 9): ``(offset + arange(n)) % J``, a window starting at ``offset mod J`` that wraps."""

    def rule(global_size: int, size: int) -> Tensor:
        return (offset + torch.arange(size)) % global_size

    return rule


class DropoutIndices:
    """Federated Dropout (Eq. 7): one random permutation of ``0..J-1`` per global size ``J`` (drawn from
    ``rng`` in increasing ``J`` for the ``global_sizes`` given, lazily for any other); the index set of size
    ``n`` is its first ``n`` entries, sorted. Make one per round."""

    def __init__(self, rng: np.random.Generator, global_sizes: Iterable[int] = ()) -> None:
        self.rng = rng
        self.orders: dict[int, Tensor] = {}
        for size in sorted(set(global_sizes)):
            self._order(size)

    def _order(self, global_size: int) -> Tensor:
        if global_size not in self.orders:
            self.orders[global_size] = torch.from_numpy(self.rng.permutation(global_size)).long()
        return self.orders[global_size]

    def __call__(self, global_size: int, size: int) -> Tensor:
        return torch.sort(self._order(global_size)[:size]).values


# -- slice plans --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TensorSlice:
    """Where one participant tensor sits in the global tensor of its key.

    ``view``: the global tensor's view shape; ``indices``: per view dimension, the global positions of the
    participant's entries (a LongTensor) or ``None`` for a whole dimension. The participant's tensor,
    viewed as :attr:`local_view`, is ``global.reshape(view)[indices[0], indices[1], ...]`` (outer product).
    """

    view: Shape
    indices: tuple[Tensor | None, ...]

    @property
    def local_view(self) -> Shape:
        return tuple(size if idx is None else len(idx) for size, idx in zip(self.view, self.indices))

    @property
    def whole(self) -> bool:
        return all(idx is None for idx in self.indices)

    def flat_index(self, device: torch.device | str | None = None) -> Tensor:
        """Flat position in the row-major global view of every participant entry, shaped :attr:`local_view`."""
        rank = len(self.view)
        flat = torch.zeros((1,) * rank, dtype=torch.long, device=device)
        stride = 1
        for dim in reversed(range(rank)):
            idx = self.indices[dim]
            idx = torch.arange(self.view[dim], device=device) if idx is None else idx.to(device)
            shape = [1] * rank
            shape[dim] = -1
            flat = flat + idx.view(shape) * stride
            stride *= self.view[dim]
        return flat.expand(self.local_view)


def slice_plan(
    global_views: Mapping[str, Shape], local_views: Mapping[str, Shape], rule: IndexRule
) -> dict[str, TensorSlice]:
    """Index sets of one participant (view shapes ``local_views``) in ``W_g`` (``global_views``): whole
    dimensions where the sizes agree, ``rule(J, n)`` where the participant's size ``n`` is below ``J``."""
    plan: dict[str, TensorSlice] = {}
    for key, local in local_views.items():
        if key not in global_views:
            raise ValueError(f"partial training: {key!r} is not in the global model")
        glob = tuple(global_views[key])
        if len(glob) != len(local):
            raise ValueError(f"partial training: {key} has rank {len(local)} but {len(glob)} in the global model")
        indices: list[Tensor | None] = []
        for n, big in zip(local, glob):
            if n > big:
                raise ValueError(f"partial training: {key} {tuple(local)} is wider than the global {glob}")
            if n == big:
                indices.append(None)
                continue
            idx = torch.as_tensor(rule(big, n), dtype=torch.long)
            listed = idx.tolist()  # the rules draw on the host: checked there, no value read from a device
            if idx.shape != (n,) or (n and (min(listed) < 0 or max(listed) >= big)):
                raise ValueError(f"index rule gave {listed} for a dim of {n} out of {big}")
            indices.append(idx)
        plan[key] = TensorSlice(glob, tuple(indices))
    return plan


# -- extraction and aggregation (Algorithm 3, Eq. 6) --------------------------------------------------


def extract(
    global_state: Mapping[str, Tensor],
    target_shapes: Mapping[str, Sequence[int]],
    index_sets: Mapping[str, TensorSlice],
) -> dict[str, Tensor]:
    """The sub-model ``W_{g, X_n}``: for every key of ``target_shapes`` (stored shapes of the participant),
    the entries of ``global_state`` at the participant's index sets, reshaped to the stored shape."""
    out: dict[str, Tensor] = {}
    for key, shape in target_shapes.items():
        g = global_state[key].detach()
        plan = index_sets[key]
        if g.numel() != math.prod(plan.view):
            raise ValueError(f"extract: {key} has {g.numel()} entries, its view {plan.view} {math.prod(plan.view)}")
        if plan.whole:
            out[key] = g.clone().reshape(tuple(shape))
        else:
            out[key] = g.reshape(-1)[plan.flat_index(g.device)].reshape(tuple(shape))
    return out


def aggregate(
    global_state: Mapping[str, Tensor],
    participant_states: Sequence[Mapping[str, Tensor]],
    weights: Sequence[float] | None,
    index_sets_per_participant: Sequence[Mapping[str, TensorSlice]],
) -> dict[str, Tensor]:
    """Eq. 6: every floating entry of ``W_g`` becomes the ``weights``-weighted average of the participants
    whose index sets cover it (``weights=None``: equal, ``d_n = 1/|P|``); an entry covered by nobody keeps
    ``W_g``'s value. Non-floating buffers (BatchNorm's ``num_batches_tracked``) are kept from ``W_g``. A
    participant takes part in a key only when its index sets have that key."""
    if len(participant_states) != len(index_sets_per_participant):
        raise ValueError("aggregate needs one set of index sets per participant state")
    if weights is None:
        weights = [1.0] * len(participant_states)
    if len(weights) != len(participant_states):
        raise ValueError("aggregate needs one weight per participant state")
    out: dict[str, Tensor] = {}
    for key, g in global_state.items():
        g = g.detach()
        if not torch.is_floating_point(g):
            out[key] = g.clone()
            continue
        total = torch.zeros(g.numel(), dtype=torch.float64, device=g.device)
        cover = torch.zeros_like(total)
        for state, plans, weight in zip(participant_states, index_sets_per_participant, weights):
            if key not in plans:
                continue
            plan = plans[key]
            values = state[key].detach().reshape(-1).to(torch.float64)
            if values.numel() != math.prod(plan.local_view):
                raise ValueError(f"aggregate: {key} has {values.numel()} entries, its index sets {plan.local_view}")
            if plan.whole:
                total.add_(values, alpha=float(weight))
                cover.add_(float(weight))
            else:
                flat = plan.flat_index(g.device).reshape(-1)
                total.index_add_(0, flat, values, alpha=float(weight))
                cover.index_add_(0, flat, torch.full_like(values, float(weight)))
        merged = torch.where(cover > 0, total / cover.clamp_min(1e-300), g.reshape(-1).to(torch.float64))
        out[key] = merged.to(g.dtype).reshape(g.shape)
    return out


# -- family check ---------------------------------------------------------------------------------------


def width_family_mismatch(models: Mapping[str, nn.Module]) -> tuple[str, str, str] | None:
    """``(arch_a, arch_b, reason)`` when the models (by architecture name) are not width-scaled copies of one
    family: same class, same state-dict keys and view ranks, and every view dimension of a larger model (by
    parameter count) at least that of a smaller one. ``None`` when they are."""
    items = sorted(models.items(), key=lambda kv: -sum(p.numel() for p in kv[1].parameters()))
    views = {arch: view_shapes(model) for arch, model in items}
    for i, (big, big_model) in enumerate(items):
        for small, small_model in items[i + 1 :]:
            if type(big_model) is not type(small_model):
                return big, small, f"{type(big_model).__name__} vs {type(small_model).__name__}"
            a, b = views[big], views[small]
            if a.keys() != b.keys():
                diff = sorted(set(a) ^ set(b))
                return big, small, f"different tensors ({', '.join(diff[:3])}{'...' if len(diff) > 3 else ''})"
            for key in a:
                if len(a[key]) != len(b[key]):
                    return big, small, f"{key} has rank {len(a[key])} vs {len(b[key])}"
                if any(x < y for x, y in zip(a[key], b[key])):
                    return big, small, f"{key} {a[key]} does not contain {b[key]}"
    return None
