"""Unit representation of UA-PDFL (papers/ua-pdfl.txt sec. 3.2, Eq. 4-7, and Eq. 11) and the split of a
model into a feature extractor ``g`` and a personalised classifier ``h`` (sec. 3.4, 5.1.1).

* ``X_unit`` is the all-ones tensor of one input sample, ``a_ij = 1`` (sec. 3.2: "the unit input X_unit with
  a_ij = 1"). It is fed to the model as it is, i.e. it is the all-ones image *in the dataset's normalised
  space* - the space every lit-fl model sees, since :class:`~lit_fl.data.dataset.ImageDataset` stores
  normalised tensors (the paper's code feeds ``torch.ones`` straight to the network as well; a raw all-ones
  image would be ``(1 - mean) / std`` after normalisation, a different constant per dataset). All clients
  share it without negotiation, which is the point of Eq. 4.
* ``I_m = softmax(f_m(X_unit))`` (Eq. 5), computed in eval mode without gradients (a predict phase of the runner).
* ``I_m^Aux = g_m(X_unit)`` (Eq. 11), the flattened input of the classifier ``h``.
* ``Div(i, j) = 0.5 KL(I_i || I_j) + 0.5 KL(I_j || I_i)`` (Eq. 6-7), probabilities clamped at ``eps`` so a
  saturated softmax (an exact 0) gives a finite value.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from lit_fl.errors import ConfigError

if TYPE_CHECKING:
    import torch
    from torch import Tensor, nn

    from lit_fl.steps.runner import StepRunner



def unit_input(
    input_shape: Sequence[int], device: torch.device | str = "cpu", dtype: torch.dtype | None = None
) -> Tensor:
    """``X_unit``: one all-ones sample (float32 unless ``dtype``), shape ``(1, *input_shape)``, in the normalised
    input space."""
    import torch

    return torch.ones((1, *input_shape), device=device, dtype=dtype or torch.float32)


class ModelSplit:
    """Which ``state_dict`` keys form the feature extractor ``g`` and which the classifier ``h``.

    Args:
        classifier_modules: names of the submodules that form ``h`` (e.g. ``["classifier"]``, or
            ``["pre_logits", "head"]`` for timm's VGG whose fully connected layers are all in ``h``, as in
            UA-PDFL sec. 5.1.1). ``None``: the final classifier block of :mod:`lit_fl.models.metadata`
            (``classifier`` for lit-fl's CNN and ResNet18, ``mlp_head`` for the ViT, ...).
    """

    def __init__(self, classifier_modules: Sequence[str] | None = None) -> None:
        if classifier_modules is not None and not classifier_modules:
            raise ConfigError("algorithm.classifier_modules: give at least one module name, or null for the default")
        self.classifier_modules = None if classifier_modules is None else [m.strip(".") for m in classifier_modules]

    def modules(self, model: nn.Module) -> list[str]:
        """The module names of ``h`` in ``model`` (validated)."""
        from lit_fl.models.metadata import classifier_prefix

        if self.classifier_modules is None:
            return [classifier_prefix(model).rstrip(".")]
        names = dict(model.named_modules())
        missing = [m for m in self.classifier_modules if m not in names or not m]
        if missing:
            top = ", ".join(name for name, _ in model.named_children())
            raise ConfigError(
                f"algorithm.classifier_modules: {missing} are not submodules of {type(model).__qualname__}; "
                f"its top-level modules are: {top}"
            )
        return list(self.classifier_modules)

    def keys(self, model: nn.Module) -> tuple[list[str], list[str]]:
        """``(feature_keys, classifier_keys)`` of ``model``'s ``state_dict``, in state order."""
        prefixes = tuple(f"{m}." for m in self.modules(model))
        keys = list(model.state_dict().keys())
        classifier = [k for k in keys if k.startswith(prefixes)]
        if not 0 < len(classifier) < len(keys):
            raise ConfigError(f"algorithm.classifier_modules: {list(prefixes)} hold {len(classifier)} of the "
                              f"{len(keys)} weights of {type(model).__qualname__}; allowed: modules that hold some "
                              "weights, not all (the feature extractor is the rest)")
        return [k for k in keys if not k.startswith(prefixes)], classifier

    def forward_with_features(self, model: nn.Module, x: Tensor) -> tuple[Tensor, Tensor]:
        """``(model(x), g(x))`` from one forward pass, ``g(x)`` flattened to ``(batch, features)``: the input
        of the first classifier module that runs. Uses the model's current mode (gradients if enabled)."""
        import torch

        captured: list[Tensor] = []

        def _capture(_module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
            if not captured:
                captured.append(inputs[0])

        handles = [model.get_submodule(m).register_forward_pre_hook(_capture) for m in self.modules(model)]
        try:
            out = model(x)
        finally:
            for handle in handles:
                handle.remove()
        if not captured:
            raise RuntimeError(f"no classifier module of {type(model).__qualname__} ran in the forward pass")
        return out, torch.flatten(captured[0], start_dim=1)

    def features(self, model: nn.Module, x: Tensor) -> Tensor:
        """``g(x)`` flattened to ``(batch, features)`` (see :meth:`forward_with_features`)."""
        return self.forward_with_features(model, x)[1]


def unit_representations(
    runner: StepRunner, models: Mapping[int, nn.Module], x_unit: Tensor, split: ModelSplit
) -> dict[int, tuple[Tensor, Tensor]]:
    """``(I, I_aux)`` of every client's model (``models``: client -> model): ``softmax(model(X_unit))`` (Eq. 5) and
    the flattened ``g(X_unit)`` (Eq. 11), float32 vectors, from one predict phase (eval mode, no gradient; fused per
    architecture under ``trainer.fuse``)."""
    import torch

    from lit_fl.steps.predict import PredictWork

    works = [PredictWork(client, model, x_unit, split.forward_with_features) for client, model in models.items()]
    results = runner.run_phase(works)
    return {work.client: (torch.softmax(r.value[0].float(), dim=1)[0], r.value[1][0].float())
            for work, r in zip(works, results)}


def kl(p: Tensor, q: Tensor, eps: float = 1e-8) -> Tensor:
    """``KL(p || q) = sum_o p_o log(p_o / q_o)`` (Eq. 7) over the last dimension, both clamped at ``eps``."""
    p = p.double().clamp_min(eps)
    q = q.double().clamp_min(eps)
    return (p * (p.log() - q.log())).sum(dim=-1)


def divergence(p: Tensor, q: Tensor, eps: float = 1e-8) -> float:
    """``Div = 0.5 KL(p || q) + 0.5 KL(q || p)`` (Eq. 6): symmetric, 0 for equal representations."""
    return float(0.5 * kl(p, q, eps) + 0.5 * kl(q, p, eps))


def pair_divergences(
    representations: Mapping[int, Tensor], pairs: Sequence[tuple[int, int]], eps: float = 1e-8
) -> list[float]:
    """:func:`divergence` of every ``(i, j)`` of ``pairs`` at once (one computation over the stacked
    representations and one read from the device, instead of one per pair)."""
    import torch

    if not pairs:
        return []
    p = torch.stack([representations[i] for i, _ in pairs])
    q = torch.stack([representations[j] for _, j in pairs])
    return (0.5 * kl(p, q, eps) + 0.5 * kl(q, p, eps)).tolist()
