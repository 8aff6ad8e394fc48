"""Ranges and choices of config keys, written once, on the signatures: ``lr: PositiveFloat``, ``momentum: Momentum``,
``loss: Literal["wsm", "ce"]``.

A constrained type is ``Annotated[int | float, Bounds(...)]``: jsonargparse reads the plain type (and ``--help``
shows it), and :func:`checked_init` checks the value when the object is built, from a config or from Python alike,
with the one-line message every key gets: ``algorithm.lr must be > 0, got 0``. A ``Literal`` (or ``Literal | None``)
is checked the same way, with the line the command line gives for it (``algorithm.loss: 'x' is not allowed;
allowed: wsm, ce``), so no hand-written "must be one of" repeats it. Rules that tie several keys together stay in the
``setup``/``__init__`` of what owns them.
"""

from __future__ import annotations

import functools
import inspect
import math
import types
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Literal, TypeVar

from lit_fl.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True, repr=False)
class Bounds:
    """``low <= value <= high`` (either side open or absent); ``note`` follows the range in messages."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    note: str = ""

    def holds(self, value: float) -> bool:
        if isinstance(value, float) and math.isnan(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        return not (self.high is not None and (value >= self.high if self.high_open else value > self.high))

    def describe(self) -> str:
        """``> 0``, ``>= 1``, ``in (0, 1]``."""
        if self.low is not None and self.high is not None:
            left, right = "(" if self.low_open else "[", ")" if self.high_open else "]"
            return f"in {left}{_number(self.low)}, {_number(self.high)}{right}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_number(self.low)}"
        return f"{'<' if self.high_open else '<='} {_number(self.high)}"

    def __repr__(self) -> str:  # how --help shows the type: Annotated[float, > 0]
        return self.describe()

    def check(self, key: str, value: Any) -> None:
        """One line naming ``key`` and the range when ``value`` (None: unset, allowed) lies outside."""
        if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
            return
        if not self.holds(value):
            note = f" {self.note}" if self.note else ""
            raise ConfigError(f"{key} must be {self.describe()}{note}, got {value}")


def _number(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


#: ``>= 1``: counts (epochs per round that must run, batch sizes, peers)
PositiveInt = Annotated[int, Bounds(1)]
#: ``>= 0``: counts that may be zero (epochs of an optional phase)
NonNegativeInt = Annotated[int, Bounds(0)]
#: ``> 0``: learning rates, temperatures
PositiveFloat = Annotated[float, Bounds(0, low_open=True)]
#: ``>= 0``: weights of loss terms, decays
NonNegativeFloat = Annotated[float, Bounds(0)]
#: ``[0, 1]``: mixing weights, probabilities
UnitInterval = Annotated[float, Bounds(0, 1)]
#: ``(0, 1]``: fractions of the clients that take part
Fraction = Annotated[float, Bounds(0, 1, low_open=True)]
#: ``[0, 1)``: a share that cannot be all (a validation split), SGD momentum
HalfOpenUnitInterval = Annotated[float, Bounds(0, 1, high_open=True)]
Momentum = HalfOpenUnitInterval
#: ``(0, 1)``: a strictly inner share
OpenUnitInterval = Annotated[float, Bounds(0, 1, low_open=True, high_open=True)]


@dataclass(frozen=True)
class Choices:
    """The values of a ``Literal`` annotation (``optional``: None is one of them, ``Literal[...] | None``)."""

    values: tuple[Any, ...]
    optional: bool = False

    def check(self, key: str, value: Any) -> None:
        """One line naming ``key`` and the allowed values when ``value`` is not one of them."""
        if (value is None and self.optional) or any(value == v and type(value) is type(v) for v in self.values):
            return
        raise ConfigError(f"{key}: {value!r} is not allowed; allowed: {', '.join(str(v) for v in self.values)}")


def choices_of(annotation: Any) -> Choices | None:
    """The :class:`Choices` of a ``Literal`` (also ``Annotated`` or ``| None``); None for any other type, a union that
    mixes a ``Literal`` with other types included (its own code checks it)."""
    if typing.get_origin(annotation) is Annotated:
        return choices_of(annotation.__origin__)
    if typing.get_origin(annotation) is Literal:
        return Choices(typing.get_args(annotation))
    members = typing.get_args(annotation) if typing.get_origin(annotation) in (typing.Union, types.UnionType) else ()
    literals = [m for m in members if typing.get_origin(m) is Literal]
    if not literals or len(literals) + (type(None) in members) != len(members):
        return None
    return Choices(tuple(v for m in literals for v in typing.get_args(m)), optional=type(None) in members)


Rule = Bounds | Choices


def bounds_of(annotation: Any) -> Bounds | None:
    """The :class:`Bounds` of a constrained type (also inside ``X | None``)."""
    if typing.get_origin(annotation) is Annotated:
        return next((m for m in annotation.__metadata__ if isinstance(m, Bounds)), None)
    for arg in typing.get_args(annotation):
        found = bounds_of(arg)
        if found is not None:
            return found
    return None


def check_arguments(function: Callable[..., Any], arguments: Mapping[str, Any], prefix: str) -> None:
    """Check every argument whose annotation in ``function``'s signature is a constrained type or a ``Literal``."""
    for name, rule in _rules(function).items():
        if name in arguments:
            rule.check(f"{prefix}{name}", arguments[name])


def rule_of(annotation: Any) -> Rule | None:
    """What :func:`check_arguments` checks for a parameter annotated ``annotation`` (None: nothing)."""
    return bounds_of(annotation) or choices_of(annotation)


@functools.cache
def _rules(function: Callable[..., Any]) -> dict[str, Rule]:
    try:
        hints = typing.get_type_hints(function, include_extras=True)
    except NameError:  # an annotation not resolvable yet: only what is resolvable is checked
        hints = {k: v for k, v in getattr(function, "__annotations__", {}).items() if not isinstance(v, str)}
    return {name: rule for name, hint in hints.items() if (rule := rule_of(hint)) is not None}


def check_fields(config: Any, prefix: str) -> None:
    """Check every field of the dataclass ``config`` whose type is constrained or a ``Literal``, named
    ``{prefix}{field}``."""
    import dataclasses

    check_arguments(type(config), {f.name: getattr(config, f.name) for f in dataclasses.fields(config)}, prefix)


def checked_init(init: F, prefix: str) -> F:
    """``init`` that first checks its constrained and ``Literal`` arguments (as passed, defaults included) under
    ``prefix``."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def checked(self: Any, *args: Any, **kwargs: Any) -> None:
        bound = signature.bind(self, *args, **kwargs)
        bound.apply_defaults()
        check_arguments(init, bound.arguments, prefix)
        init(self, *args, **kwargs)

    checked.__lit_fl_checked__ = True  # type: ignore[attr-defined]
    return checked  # type: ignore[return-value]

#: ``>= 2``: a batch whose statistics a BatchNorm layer normalises by
BatchStatisticsSize = Annotated[int, Bounds(2, note="(batch statistics)")]
