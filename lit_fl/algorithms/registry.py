"""The algorithms lit-fl ships, by class name (``class_path: DFML``), registered at their definitions with
``@register_algorithm`` (:mod:`lit_fl.registry`'s style: a taken name is refused, naming both classes). A method of
your own needs no registration (``class_path: my_module.MyMethod``); registering it lists it in ``lit-fl configs``
and in ``--help``."""

from __future__ import annotations

from typing import TypeVar

from lit_fl.registry import Registry

A = TypeVar("A", bound=type)

#: class name -> class
ALGORITHMS: Registry[type] = Registry("algorithm")


def register_algorithm(cls: A) -> A:
    """Class decorator: register ``cls`` under its class name."""
    return ALGORITHMS.add(cls.__name__, cls)


def algorithm_class_paths() -> list[str]:
    """``module.Class`` of every registered algorithm (built-ins as ``lit_fl.algorithms.Name``), sorted."""
    paths = []
    for name, cls in ALGORITHMS.items():
        builtin = cls.__module__.startswith("lit_fl.algorithms")
        paths.append(f"lit_fl.algorithms.{name}" if builtin else f"{cls.__module__}.{cls.__qualname__}")
    return sorted(paths)
