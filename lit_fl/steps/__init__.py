"""Steps: one LightningModule per kind of client or aggregator work, run by :class:`StepRunner`.

The package imports lazily (PEP 562): ``from lit_fl import steps`` costs nothing, and Lightning is imported the
first time a step class is used (``steps.LocalTraining``), i.e. when a run starts, never for ``--help`` or a
config error. The light modules (``aggregation``, ``noise``, ``slicing``) import torch only; ``optim`` and
``precision`` import neither.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lit_fl.lazy import lazy_exports

if TYPE_CHECKING:
    from lit_fl.steps.aggregation import load_weights, weighted_average
    from lit_fl.steps.aux_proximal_training import AuxProximalTraining
    from lit_fl.steps.batched_local_training import BatchedLocalTraining
    from lit_fl.steps.deep_mutual_learning import DeepMutualLearning
    from lit_fl.steps.distillation import ServerCodistillation
    from lit_fl.steps.ensemble_distillation import EnsembleDistillation
    from lit_fl.steps.local_training import LocalTraining
    from lit_fl.steps.masked_training import MaskedTraining
    from lit_fl.steps.mutual_learning import MutualLearning
    from lit_fl.steps.noise import NoiseBatches
    from lit_fl.steps.noise_distillation import MutualNoiseDistillation, NoiseDistillation
    from lit_fl.steps.not_true_distillation import NotTrueDistillation
    from lit_fl.steps.optim import SGDConfig
    from lit_fl.steps.precision import PRECISIONS
    from lit_fl.steps.runner import StepRunner
    from lit_fl.steps.scaffold_training import ScaffoldTraining
    from lit_fl.steps.target_distillation import TargetDistillation

__getattr__, __dir__, __all__ = lazy_exports(globals())
