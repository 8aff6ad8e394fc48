"""Horizontal fusion: several models of one architecture that see the same batch run as ONE module.

``FusedModels`` stacks the models' parameters and buffers (as ``torch.func.stack_module_state`` does). The CNN family of
DFML Table 10 runs as one hand-fused network: the first convolution over the shared input with the G models' filters
side by side, every later one a grouped convolution (``groups=G``), G ``GroupNorm(1, C)`` as one ``GroupNorm(G,
G*C)``, the G linear heads as one batched matmul. Every other architecture runs with ``vmap(functional_call(...))``,
whose batching rules do the same for convolutions, norms and linear layers, and fuse G BatchNorms into one call in
which every model keeps its own running statistics (each stacked buffer row is its model's). Forward and backward
launch the kernels of one model instead of G, so a GPU round of small models, which is bound by kernel launches,
runs up to G times faster.

The clients stay the owners of their weights: the stacked tensors are copies made when a phase starts, trained by
one optimizer (SGD, momentum and weight decay act per element, so an SGD over the stack equals one SGD per model),
and copied back into each client's modules when the phase ends (:meth:`FusedModels.write_back`).

Fusion is exact math, not bit-identical arithmetic: a grouped convolution sums in another order than G separate
ones, so fused and unfused phases agree within float32 rounding (tests: 1e-5 relative after 3 steps). Models that
draw random numbers in training (dropout, drop-path) fuse too: ``vmap(..., randomness="different")`` draws each
model's masks on its own, from the same distribution as unfused training (independent Bernoulli masks per model, a
statistical test checks it), but not the same numbers, so a fused phase of such models equals an unfused one in
distribution, not value by value. A random layer of another kind (a user's own noise module, whose draws ``vmap``
may not batch) keeps its model unfused (:func:`fusible`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

#: modules whose training forward draws random numbers when their probability is > 0
_RANDOM_ATTRIBUTES = ("p", "drop_prob")
#: random layers whose draws ``vmap(randomness="different")`` batches, one mask per model: torch's dropouts and
#: timm's drop-path (``bernoulli_`` on a fresh tensor)
_BATCHED_RANDOM = ("Dropout", "Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout", "DropPath")


@contextmanager
def native_cpu_convolutions(device: torch.device) -> Iterator[None]:
    """On a CPU, within the block convolutions run PyTorch's own kernels instead of oneDNN's. oneDNN's grouped
    convolution loses float32 precision in training on this project's CPUs (measured: two fused ``cnn_16_32_64``
    ended 6e-4 relative away from a float64 run after 3 SGD steps, against 5e-8 with PyTorch's kernels)."""
    if device.type != "cpu":
        yield
        return
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = previous


def fusible(model: nn.Module) -> bool:
    """Whether ``model`` can train fused: it computes a deterministic function of its input and weights in training
    mode, or its random layers are ones whose draws fused training makes per model (:data:`_BATCHED_RANDOM`:
    torch's dropouts, timm's drop-path)."""
    for module in model.modules():
        name = type(module).__name__
        if ("dropout" in name.lower() or "droppath" in name.lower()) and name not in _BATCHED_RANDOM:
            if any(float(getattr(module, a, 0.0) or 0.0) > 0.0 for a in _RANDOM_ATTRIBUTES):
                return False
    return True


def signature(model: nn.Module) -> tuple:
    """Models with equal signatures have the same computation: same class, parameter and buffer shapes."""
    return (
        type(model),
        tuple((k, tuple(v.shape), v.dtype) for k, v in model.state_dict().items()),
        tuple(m.training for m in model.modules()),
    )


#: the layers :meth:`FusedModels._fused_layers` fuses by hand
_HAND_FUSED = (nn.Conv2d, nn.ReLU, nn.MaxPool2d, nn.GroupNorm, nn.Flatten, nn.Linear)


def sequential_layers(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, layer)`` of a model whose forward applies its ``layers()`` in order, when every layer is one that
    :class:`FusedModels` fuses by hand (a first convolution, then convolutions, ReLUs, max-pools, GroupNorms, one
    Flatten and linear layers, without padding modes); ``[]`` for any other model (fused through ``vmap``)."""
    layers = getattr(model, "layers", None)
    if not callable(layers):
        return []
    names = {id(module): name for name, module in model.named_modules()}
    chosen = [(names.get(id(layer), ""), layer) for layer in layers()]
    if not chosen or not isinstance(chosen[0][1], nn.Conv2d) or any(not isinstance(m, _HAND_FUSED)
                                                                     for _, m in chosen):
        return []
    if any(isinstance(m, nn.Conv2d) and m.padding_mode != "zeros" for _, m in chosen):
        return []
    if sum(isinstance(m, nn.Flatten) for _, m in chosen) != 1:
        return []
    return chosen


def fusion_groups(models: Sequence[nn.Module], candidates: Sequence[bool]) -> list[list[int]]:
    """Indices of the models to fuse, by signature (in first-appearance order); only groups of two or more and
    only ``candidates`` that :func:`fusible` accepts."""
    groups: dict[tuple, list[int]] = {}
    for n, (model, candidate) in enumerate(zip(models, candidates)):
        if candidate and fusible(model):
            groups.setdefault(signature(model), []).append(n)
    return [g for g in groups.values() if len(g) > 1]


class FusedModels(nn.Module):
    """G models of one architecture as one module; ``forward(x)`` gives the logits of each, ``[G, B, C]``.

    Parameters are stacked leaves (``params[i]`` of shape ``[G, *shape]``), registered on this module so that an
    optimizer over :meth:`parameters` trains all G models; buffers are stacked the same way.
    """

    def __init__(self, models: Sequence[nn.Module]) -> None:
        super().__init__()
        states = [(dict(m.named_parameters()), dict(m.named_buffers())) for m in models]
        self.param_names = list(states[0][0])
        self.buffer_names = list(states[0][1])
        with torch.no_grad():  # copies (torch.func.stack_module_state, also for frozen models such as peaks)
            self.params = nn.ParameterList(
                [nn.Parameter(torch.stack([p[k] for p, _ in states])) for k in self.param_names])
            for i, key in enumerate(self.buffer_names):
                self.register_buffer(f"buffer_{i}", torch.stack([b[key] for _, b in states]), persistent=False)
        self.__dict__["targets"] = list(models)  # the clients' modules: not submodules of the step
        self.__dict__["template"] = copy.deepcopy(models[0]).to("meta")
        #: models that are a plain sequence of convolutions, ReLUs, max-pools, GroupNorms and linear layers (lit-fl's
        #: CNN family, codistillation's CNNs) are hand-fused (fewer kernels than vmap's batching rules); others go
        #: through vmap
        self.__dict__["layers"] = sequential_layers(self.__dict__["template"])

    def _buffers_list(self) -> list[Tensor]:
        return [getattr(self, f"buffer_{i}") for i in range(len(self.buffer_names))]

    def forward(self, x: Tensor, per_model: bool = False) -> Tensor:
        """The G models' logits ``[G, B, C]``: all on the same ``x`` ``[B, ...]``, or with ``per_model`` each on
        its own batch, ``x`` of shape ``[G, B, ...]`` (batched local training, evaluation of validation splits)."""
        if self.__dict__["layers"]:
            return self._fused_layers(x, per_model)
        from torch.func import functional_call, vmap

        template: nn.Module = self.__dict__["template"]
        template.train(self.training)

        def one(params: dict[str, Tensor], buffers: dict[str, Tensor], inputs: Tensor) -> Tensor:
            return functional_call(template, (params, buffers), (inputs,))

        params = dict(zip(self.param_names, self.params))
        buffers = dict(zip(self.buffer_names, self._buffers_list()))
        return vmap(one, in_dims=(0, 0, 0 if per_model else None), randomness="different")(params, buffers, x)

    def apply_in_eval(self, fn: Callable[[nn.Module, Tensor], Tensor], x: Tensor, per_model: bool = False) -> Tensor:
        """``fn(model_g, x)`` of every model with the model in eval mode (BatchNorm on its running statistics,
        dropout off), gradients on, stacked ``[G, ...]`` (per position when ``fn`` returns a tuple): e.g. UA-PDFL's
        features of ``X_unit``; with ``per_model`` each model on its own ``x[g]``."""
        from torch.func import functional_call, vmap

        applied = _Applied(self.__dict__["template"], fn).eval()
        params = {f"model.{k}": v for k, v in zip(self.param_names, self.params)}
        buffers = {f"model.{k}": v for k, v in zip(self.buffer_names, self._buffers_list())}

        def one(params: dict[str, Tensor], buffers: dict[str, Tensor]) -> Tensor:
            return functional_call(applied, (params, buffers), (x,))

        def own(params: dict[str, Tensor], buffers: dict[str, Tensor], inputs: Tensor) -> Tensor:
            return functional_call(applied, (params, buffers), (inputs,))

        if per_model:
            return vmap(own, in_dims=(0, 0, 0), randomness="error")(params, buffers, x)
        return vmap(one, in_dims=(0, 0), randomness="error")(params, buffers)

    def _fused_layers(self, x: Tensor, per_model: bool) -> Tensor:
        """G models whose forward is their :func:`sequential_layers` in order: ``[G, B, classes]``. Convolutions
        run on the G models' channels side by side: over a shared ``x`` the first one runs the G models' filters
        together, on per-model inputs ``[G, B, C, H, W]`` (stacked along channels) and after the first every one is
        grouped (``groups=G``); ``GroupNorm(k, C)`` of G models is one ``GroupNorm(G*k, G*C)``; ``Flatten`` turns
        the channels back into models, and every linear layer is one batched matmul."""
        import torch.nn.functional as F

        p = dict(zip(self.param_names, self.params))
        g = len(self.params[0])
        if per_model:
            batch = x.shape[1]
            h = x.transpose(0, 1).reshape(batch, -1, *x.shape[3:])  # [B, G*C, H, W]: model i's channels i*C..
        else:
            batch, h = len(x), x
        grouped = per_model
        for name, layer in self.__dict__["layers"]:
            if isinstance(layer, nn.Conv2d):
                weight = p[f"{name}.weight"]
                bias = p[f"{name}.bias"].reshape(-1) if layer.bias is not None else None
                h = F.conv2d(h, weight.reshape(-1, *weight.shape[2:]), bias, layer.stride, layer.padding,
                             layer.dilation, g if grouped else 1)
                grouped = True
            elif isinstance(layer, nn.ReLU):
                h = F.relu(h)
            elif isinstance(layer, nn.MaxPool2d):
                h = F.max_pool2d(h, layer.kernel_size, layer.stride, layer.padding, layer.dilation,
                                 ceil_mode=layer.ceil_mode)
            elif isinstance(layer, nn.GroupNorm):
                h = F.group_norm(h, g * layer.num_groups, p[f"{name}.weight"].reshape(-1),
                                 p[f"{name}.bias"].reshape(-1), layer.eps)
            elif isinstance(layer, nn.Flatten):
                h = h.reshape(batch, g, -1).transpose(0, 1)  # [G, B, C*H*W]: each model's flattened map
            else:  # nn.Linear on [G, B, F]
                weight, bias = p[f"{name}.weight"], p[f"{name}.bias"]
                h = torch.baddbmm(bias.unsqueeze(1), h, weight.transpose(1, 2))
        return h

    @torch.no_grad()
    def write_back(self, rows: Sequence[int] | None = None) -> None:
        """Copy the trained weights and buffers of every model (or of the models at ``rows``) into its own module
        (one foreach copy)."""
        targets: list[nn.Module] = self.__dict__["targets"]
        sources = [*self.params, *self._buffers_list()]
        names = [*self.param_names, *self.buffer_names]
        dst, src = [], []
        for i in range(len(targets)) if rows is None else rows:
            state = dict(targets[i].named_parameters())
            state.update(dict(targets[i].named_buffers()))
            for name, stacked in zip(names, sources):
                dst.append(state[name])
                src.append(stacked[i])
        if dst:
            torch._foreach_copy_(dst, src)


class _Applied(nn.Module):
    """``fn(model, x)`` as a module's forward, so that ``functional_call`` can swap the model's weights."""

    def __init__(self, model: nn.Module, fn: Callable[[nn.Module, Tensor], Tensor]) -> None:
        super().__init__()
        self.model = model
        self.fn = fn

    def forward(self, x: Tensor) -> Tensor:
        return self.fn(self.model, x)
