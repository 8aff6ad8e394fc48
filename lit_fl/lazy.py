"""Lazy package exports (PEP 562): ``from lit_fl import steps`` or ``import lit_fl.federation.topology`` costs
nothing, and a public name's module (and torch, Lightning behind it) is imported the first time the name is used.
This keeps the command line torch-free until a run starts (``lit-fl fit --help`` and config errors)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar, get_type_hints

T = TypeVar("T", bound=type)


def lazy_exports(namespace: dict[str, Any]) -> tuple[Callable, Callable, list[str]]:
    """The ``__getattr__``, ``__dir__`` and ``__all__`` of the package whose globals are ``namespace``.

    Its public names are the ones its ``__init__`` imports under ``if TYPE_CHECKING:``: that block is what type
    checkers read, and read here (:func:`type_checking_imports`) it is also the export table (``_EXPORTS``, name ->
    module), so each name is written once. A name's module is imported the first time the name is used, and the
    value is then kept in ``namespace``."""
    package = namespace["__name__"]
    exports = type_checking_imports(namespace["__file__"])
    namespace["_EXPORTS"] = exports

    def __getattr__(name: str) -> Any:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name]), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted([*namespace, *exports])

    return __getattr__, __dir__, sorted(exports)


def type_checking_imports(path: str) -> dict[str, str]:
    """``name -> module`` of the ``from MODULE import NAME`` statements under a top-level ``if TYPE_CHECKING:`` of
    the source file ``path``."""
    import ast

    tree = ast.parse(Path(path).read_text(encoding="utf-8"))
    blocks = [n.body for n in tree.body if isinstance(n, ast.If) and getattr(n.test, "id", None) == "TYPE_CHECKING"]
    return {alias.asname or alias.name: node.module for body in blocks for node in body
            if isinstance(node, ast.ImportFrom) and node.module for alias in node.names}


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
