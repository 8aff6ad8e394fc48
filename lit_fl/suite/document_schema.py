"""The documents the suite reads (what the keys of a YAML or JSON file may hold), declared as typed pydantic models
and read in one call: :func:`read_as`. Whether the file itself can be read (a regular file, text, a mapping) is
:mod:`lit_fl.file_schema`'s part.

Each on-disk format (a sweep file, its ``.paper.yaml``, a sweep's ``manifest.json``, ``coverage.yaml``) is a model
whose fields say what each key may hold (``Literal`` choices, constrained numbers and strings, ``extra="forbid"``
for unknown keys) and whose validators hold the rules between keys. :func:`read_as` validates a whole file against
its model and turns the first problem pydantic finds into the one :class:`ConfigError` line the command line prints::

    <what> <file>: <location>: <problem>; allowed: <what the key may be>

where the location is the dotted key, a list's items counted from 1 as the rest of the suite counts them
(``claims[2].at``: the second claim's ``at``). A rule between keys (a validator) names its key with
:func:`refuse`. The types below are the ones several files share.
"""

from __future__ import annotations

import functools
import types
import typing
from collections.abc import Sequence
from typing import Annotated, Any, Literal, TypeVar, get_args, get_origin

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    StrictStr,
    StringConstraints,
    TypeAdapter,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from lit_fl.errors import ConfigError

T = TypeVar("T")


class FileModel(BaseModel):
    """A mapping of a file: unknown keys refused (and the known ones named), read-only once read."""

    model_config = ConfigDict(extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True)


def _as_text(value: Any) -> Any:
    """A number where text is expected (a YAML label ``2020``) as its text; anything else as given (a bool, a list:
    refused as not text)."""
    return str(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else value


def _fraction(value: float) -> float:
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"must be a fraction in [0, 1] (73.66% is 0.7366), got {value!r}")
    return value


def _one_line(text: str) -> str:
    return " ".join(text.split())


#: non-empty text, stripped (a claim's text, a config key)
Text = Annotated[StrictStr, StringConstraints(strip_whitespace=True, min_length=1)]
#: non-empty text on one line (a reason, a note written over several YAML lines)
Prose = Annotated[Text, AfterValidator(_one_line)]
#: text, or a number read as text (a label, a source); may be empty
Label = Annotated[StrictStr, BeforeValidator(_as_text)]
#: a label on one line (a note written over several YAML lines); may be empty
Note = Annotated[Label, AfterValidator(_one_line)]
#: a metrics.csv column's name
Column = Text
#: a finite number (not a bool, not a string)
Number = Annotated[float, Strict(), Field(allow_inf_nan=False)]
#: a fraction in [0, 1], as metrics.csv holds accuracies
Fraction = Annotated[Number, AfterValidator(_fraction)]
#: a seed: an integer >= 0 (not a bool)
Seed = Annotated[int, Strict(), Field(ge=0)]


def refuse(location: Sequence[str | int], reason: str, allowed: Sequence[Any] = ()) -> PydanticCustomError:
    """The error a validator raises for a rule between keys: ``reason`` about the key at ``location`` (relative to the
    model the validator belongs to; list items counted from 0, as pydantic counts them), with what is ``allowed``."""
    return PydanticCustomError("refused", "{reason}", {"reason": reason, "at": tuple(location),
                                                       "allowed": [str(a) for a in allowed]})


def read_as(model: type[T], raw: Any, where: str, json: bool = False, hint: str = "") -> T:
    """``raw`` (a file's parsed contents, or its JSON text when ``json``) validated as ``model`` (a model, dataclass
    or any type pydantic validates) in one call; the first problem is one :class:`ConfigError` line starting with
    ``where`` (e.g. ``paper numbers sweeps/x.paper.yaml``), naming the key and what it allows, then ``hint`` (what
    to do about it) where given."""
    adapter = _adapter(model)
    try:
        return adapter.validate_json(raw) if json else adapter.validate_python(raw)
    except ValidationError as err:
        errors = err.errors()  # an unknown key first: a misspelt key explains the missing one it was meant to be
        first = problem(model, min(errors, key=lambda e: e["type"] not in _UNKNOWN))
        raise ConfigError(f"{where}: {first}" + (f"; {hint}" if hint else "")) from None


@functools.cache
def _adapter(model: Any) -> TypeAdapter[Any]:
    return TypeAdapter(model)


def problem(model: Any, error: Any) -> str:
    """One pydantic error (an item of ``ValidationError.errors()``) as ``<location>: <problem>; allowed: ...``."""
    ctx = error.get("ctx") or {}
    loc = _plain(model, tuple(part for part in error["loc"] if part != "[key]")) + tuple(ctx.get("at", ()))
    kind, got = error["type"], _shown(error.get("input"))
    allowed: list[str] = []
    if kind == "json_invalid":
        text = f"not JSON ({ctx.get('error', 'invalid')})"
    elif kind in _UNKNOWN:
        loc, key = loc[:-1], loc[-1]
        text, allowed = f"unknown key {key!r}", _keys(_type_at(model, loc))
    elif kind in ("missing", "missing_argument"):
        loc, key = loc[:-1], loc[-1]
        required = _keys(_type_at(model, loc), required=True)
        text = f"needs key {key!r}" + (f"; required: {', '.join(required)}" if required else "")
    elif kind == "literal_error":
        text, allowed = f"unknown value {got}", [str(a) for a in _choices(_type_at(model, loc))]
    elif kind in ("model_type", "dataclass_type", "model_attributes_type", "dict_type"):
        keys = _keys(_type_at(model, loc))
        text = f"expected a mapping{' with keys ' + ', '.join(keys) if keys else ''}, got {got}"
    elif kind == "refused":
        text, allowed = str(ctx["reason"]), list(ctx.get("allowed", []))
    elif kind == "value_error":  # a validator's own message
        text = error["msg"].removeprefix("Value error, ")
    elif kind in _EXPECTED:
        text = f"expected {_EXPECTED[kind].format(**ctx)}, got {got}"
    else:
        message = error["msg"].removeprefix("Value error, ").removeprefix("Assertion failed, ")
        text = f"{message[:1].lower()}{message[1:]}, got {got}"
    return f"{_where(loc)}{text}" + (f"; allowed: {', '.join(allowed)}" if allowed else "")


#: an unknown key (of a model, of a dataclass)
_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument")
#: pydantic's error types in the words of a YAML file (a tuple is a list there, a str text)
_EXPECTED = {
    "list_type": "a list", "tuple_type": "a list", "string_type": "text", "string_too_short": "non-empty text",
    "float_type": "a number", "float_parsing": "a number", "finite_number": "a finite number", "int_type": "an integer",
    "int_parsing": "an integer", "int_from_float": "an integer", "too_short": "at least {min_length} item(s)",
    "greater_than_equal": "a number >= {ge}", "less_than_equal": "a number <= {le}",
}


def _where(loc: Sequence[str | int]) -> str:
    """``claims[2].at: `` (list items counted from 1), or nothing for the file as a whole."""
    out = ""
    for part in loc:
        out += f"[{part + 1}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return f"{out}: " if out else ""


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(model: Any, loc: tuple[str | int, ...]) -> tuple[str | int, ...]:
    """``loc`` without the tags pydantic adds for the member of a union it tried (``sweeps.1.constrained-str``)."""
    for end in range(len(loc)):
        if isinstance(loc[end], str) and _is_union(_unannotated(_type_at(model, loc[:end], bare=False))):
            return loc[:end] + _plain(None, loc[end + 1:])
    return loc


def _type_at(model: Any, loc: Sequence[str | int], bare: bool = True) -> Any:
    """The declared type at ``loc`` inside ``model`` (None where the location leaves the declarations)."""
    tp = model
    for part in loc:
        tp = _bare(tp)
        fields = _fields(tp)
        if fields is not None and isinstance(part, str):
            by_key = {(f.alias or name): f.annotation for name, f in fields.items()}
            tp = by_key.get(part, {name: f.annotation for name, f in fields.items()}.get(part))
        elif get_origin(tp) in (list, tuple, Sequence) and isinstance(part, int):
            tp = get_args(tp)[0]
        elif get_origin(tp) is dict and isinstance(part, str):
            tp = get_args(tp)[1]
        else:
            return None
    return _bare(tp) if bare else tp


def _unannotated(tp: Any) -> Any:
    while get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    return tp


def _is_union(tp: Any) -> bool:
    members = [a for a in get_args(tp) if a is not type(None)]
    return get_origin(tp) in (typing.Union, types.UnionType) and len(members) > 1


def _bare(tp: Any) -> Any:
    """``tp`` without ``Annotated`` and ``| None``."""
    while True:
        if get_origin(tp) is Annotated:
            tp = get_args(tp)[0]
        elif get_origin(tp) in (typing.Union, types.UnionType):
            tp = next(a for a in get_args(tp) if a is not type(None))
        else:
            return tp


def _fields(tp: Any) -> dict[str, Any] | None:
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return dict(tp.model_fields)
    if isinstance(tp, type) and hasattr(tp, "__pydantic_fields__"):  # a dataclass pydantic has validated
        return dict(tp.__pydantic_fields__)
    return None


def _keys(tp: Any, required: bool = False) -> list[str]:
    fields = _fields(tp) or {}
    return sorted(f.alias or name for name, f in fields.items() if f.is_required() or not required)


def _choices(tp: Any) -> tuple[Any, ...]:
    return get_args(tp) if get_origin(tp) is Literal else ()
