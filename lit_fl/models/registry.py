"""Model registry in the style of timm: an architecture is a name, every factory one small function.

Names: ``cnn_32_64`` (any channel list after ``cnn_``; ``cnn_bn_32_64`` with BatchNorm), ``resnet18`` and
``resnet18_<c1>_<c2>_<c3>_<c4>``, ``vit_<dim>_<mlp_dim>``, ``efficientnet_b0`` .. ``efficientnet_b4``,
``wrn_<depth>_<k>`` (wide ResNets, e.g. ``wrn_40_1``), ``shufflenetv2`` and ``mobilenetv2`` (CIFAR stems),
``timm:<name>`` (any timm model), plus
whatever later modules register with :func:`register_model`, and ``module:factory`` of a user's own
(``factory(input_shape, num_classes) -> nn.Module``, imported from the working directory or an installed
package). :func:`create_model` builds an architecture for an input shape and class count. Each family's module
(and torch, vit-pytorch, efficientnet-pytorch, timm behind it) is imported inside its factory, on first use:
checking a name (:func:`is_known`) never imports torch, so a config error answers before a run starts.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from lit_fl.errors import ConfigError
from lit_fl.registry import DuplicateRegistration, Registry, definition

if TYPE_CHECKING:
    from torch import nn

#: the EfficientNet variants of DFML Table 10 (``efficientnet_b0`` .. ``efficientnet_b4``)
EFFICIENTNET_VARIANTS: tuple[str, ...] = ("b0", "b1", "b2", "b3", "b4")
#: the codistillation CNNs (:data:`lit_fl.models.codist_cnn.CODIST_CNNS` holds their widths)
CODIST_NAMES: tuple[str, ...] = ("codist_small", "codist_large")

#: the side of ViT's square patches (:mod:`lit_fl.models.vit`): they must tile the image
VIT_PATCH_SIZE = 4


@dataclass(frozen=True)
class Inputs:
    """What the models of a name or family take, declared at registration and checked once for every model
    (:func:`check_model_for_data`): token sequences ``(T,)`` (``tokens``) or images ``(C, H, W)`` whose sides are at
    least ``min_side`` and a multiple of ``side_multiple`` (``why``: the reason, for messages)."""

    tokens: bool = False
    min_side: int = 1
    side_multiple: int = 1
    why: str = ""

    def problem(self, sequence: bool, shape: tuple[int, ...] | None) -> str | None:
        """What the data (token sequences or not; ``shape`` of one sample where known) breaks of this declaration,
        said after the model's name; None: nothing."""
        if self.tokens != sequence:
            return f"is {'a language' if self.tokens else 'an image'} model"
        sides = () if shape is None or self.tokens else tuple(shape[1:])
        if any(side < self.min_side or side % self.side_multiple for side in sides):
            rules = [f"at least {self.min_side}" if self.min_side > 1 else "",
                     f"multiples of {self.side_multiple}" if self.side_multiple > 1 else ""]
            return f"needs image sides that are {' and '.join(r for r in rules if r)} ({self.why})"
        return None


#: the declarations of the two kinds of model; a family with other rules declares its own :class:`Inputs`
IMAGES, TOKENS = Inputs(), Inputs(tokens=True)

ModelFactory = Callable[[str, tuple[int, int, int], int], "nn.Module"]
#: exact architecture names -> ``factory(arch, input_shape, num_classes)``
MODELS: Registry[ModelFactory] = Registry("model")
#: families of names (a regex) -> ``(compiled regex, example shown in errors, factory)``
MODEL_FAMILIES: Registry[tuple[re.Pattern[str], str, ModelFactory]] = Registry("model family")
#: exact name or family pattern -> what its models take
INPUTS: dict[str, Inputs] = {}


def register_model(*names: str, inputs: Inputs = IMAGES) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: register ``factory(arch, input_shape, num_classes)`` for the architectures ``names``, whose models
    take ``inputs``. A name that is registered already, or that a registered family builds (``cnn_32_64``), is
    refused, naming both factories."""

    def decorate(factory: ModelFactory) -> ModelFactory:
        for name in names:
            for pattern, (compiled, _, family) in MODEL_FAMILIES.items():
                if compiled.fullmatch(name):
                    _refuse(name, _family(str(pattern), family), f"{definition(factory)} by name")
        MODELS.register(*names)(factory)
        INPUTS.update(dict.fromkeys(names, inputs))
        return factory

    return decorate


def register_model_family(pattern: str, example: str, inputs: Inputs = IMAGES,
                          ) -> Callable[[ModelFactory], ModelFactory]:
    """Decorator: register a factory for every name matching the regex ``pattern`` (``example`` is shown in errors
    and ``--help``), whose models take ``inputs``. A pattern registered already, or one that builds a registered
    name, is refused, naming both."""

    def decorate(factory: ModelFactory) -> ModelFactory:
        compiled = re.compile(pattern)
        for name in MODELS:
            if compiled.fullmatch(str(name)):
                _refuse(str(name), f"{definition(MODELS.defined_by(name))} by name", _family(pattern, factory))
        MODEL_FAMILIES.add(pattern, (compiled, example, factory), defined_by=factory)
        INPUTS[pattern] = inputs
        return factory

    return decorate


def inputs_of(arch: str) -> Inputs | None:
    """What ``arch`` takes (None: no registered name, e.g. a user's ``module:factory``)."""
    if arch in MODELS:
        return INPUTS[arch]
    return next((INPUTS[str(p)] for p, (compiled, _, _) in MODEL_FAMILIES.items() if compiled.fullmatch(arch)), None)


def _refuse(name: str, first: str, second: str) -> NoReturn:
    """An exact name and a family that builds it (in the order they came): one would silently shadow the other."""
    raise DuplicateRegistration(f"model {name!r} is registered twice: {first} and {second}")


def _family(pattern: str, factory: object) -> str:
    return f"the family {pattern!r} of {definition(factory)}"


def allowed_names() -> list[str]:
    """Exact names and one example per family, for error messages and ``--help``."""
    return MODELS.names() + [example for _, (_, example, _) in MODEL_FAMILIES.items()]


def is_known(arch: str) -> bool:
    return arch in MODELS or any(p.fullmatch(arch) for _, (p, _, _) in MODEL_FAMILIES.items())


def require_known(arch: str, key: str = "models", also: str = "") -> None:
    """``arch`` is a registered name or builds from a family (``also``: what else ``key`` takes, for the message)."""
    if not is_known(arch):
        raise ConfigError(f"{key}: unknown architecture {arch!r}; allowed: {', '.join(allowed_names())}{also}")


def create_model(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    """A freshly initialised ``arch`` for ``input_shape = (C, H, W)`` (``(T,)``: token sequences) and ``num_classes``
    outputs; the input it declares (:class:`Inputs`) is checked first."""
    from lit_fl.user_code import is_user_spec, load_object

    if is_user_spec(arch) and not is_known(arch):  # module:factory of the user's own, factory(input_shape,
        return load_object(arch, "models.pool")(input_shape, num_classes)  # num_classes) -> nn.Module
    require_known(arch)
    check_model_for_data(arch, "models", len(input_shape) == 1, "the data", input_shape)
    if arch in MODELS:
        return MODELS[arch](arch, input_shape, num_classes)
    factory = next(factory for _, (pattern, _, factory) in MODEL_FAMILIES.items() if pattern.fullmatch(arch))
    return factory(arch, input_shape, num_classes)


def num_parameters(model: nn.Module) -> int:
    """Phi of DFML Eq. 3: the number of trainable parameters."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def name_widths(arch: str) -> list[int]:
    """The integers after the family name: ``cnn_32_64`` -> ``[32, 64]``, ``resnet18`` -> ``[]``."""
    return [int(c) for c in arch.split("_")[1:]]


@register_model_family(r"cnn(_[1-9][0-9]*)+", "cnn_<c1>_<c2>... (e.g. cnn_32_64)")
def _cnn_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.cnn import cnn

    return cnn(name_widths(arch), input_shape, num_classes)


@register_model_family(r"cnn_bn(_[1-9][0-9]*)+", "cnn_bn_<c1>_<c2>... (the CNN with BatchNorm, e.g. cnn_bn_16_32)")
def _cnn_bn_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.cnn import cnn

    return cnn(name_widths(arch.replace("cnn_bn", "cnn", 1)), input_shape, num_classes, "batch")


@register_model("resnet18")
@register_model_family(r"resnet18(_[1-9][0-9]*){4}", "resnet18_<c1>_<c2>_<c3>_<c4> (e.g. resnet18_32_64_128_256)")
def _resnet_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.resnet import RESNET18_WIDTHS, resnet18

    return resnet18(name_widths(arch) or RESNET18_WIDTHS, input_shape, num_classes)


@register_model_family(r"vit_[1-9][0-9]*_[1-9][0-9]*", "vit_<dim>_<mlp_dim> (e.g. vit_512_512)",
                       Inputs(side_multiple=VIT_PATCH_SIZE, why=f"the patch size {VIT_PATCH_SIZE} tiles the image"))
def _vit_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.vit import vit

    dim, mlp_dim = name_widths(arch)
    return vit(arch, dim, mlp_dim, input_shape, num_classes, VIT_PATCH_SIZE)


@register_model(*(f"efficientnet_{variant}" for variant in EFFICIENTNET_VARIANTS))
def _efficientnet_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.efficientnet import efficientnet

    return efficientnet(arch.removeprefix("efficientnet_"), input_shape, num_classes)


@register_model_family(r"timm:[A-Za-z0-9_.\-]+", "timm:<name> (e.g. timm:resnet18)")
def _timm_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.timm_models import timm_model

    return timm_model(arch, input_shape, num_classes)


@register_model(*CODIST_NAMES, inputs=Inputs(min_side=12, why="two valid 3x3 convolutions, a 2x2 pool, a third "
                                             "one and a pool leave at least 1x1"))
def _codist_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.codist_cnn import codist_cnn

    return codist_cnn(arch, input_shape, num_classes)


@register_model_family(r"wrn_[1-9][0-9]*_[1-9][0-9]*", "wrn_<depth>_<k> (e.g. wrn_40_1, wrn_40_2)")
def _wrn_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.wrn import wrn

    depth, widen = name_widths(arch)
    return wrn(depth, widen, input_shape, num_classes)


@register_model("shufflenetv2")
def _shufflenet_v2_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.cifar_stems import shufflenet_v2

    return shufflenet_v2(input_shape, num_classes)


@register_model("mobilenetv2")
def _mobilenet_v2_from_name(arch: str, input_shape: tuple[int, int, int], num_classes: int) -> nn.Module:
    from lit_fl.models.cifar_stems import mobilenet_v2

    return mobilenet_v2(input_shape, num_classes)

def is_sequence_model(arch: str) -> bool:
    """Whether ``arch`` is one of lit-fl's language models (token ids in, next-token logits out)."""
    inputs = inputs_of(arch)
    return inputs is not None and inputs.tokens


def language_models() -> list[str]:
    """The names and family examples of the language models, for messages."""
    return ([str(name) for name in MODELS if INPUTS[str(name)].tokens]
            + [example for pattern, (_, example, _) in MODEL_FAMILIES.items() if INPUTS[str(pattern)].tokens])


def check_model_for_data(arch: str, key: str, sequence: bool, dataset: str,
                         input_shape: tuple[int, ...] | None = None) -> None:
    """Refuse in one line a model whose declared :class:`Inputs` the data breaks: an image model for token
    sequences, a language model for images, image sides a model cannot take (``input_shape``, where given). A
    user's own ``module:factory`` is taken as given."""
    inputs = inputs_of(arch)
    problem = None if inputs is None else inputs.problem(sequence, input_shape)
    if problem is not None:
        held = "token sequences" if sequence else "images" + (
            f" of shape {'x'.join(map(str, input_shape))}" if input_shape else "")
        allowed = f"a language model ({', '.join(language_models())})" if sequence else "an image model" + (
            " for these images" if inputs.tokens is sequence else "")
        raise ConfigError(f"{key}: {arch} {problem} and {dataset} holds {held}; allowed: {allowed}")


@register_model_family(r"lstm(_[1-9][0-9]*){3}", "lstm_<embed>_<hidden>_<layers> (e.g. lstm_96_670_1)", TOKENS)
def _word_lstm_from_name(arch: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from lit_fl.models.lstm import word_lstm

    return word_lstm(arch, *name_widths(arch), input_shape, num_classes)


@register_model("codist_lstm_small", "codist_lstm_large", inputs=TOKENS)
def _codist_lstm_from_name(arch: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from lit_fl.models.lstm import CODIST_LSTMS, word_lstm

    return word_lstm(arch, *CODIST_LSTMS[arch], input_shape, num_classes)


@register_model("char_lstm", inputs=TOKENS)
@register_model_family(r"char_lstm(_[1-9][0-9]*){3}", "char_lstm_<embed>_<hidden>_<layers> (e.g. char_lstm_8_256_2)",
                       TOKENS)
def _char_lstm_from_name(arch: str, input_shape: tuple[int, ...], num_classes: int) -> nn.Module:
    from lit_fl.models.lstm import CHAR_LSTM, char_lstm

    widths = [int(c) for c in arch.removeprefix("char_lstm").split("_") if c]
    return char_lstm(arch, *(widths or CHAR_LSTM), input_shape, num_classes)
