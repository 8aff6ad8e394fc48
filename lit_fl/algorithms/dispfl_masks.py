"""DisPFL's sparse masks (Dai et al., ICML 2022, arXiv 2206.00187; reference code github.com/rong-dai/DisPFL, read
for facts), each piece a pure function: ERK densities and random masks (setup), the per-coordinate average over the
models that hold a weight (aggregation), the cosine-annealed prune rate and the magnitude-prune/gradient-regrow
update of a layer's mask, and what a sparse model sends. :class:`~lit_fl.algorithms.dispfl.DisPFL` runs them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import torch
    from torch import Tensor, nn

    from lit_fl.federation.state import Client
    from lit_fl.steps.runner import StepRunner

    State = dict[str, Tensor]
    Mask = dict[str, Tensor]


def parameter_shapes(model: nn.Module) -> dict[str, tuple[int, ...]]:
    """Every parameter's shape, by name (the tensors DisPFL masks: all of ``named_parameters``, as the reference)."""
    return {name: tuple(p.shape) for name, p in model.named_parameters()}


def erk_densities(shapes: Mapping[str, Sequence[int]], density: float, power: float = 1.0) -> dict[str, float]:
    """Erdos-Renyi-Kernel densities (Evci et al. 2020, as DisPFL's reference code): layer ``l`` keeps
    ``d_l = eps * r_l`` of its ``n_l`` weights, ``r_l = (sum(shape_l) / n_l)^power``, with ``eps`` such that
    ``sum_l d_l n_l = density * sum_l n_l``; a layer whose ``d_l`` would exceed 1 is dense (``d_l = 1``) and ``eps``
    is solved again over the others (the layers of the largest ``r_l`` first)."""
    sizes = {name: math.prod(shape) for name, shape in shapes.items()}
    raw = {name: (sum(shape) / sizes[name]) ** power for name, shape in shapes.items()}
    dense: set[str] = set()
    while True:
        sparse = [n for n in shapes if n not in dense]
        if not sparse:
            return dict.fromkeys(shapes, 1.0)
        rhs = density * sum(sizes[n] for n in sparse) - (1 - density) * sum(sizes[n] for n in dense)
        eps = rhs / sum(raw[n] * sizes[n] for n in sparse)
        largest = max(raw[n] for n in sparse)
        if eps * largest <= 1:
            return {n: 1.0 if n in dense else eps * raw[n] for n in shapes}
        dense.update(n for n in sparse if raw[n] == largest)


def random_masks(
    shapes: Mapping[str, Sequence[int]], densities: Mapping[str, float], generator: np.random.Generator
) -> dict[str, Tensor]:
    """One bool mask per layer with ``floor(d_l * n_l)`` ones at positions drawn without replacement from
    ``generator`` (in layer order)."""
    import torch

    masks = {}
    for name, shape in shapes.items():
        n = math.prod(shape)
        flat = torch.zeros(n, dtype=torch.bool)
        keep = int(densities[name] * n)
        if keep > 0:
            flat[torch.from_numpy(generator.permutation(n)[:keep])] = True
        masks[name] = flat.reshape(tuple(shape))
    return masks


def masked_average(states: Sequence[State], supports: Sequence[Mapping[str, Tensor]]) -> State:
    """Per coordinate, the mean of the values of the states whose support holds it (0 where none does); entries
    without a support (buffers) are dense: the mean of all floating-point ones, the first state's integer ones.
    Accumulated in float64, stored in the entry's dtype."""
    import torch

    out = {}
    for key, value in states[0].items():
        if key in supports[0]:
            device = value.device
            total = sum(s[key].to(torch.float64) * m[key].to(device, torch.float64) for s, m in zip(states, supports))
            count = sum(m[key].to(device, torch.float64) for m in supports)
            out[key] = torch.where(count > 0, total / count.clamp(min=1), torch.zeros_like(total)).to(value.dtype)
        elif value.is_floating_point():
            out[key] = (sum(s[key].to(torch.float64) for s in states) / len(states)).to(value.dtype)
        else:
            out[key] = value.clone()
    return out


def aggregate(states: Sequence[State], supports: Sequence[Mapping[str, Tensor]], mask: Mapping[str, Tensor]) -> State:
    """DisPFL's aggregation of a client (``states[0]``, its own) with its neighbours: :func:`masked_average`, then
    times the client's own mask ``mask`` (a coordinate held by no neighbour keeps the client's own value)."""
    out = masked_average(states, supports)
    for key, m in mask.items():
        out[key] = out[key] * m.to(out[key].device, out[key].dtype)
    return out


def prune_rate(round_: int, anneal_factor: float, anneal_rounds: int) -> float:
    """``alpha_k = alpha/2 (1 + cos(pi t / T))``, ``t = min(k - 1, T)``: ``alpha`` in round 1, 0 from round
    ``T + 1`` on (the reference's ``cosine_annealing`` with its 0-based round)."""
    t = min(round_ - 1, anneal_rounds)
    return anneal_factor / 2 * (1 + math.cos(math.pi * t / anneal_rounds))


def prune_and_regrow(mask: Tensor, weight: Tensor, grad: Tensor, rate: float) -> Tensor:
    """One layer's mask update: ``r = ceil(rate * nnz)``; the ``r`` active weights of smallest ``|weight|`` leave
    the mask, then the ``r`` inactive coordinates (those just pruned included) of largest ``|grad|`` join it. The
    number of ones is unchanged. Ties go to the lower flat index (stable sorts)."""
    import torch

    flat = mask.reshape(-1).to(torch.bool)
    r = math.ceil(rate * ones(flat))
    if r == 0:
        return mask.clone()
    new = flat.clone()
    magnitude = torch.where(flat, weight.reshape(-1).abs().to(torch.float64), torch.full_like(flat, math.inf,
                                                                                              dtype=torch.float64))
    new[torch.sort(magnitude, stable=True).indices[:r]] = False
    score = torch.where(new, torch.full_like(flat, -math.inf, dtype=torch.float64),
                        grad.reshape(-1).abs().to(torch.float64))
    new[torch.sort(score, descending=True, stable=True).indices[:r]] = True
    return new.reshape(mask.shape).to(mask.dtype)


def ones(mask: Tensor) -> int:
    """The number of nonzero entries of a mask, counted where masks live: on the host, with NumPy (host
    bookkeeping, no kernel and no wait for a device)."""
    import numpy as np

    return int(np.count_nonzero(mask.cpu().numpy()))


def sparse_payload(state: State, support: Mapping[str, Tensor], kept: Mapping[str, Tensor] | None = None) -> nn.Module:
    """What a client sends: the values its support keeps (each masked entry as a 1-D tensor of its kept values, in
    row-major order) and its dense buffers; the ledger counts their bytes (the positions, a bitmap, are not counted:
    the reference counts only the non-zero parameters). ``kept``: :func:`kept_positions` of ``support`` on the
    values' device, when the caller has them (a gather at known positions reads nothing back from the device; a
    boolean mask's output length is on the device)."""
    import torch

    from lit_fl.federation.ledger import Payload

    kept = kept if kept is not None else kept_positions(support, next(iter(state.values())).device)
    return Payload([torch.take(value, kept[key]) if key in kept else value for key, value in state.items()])


def kept_positions(support: Mapping[str, Tensor], device: torch.device) -> dict[str, Tensor]:
    """The flat positions of every support's ones, found where the supports live (the host, with NumPy: host
    bookkeeping, no kernel), then moved to ``device``."""
    import numpy as np
    import torch

    return {key: torch.from_numpy(np.flatnonzero(m.cpu().numpy())).to(device) for key, m in support.items()}


# -- the mask update of a round, over the clients ---------------------------------------------------------------


def screen_gradients(
    clients: Sequence[Client], runner: StepRunner, first_batch: Callable[[Client], tuple[Tensor, Tensor]], loss: str
) -> dict[int, dict[str, Tensor]]:
    """Every client's (with a train sample) gradient of the loss on one batch (``first_batch``: the first of a fresh
    shuffle, drawn in client order) at its trained weights, every coordinate, by parameter name (the reference's
    ``screen_gradients``: the model in eval mode): one phase of :class:`~lit_fl.steps.gradient.GradientWork`."""
    from lit_fl.steps.gradient import GradientWork

    works: list[GradientWork | None] = []
    for client in clients:
        if client.num_train == 0:
            works.append(None)
            continue
        x, y = first_batch(client)
        works.append(GradientWork(client.id, client.model, x, y, client.class_proportions, loss))
    names = [name for name, _ in clients[0].model.named_parameters()]
    return {work.client: dict(zip(names, result.value))
            for work, result in zip(works, runner.run_phase(works)) if work is not None}


def updated_masks(masks: Sequence[Mapping[str, Tensor]], models: Sequence[nn.Module],
                  grads: Sequence[Mapping[str, Tensor]], rate: float) -> list[Mask]:
    """Every client's next mask: :func:`prune_and_regrow` of every layer at the model's trained weights. The masks
    live on the host, so the clients' weights and screened gradients come to it in one transfer
    (:func:`~lit_fl.steps.transfer.to_host`; not one per tensor: a wait for the device each)."""
    from lit_fl.steps.transfer import to_host

    tensors = [t.detach() for model, grad, mask in zip(models, grads, masks)
               for t in (*(dict(model.named_parameters())[k] for k in mask), *(grad[k] for k in mask))]
    host = to_host(tensors)
    out, i = [], 0
    for mask in masks:
        n = len(mask)
        weights, screened = host[i : i + n], host[i + n : i + 2 * n]
        out.append({k: prune_and_regrow(m, w, g, rate) for k, m, w, g in zip(mask, mask.values(), weights, screened)})
        i += 2 * n
    return out
