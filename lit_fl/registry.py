"""One registry style for everything lit-fl looks up by name (timm's): a decorator at the definition registers it,
and a name that is taken already is refused with one line naming both definitions.

    MODELS = Registry("model")

    @MODELS.register("resnet18")
    def resnet18(arch, input_shape, num_classes): ...

Used for models and model families (:mod:`lit_fl.models.registry`), datasets (:mod:`lit_fl.data.registry`),
partial-training slicing rules (:mod:`lit_fl.steps.slicing`) and algorithms (:mod:`lit_fl.algorithms`).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Hashable, Iterator
from typing import Generic, TypeVar

from lit_fl.errors import ConfigError

T = TypeVar("T")


class DuplicateRegistration(ConfigError):
    """A name registered twice (one line naming both definitions)."""


def definition(obj: object) -> str:
    """Where ``obj`` is defined, for messages: ``module.qualname (file:line)`` as far as Python knows it (a string
    is a place already)."""
    if isinstance(obj, str):
        return obj
    while isinstance(obj, functools.partial):  # a loader registered as partial(load, name=...): where load is
        obj = obj.func
    name = f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__qualname__)}"
    try:
        path = inspect.getsourcefile(obj)  # type: ignore[arg-type]
        line = inspect.getsourcelines(obj)[1]  # type: ignore[arg-type]
    except (OSError, TypeError):
        return name
    return f"{name} ({path}:{line})"


class Registry(Generic[T]):
    """``key -> entry`` in registration order; ``kind`` names the entries in messages (``model``, ``dataset``)."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self._entries: dict[Hashable, T] = {}

    def add(self, key: Hashable, entry: T, defined_by: object | None = None) -> T:
        """Register ``entry`` under ``key``; ``defined_by`` (default: the entry) is what messages point to."""
        if key in self._entries:
            raise DuplicateRegistration(
                f"{self.kind} {key!r} is registered twice: {definition(self._sources[key])} and "
                f"{definition(defined_by if defined_by is not None else entry)}"
            )
        self._entries[key] = entry
        self._sources[key] = defined_by if defined_by is not None else entry
        return entry

    def defined_by(self, key: Hashable) -> object:
        """What registered ``key`` (for messages: :func:`definition`)."""
        return self._sources[key]

    @property
    def _sources(self) -> dict[Hashable, object]:
        sources = self.__dict__.setdefault("_defined_by", {})
        return sources

    def register(self, *keys: Hashable) -> Callable[[T], T]:
        """The decorator: ``@registry.register("name", ...)`` registers the decorated object under every key."""

        def decorate(entry: T) -> T:
            for key in keys:
                self.add(key, entry)
            return entry

        return decorate

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __getitem__(self, key: Hashable) -> T:
        return self._entries[key]

    def __iter__(self) -> Iterator[Hashable]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def items(self) -> list[tuple[Hashable, T]]:
        return list(self._entries.items())

    def names(self) -> list[str]:
        """The keys as sorted strings (for ``--help``, ``lit-fl configs`` and error messages)."""
        return sorted(str(k) for k in self._entries)
