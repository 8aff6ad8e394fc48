"""What methods need to know about an architecture beyond building it, for every family in one place.

* :func:`width_rate` (by name): the rate ``r`` of a width-scaled copy for partial training (HeteroFL-style): a
  model of rate ``r`` has every hidden dimension equal to ``floor(r * J)`` of the family's reference model's
  ``J``, with the same parameter names and ranks. References are the largest models of DFML Table 10 H1:
  ``cnn_128_256``, ``resnet18`` (``[64, 128, 256, 512]``), ``vit_512_512``. The rate is the first width over the
  reference's first width (``cnn_64_128`` -> 0.5, ``resnet18_8_16_32_64`` -> 0.125, ``vit_32_32`` -> 0.0625);
  ``None`` for models that are no width-scaled copy of their reference (other depths, as the H2 CNNs, or
  non-proportional widths) and for EfficientNet and timm models.
* :func:`classifier_prefix` (by model): the ``state_dict`` key prefix of the final classifier ``h``; everything
  else is the feature extractor ``g`` (FML, UA-PDFL, FedPer split models there). :func:`split_state` partitions
  the keys, :func:`extract_features` computes ``g(x)`` (the classifier's input).
"""

from __future__ import annotations

import sys
from fractions import Fraction

import torch
from torch import Tensor, nn

from lit_fl.errors import ConfigError
from lit_fl.models.registry import name_widths, require_known
from lit_fl.models.resnet import RESNET18_WIDTHS
from lit_fl.models.timm_models import TIMM_PREFIX
from lit_fl.models.vit import attention_shape
from lit_fl.registry import Registry

#: Width list of the largest H1 model of each sliceable family (DFML Table 10).
REFERENCE_WIDTHS: dict[str, tuple[int, ...]] = {
    "cnn": (128, 256),
    "resnet18": RESNET18_WIDTHS,
    "vit": (512, 512),
}

#: Classifier prefix by model class (``module.qualname``; subclasses inherit it), registered with
#: :func:`register_classifier` (a class registered twice is refused, naming both). timm models: see
#: :func:`_timm_classifier_prefix`.
CLASSIFIER_PREFIXES: Registry[str] = Registry("classifier of model class")


def register_classifier(class_path: str, prefix: str) -> None:
    """Say that the final classifier of the models of class ``class_path`` (``module.qualname``, so that the class's
    module need not be imported) is the ``state_dict`` entries under ``prefix`` (with its trailing dot)."""
    caller = sys._getframe(1)
    CLASSIFIER_PREFIXES.add(class_path, prefix, defined_by=f"{caller.f_code.co_filename}:{caller.f_lineno}")


register_classifier("lit_fl.models.cnn.CNN", "classifier.")
register_classifier("lit_fl.models.codist_cnn.CodistCNN", "classifier.")
register_classifier("lit_fl.models.resnet.PreActResNet18", "classifier.")
register_classifier("vit_pytorch.vit_for_small_dataset.ViT", "mlp_head.")
register_classifier("efficientnet_pytorch.model.EfficientNet", "_fc.")
register_classifier("lit_fl.models.wrn.WideResNet", "classifier.")
register_classifier("torchvision.models.shufflenetv2.ShuffleNetV2", "fc.")
register_classifier("torchvision.models.mobilenetv2.MobileNetV2", "classifier.")


def width_rate(arch: str) -> float | None:
    """Rate of ``arch`` relative to its family's reference model, or ``None`` when it is not sliceable."""
    require_known(arch)
    family = arch.split("_")[0]
    if arch.startswith(TIMM_PREFIX) or family not in REFERENCE_WIDTHS:
        return None
    reference = REFERENCE_WIDTHS[family]
    widths = name_widths(arch) or list(reference)
    if len(widths) != len(reference):
        return None
    rate = Fraction(widths[0], reference[0])
    if any(Fraction(w, ref) != rate for w, ref in zip(widths, reference)):
        return None
    if family == "vit" and not _vit_attention_scales(widths[0], rate):
        return None
    return float(rate)


def _vit_attention_scales(dim: int, rate: Fraction) -> bool:
    """The attention width ``heads * dim_head`` must scale with ``dim`` too (it does for dims that are
    multiples of 64 or below 64, see :mod:`lit_fl.models.vit`)."""
    heads, dim_head = attention_shape(dim)
    full_heads, full_dim_head = attention_shape(REFERENCE_WIDTHS["vit"][0])
    return heads * dim_head == int(rate * full_heads * full_dim_head)


def classifier_prefix(model: nn.Module) -> str:
    """``state_dict`` key prefix (with the trailing dot) of the final classifier of ``model``: its class's (or a base
    class's) registered one, or a timm model's own."""
    for cls in type(model).__mro__:
        path = f"{cls.__module__}.{cls.__qualname__}"
        if path in CLASSIFIER_PREFIXES:
            return CLASSIFIER_PREFIXES[path]
    prefix = _timm_classifier_prefix(model) if hasattr(model, "get_classifier") else None
    if prefix is None:
        raise ConfigError(f"models: no classifier known for {type(model).__qualname__}; register it with "
                          "lit_fl.models.metadata.register_classifier")
    return prefix


def _timm_classifier_prefix(model: nn.Module) -> str | None:
    """timm: ``pretrained_cfg["classifier"]`` (``default_cfg`` in older versions), else the name of the module
    that ``get_classifier()`` returns (None: neither is a module of the model)."""
    cfg = getattr(model, "pretrained_cfg", None) or getattr(model, "default_cfg", None) or {}
    name = cfg.get("classifier")
    keys = model.state_dict().keys()
    if isinstance(name, str) and any(key.startswith(f"{name}.") for key in keys):
        return f"{name}."
    head = model.get_classifier()  # type: ignore[operator]
    for module_name, module in model.named_modules():
        if module is head and module_name and any(key.startswith(f"{module_name}.") for key in keys):
            return f"{module_name}."
    return None


def classifier_module(model: nn.Module) -> nn.Module:
    """The final classifier ``h`` as a submodule of ``model``."""
    return model.get_submodule(classifier_prefix(model).rstrip("."))


def split_state(model: nn.Module) -> tuple[list[str], list[str]]:
    """``(feature_keys, classifier_keys)``: the ``state_dict`` keys of ``g`` and of ``h``, in state order."""
    prefix = classifier_prefix(model)
    keys = list(model.state_dict().keys())
    return [k for k in keys if not k.startswith(prefix)], [k for k in keys if k.startswith(prefix)]


def extract_features(model: nn.Module, x: Tensor) -> Tensor:
    """``g(x)``: the input of the final classifier for the batch ``x``, flattened to ``(batch, features)``.

    Runs the whole forward pass (the classifier output is discarded) in the model's current mode, with
    gradients if they are enabled.
    """
    captured: list[Tensor] = []

    def _capture(_module: nn.Module, inputs: tuple[Tensor, ...]) -> None:
        captured.append(inputs[0])

    handle = classifier_module(model).register_forward_pre_hook(_capture)
    try:
        model(x)
    finally:
        handle.remove()
    return torch.flatten(captured[0], start_dim=1)
