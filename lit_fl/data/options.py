"""``data.options`` (and ``data.proxy.options``): the keyword arguments of a dataset's loader, declared on the
loader's signature and checked here, once for every loader, before it reads a file (torch-free).

An option is a keyword parameter of the loader after ``root, download, seed``; its annotation is its rule: an integer
type of :mod:`lit_fl.constraints` (``vocab_size: PositiveInt = 10_000``, ``test_size: PositiveInt | None = None``)
takes an integer in its range (or null where ``| None``), a ``Literal`` one of its values; any other annotation is
the loader's own to check. A key that is no parameter is refused, naming the ones there are (a loader with
``**options`` takes any key, or the ``allowed`` ones its caller declares).
"""

from __future__ import annotations

import functools
import inspect
import types
import typing
from collections.abc import Callable, Mapping, Sequence
from typing import Annotated, Any

from lit_fl.constraints import Bounds, bounds_of, rule_of
from lit_fl.errors import ConfigError

#: the loader's arguments that are no option: ``loader(root, download, seed, **options)``
LOADER_ARGUMENTS = ("root", "download", "seed")


def option_names(loader: Callable[..., Any]) -> tuple[list[str], bool]:
    """The options ``loader`` declares, and whether it takes any other key too (``**options``)."""
    bound = loader.keywords if isinstance(loader, functools.partial) else {}
    parameters = inspect.signature(loader).parameters.values()
    names = [p.name for p in parameters if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
             and p.name not in LOADER_ARGUMENTS and p.name not in bound]
    return names, any(p.kind is p.VAR_KEYWORD for p in parameters)


def check_options(owner: str, loader: Callable[..., Any], options: Mapping[str, Any],
                  allowed: Sequence[str] | None = None, key: str = "data.options") -> None:
    """Refuse, in one line naming ``key.<option>`` and what is allowed, an option ``loader`` does not declare
    (``allowed``: the names it takes, for a loader with ``**options``) or a value its annotation does not allow;
    ``owner`` (the dataset) is named with an unknown key."""
    names, takes_any = option_names(loader)
    if allowed is not None:
        names, takes_any = list(allowed), False
    unknown = sorted(set(options) - set(names))
    if unknown and not takes_any:
        takes = f" ({owner} takes no such option)" if owner else ""
        raise ConfigError(f"{key}: unknown key {unknown[0]!r}{takes}; allowed: {', '.join(names) or 'none'}")
    hints = _hints(loader)
    for name, value in options.items():
        hint = hints.get(name)
        if hint is None:
            continue
        if _is_integer(hint):
            _check_integer(f"{key}.{name}", value, bounds_of(hint), _is_optional(hint))
        elif (rule := rule_of(hint)) is not None:
            rule.check(f"{key}.{name}", value)


def _check_integer(key: str, value: Any, bounds: Bounds | None, optional: bool) -> None:
    """An integer (not a bool) in ``bounds``, or None when ``optional``: ``allowed: an integer >= 1 (or null)``."""
    if value is None and optional:
        return
    if isinstance(value, int) and not isinstance(value, bool) and (bounds is None or bounds.holds(value)):
        return
    within = f" {bounds.describe()}" if bounds is not None else ""
    raise ConfigError(f"{key}: {value!r} is not allowed; allowed: an integer{within}{' (or null)' if optional else ''}")


@functools.cache
def _hints(loader: Callable[..., Any]) -> dict[str, Any]:
    function = loader.func if isinstance(loader, functools.partial) else loader
    function = inspect.unwrap(function)
    try:
        return typing.get_type_hints(function, include_extras=True)
    except (NameError, TypeError):  # a user's loader whose annotations do not resolve: its own to check
        return {}


def _members(hint: Any) -> tuple[Any, ...]:
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _is_integer(hint: Any) -> bool:
    """``int``, a constrained integer type, either ``| None``."""
    plain = [m for m in _members(hint) if m is not type(None)]
    if len(plain) != 1:
        return False
    member = plain[0]
    if typing.get_origin(member) is Annotated:
        member = member.__origin__
    return member is int


def _is_optional(hint: Any) -> bool:
    return type(None) in _members(hint)
