"""The client-SGD settings of every method (``algorithm.local_epochs, loss, lr, momentum, weight_decay,
batch_size``), declared once: their types and ranges in :class:`ClientSGD`, their meaning in
:class:`~lit_fl.algorithms.base.Algorithm`'s docstring, and per method only its paper's defaults.

A method states its defaults as a class attribute and takes only its own keys (the rest reach the base through
``**kwargs``)::

    class ServerFedAvg(Algorithm):
        client_defaults = FEDORION_CLIENTS          # or ClientSGD(local_epochs=10, lr=0.01, ..., batch_size=32)
        requires = (SERVER_BASED, ONE_ARCHITECTURE)  # what it needs: lit_fl.algorithms.requirements

        def __init__(self, client_fraction: Fraction = 0.3, **kwargs: Any) -> None:
            super().__init__(**kwargs)
            self.client_fraction = client_fraction

        # self.local_epochs, self.loss, self.batch_size, self.optimizer (SGDConfig: lr, momentum, weight_decay)

``Algorithm.__init_subclass__`` (:func:`declare_init`) gives every subclass's ``__init__`` the signature that
jsonargparse reads and ``--help`` shows (``lit-fl fit --algorithm.help ServerFedAvg``): the class's own arguments,
then the ones ``**kwargs`` passes on (the base classes', each once), the six with their constrained types and the
class's ``client_defaults``. From Python the same defaults apply (``ServerFedAvg().batch_size == 32``), and a bad
value is one line naming the key, from a config or from Python alike (:func:`lit_fl.constraints.check_arguments`:
ranges and ``Literal`` choices). A subclass inherits its parent's ``client_defaults``; ``replace(Parent.
client_defaults, lr=...)`` changes one. An inherited key a class fixes by name (``super().__init__(sender_fraction=1.0,
**kwargs)``) is not among its keys, as jsonargparse reads it from the source too.

Re-declaring one of the six as an ``__init__`` argument still works (its default becomes the class's
``client_defaults``, its type the constrained one) but says the same thing twice; ``tests/test_settings.py`` keeps the
built-ins from it.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import inspect
import textwrap
import typing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from lit_fl.choices import SupervisedLoss
from lit_fl.constraints import (
    Momentum,
    NonNegativeFloat,
    NonNegativeInt,
    PositiveFloat,
    PositiveInt,
    check_arguments,
    check_fields,
)
from lit_fl.lazy import eager_init_annotations

if TYPE_CHECKING:
    from collections.abc import Callable

PREFIX = "algorithm."


@dataclass(frozen=True)
class ClientSGD:
    """The client-SGD settings (their meaning: :class:`~lit_fl.algorithms.base.Algorithm`'s ``Args``); an instance is
    a method's defaults (``client_defaults``), checked when it is made. The field defaults are a new method's."""

    local_epochs: NonNegativeInt = 1
    loss: SupervisedLoss = "ce"
    lr: PositiveFloat = 0.01
    momentum: Momentum = 0.9
    weight_decay: NonNegativeFloat = 5e-4
    batch_size: PositiveInt = 64

    def __post_init__(self) -> None:
        check_fields(self, PREFIX)


#: the names of the client-SGD settings, in signature order, and their constrained types
CLIENT_SGD: tuple[str, ...] = tuple(f.name for f in dataclasses.fields(ClientSGD))
_TYPES: dict[str, Any] = typing.get_type_hints(ClientSGD, include_extras=True)

#: DFML sec. 4: DFML and every baseline of its tables train with WSM (Eq. 2); SGD as a new method's
DFML_CLIENTS = ClientSGD(loss="wsm")
#: FedORION's shared setting (papers/fedorion.txt sec. 4.1 and 4.2.1), also that of its appendix D baselines: 10 local
#: epochs of cross-entropy, SGD lr 0.01 with momentum 0.9, no weight decay named (0), batch 32
FEDORION_CLIENTS = ClientSGD(local_epochs=10, lr=0.01, momentum=0.9, weight_decay=0.0, batch_size=32)
#: UA-PDFL sec. 4.1 and 5.1.4 (Local, FedPer, UA-PDFL and its decentralized baselines): one local epoch of
#: cross-entropy, SGD with an initial lr of 0.05 and momentum 0.5, batch 50; the paper names no weight decay (0)
UAPDFL_CLIENTS = ClientSGD(local_epochs=1, lr=0.05, momentum=0.5, weight_decay=0.0, batch_size=50)


def declare_init(cls: type, root: bool = False) -> None:
    """Give ``cls`` the ``__init__`` whose signature is its whole set of keys with its ``client_defaults`` (module
    docstring), that fills those defaults when called from Python and checks the class's own typed arguments.
    ``root``: the class whose ``__init__(self, **settings)`` takes the client-SGD settings themselves."""
    own = cls.__dict__.get("__init__")
    if own is not None:
        eager_init_annotations(cls)  # types, not strings: jsonargparse never resolves them (no torch import)
    original = own if own is not None else _inherited_init(cls)
    if root:
        parameters: list[inspect.Parameter] | None = [next(iter(inspect.signature(original).parameters.values()))]
        parameters += [_client_setting(cls, inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD))
                       for name in CLIENT_SGD]
    else:
        parameters = _resolved_parameters(cls, original, own is not None)
    if parameters is None:  # *args: left as written
        return
    signature = inspect.Signature(parameters)
    keyword = [p.name for p in parameters[1:]]

    @functools.wraps(original)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        arguments = {name: bound.arguments[name] for name in keyword}
        if own is not None:
            check_arguments(original, arguments, PREFIX)
        original(self, **arguments)

    __init__.__signature__ = signature  # type: ignore[attr-defined]
    __init__.__qualname__ = f"{cls.__qualname__}.__init__"
    cls.__init__ = __init__  # type: ignore[misc]


def _inherited_init(cls: type) -> Callable[..., None]:
    return next(base.__dict__["__init__"] for base in cls.__mro__[1:] if "__init__" in base.__dict__)


def _resolved_parameters(cls: type, original: Callable[..., None], own: bool) -> list[inspect.Parameter] | None:
    """``self``, the class's own parameters, then (where ``**kwargs`` passes them on) the parent's resolved ones not
    already named, keyword-only; the client-SGD ones typed by :class:`ClientSGD` with the class's defaults."""
    written = list(inspect.signature(original).parameters.values())
    if any(p.kind in (p.VAR_POSITIONAL, p.POSITIONAL_ONLY) for p in written[1:]):
        return None
    if not own:  # the parent's __init__, already resolved (it has no **kwargs left)
        return [_client_setting(cls, p) for p in written]
    named = [p for p in written if p.kind is not p.VAR_KEYWORD]
    redeclared = {p.name: p.default for p in named if p.name in CLIENT_SGD and p.default is not p.empty}
    if redeclared:
        if "client_defaults" in cls.__dict__:
            raise TypeError(f"{cls.__qualname__}: the client-SGD defaults are given twice (client_defaults and "
                            f"__init__ arguments {', '.join(redeclared)}); keep client_defaults")
        cls.client_defaults = dataclasses.replace(cls.client_defaults, **redeclared)  # type: ignore[attr-defined]
    if len(named) < len(written):  # **kwargs: the parent's keys follow, but those it passes to super() itself
        parent = list(inspect.signature(_inherited_init(cls)).parameters.values())
        taken = {p.name for p in named} | _passed_to_super(original, {p.name for p in parent})
        named += [p.replace(kind=p.KEYWORD_ONLY) for p in parent[1:] if p.name not in taken]
    return [_client_setting(cls, p) for p in named]


def _passed_to_super(init: Callable[..., None], inherited: set[str]) -> set[str]:
    """The keywords ``init``'s source passes to ``super().__init__`` by name (``loss="wsm"``): the parent's keys
    the class fixes, so they are not its keys (what jsonargparse reads from the source, too). The source is read
    only when a name of ``inherited`` is among the code's constants (where CPython keeps keyword names)."""
    constants = {c for const in init.__code__.co_consts for c in (const if isinstance(const, tuple) else (const,))}
    if not constants & inherited:
        return set()
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
    except (OSError, TypeError, SyntaxError):  # no source (built interactively): nothing is known to be fixed
        return set()
    return {keyword.arg for node in ast.walk(tree) if isinstance(node, ast.Call) and _is_super_init(node.func)
            for keyword in node.keywords if keyword.arg is not None}


def _is_super_init(func: ast.expr) -> bool:
    return (isinstance(func, ast.Attribute) and func.attr == "__init__" and isinstance(func.value, ast.Call)
            and isinstance(func.value.func, ast.Name) and func.value.func.id == "super")


def _client_setting(cls: type, parameter: inspect.Parameter) -> inspect.Parameter:
    if parameter.name not in CLIENT_SGD:
        return parameter
    return parameter.replace(annotation=_TYPES[parameter.name], default=getattr(cls.client_defaults, parameter.name))
