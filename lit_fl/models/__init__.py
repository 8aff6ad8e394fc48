"""Model zoo: registry by name; the CNN, pre-activation ResNet18, small-dataset ViT and EfficientNet families of
DFML Table 10 plus any timm model; architecture pools; width rates and classifier splits for partial training and
personalisation. The package imports lazily (:mod:`lit_fl.lazy`): ``lit_fl.models.pools`` loads without torch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.lazy import lazy_exports

if TYPE_CHECKING:
    from lit_fl.models.metadata import classifier_module, classifier_prefix, extract_features, split_state, width_rate
    from lit_fl.models.pools import POOLS, assign_evenly, resolve_pool
    from lit_fl.models.registry import create_model, is_known, num_parameters, register_model, register_model_family

__getattr__, __dir__, __all__ = lazy_exports(globals())
