"""Lazy package exports (PEP 562): ``from lit_fl import steps`` or ``import lit_fl.federation.topology`` costs
nothing, and a public name's module (and torch, Lightning behind it) is imported the first time the name is used.
This keeps the command line torch-free until a run starts (``lit-fl fit --help`` and config errors)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, TypeVar, get_type_hints

T = TypeVar("T", bound=type)


def lazy_exports(package: str, namespace: dict[str, Any], exports: dict[str, str]) -> tuple[Callable, Callable]:
    """The ``__getattr__`` and ``__dir__`` of ``package`` whose public names live in the modules ``exports`` maps
    them to; a name is imported once and then kept in ``namespace`` (the package's globals)."""

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__


def eager_init_annotations(cls: T) -> T:
    """Evaluate ``cls.__init__``'s annotations now (they name hyper-parameter types only: builtins, ``Literal``
    choices, config classes), so that jsonargparse reads types instead of strings. Given strings, it would run
    the module's ``TYPE_CHECKING`` imports to resolve them, and those import torch. Annotations that cannot be
    evaluated yet (a user's algorithm naming a class defined below it) stay strings, as before."""
    init = cls.__dict__.get("__init__")
    if init is not None:
        try:
            init.__annotations__ = get_type_hints(init, include_extras=True)  # constrained types keep their range
        except NameError:  # names a class defined later, or one imported for type checkers only: left to jsonargparse
            pass
    return cls
