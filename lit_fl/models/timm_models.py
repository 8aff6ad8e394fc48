"""Any timm architecture as ``timm:<name>`` (e.g. ``timm:resnet18``), randomly initialised (no download).

timm is imported on first use only (several seconds), so an unknown ``timm:`` name passes
:func:`lit_fl.models.is_known` and fails when the model is built, with a pointer to ``timm.list_models()``.
"""

from __future__ import annotations

from torch import nn

from lit_fl.errors import ConfigError

TIMM_PREFIX = "timm:"


def timm_model(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """Factory behind ``timm:<name>``: ``timm.create_model(name, pretrained=False, ...)``."""
    import timm  # lazy: keeps ``import lit_fl.models`` fast

    name = arch[len(TIMM_PREFIX) :]
    if not timm.is_model(name):
        raise ConfigError(
            f"models: unknown timm architecture {arch!r}: {name!r} is not a timm model; "
            f"see timm.list_models() (e.g. timm.list_models('resnet*'))"
        )
    return timm.create_model(name, pretrained=False, num_classes=num_classes, in_chans=input_shape[0])
