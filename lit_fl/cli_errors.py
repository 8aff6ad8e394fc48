"""Turn config errors (jsonargparse's and lit-fl's own) into one line that names the key and what is allowed."""

from __future__ import annotations

import re
from collections.abc import Iterable

_KEY = re.compile(r'Parser key "([\w.]+)"')
_LITERAL = re.compile(r"Expected a typing\.Literal\[(.*?)\]\. Got value: (.*)")
_TYPE = re.compile(r"Expected a <class '(\w+)'>\. Got value: (.*)")
_GROUP_UNKNOWN = re.compile(r"Group '([\w.]+)' does not accept option '([\w.]+)'")
_UNKNOWN = re.compile(r"(?:unrecognized arguments: --|does not accept option ')([\w.]+)")
_CLASS_PATH = re.compile(r"Problem with given class_path '([\w.]+)'")
_DOT_PATH = re.compile(r"Expected a dot import path string: (\S+)")
_NOT_ACCEPTED = re.compile(r"Option '([\w.]+)' is not accepted")
_UNION = re.compile(r"Subtypes: \[(.*?)\].*?Given value: (.*)", re.S)
_OURS = re.compile(r"((?:--)?[a-z_]+(?:\.[a-z_]+)*(?::| must\b| was\b| has\b| is\b).*)")


def one_line(err: BaseException, known_keys: Iterable[str] = (), algorithms: Iterable[str] = ()) -> str:
    """The clearest single line for ``err``.

    ``known_keys`` (every dotted config key) lets an unknown key be answered with its siblings;
    ``algorithms`` lists the class names an ``algorithm.class_path`` may take.
    """
    text = str(err)
    keys = _KEY.findall(text)  # nested: "algorithm", then "alpha_max" inside its class_path
    key = ".".join(keys) if keys else None
    if (m := _TYPE.search(text)) and m.group(2).strip().lower().lstrip("+-") in ("nan", "inf", "infinity"):
        return f"{key}: must be a finite number, got {m.group(2).strip()!r}"
    if "Union subtypes" in text and (m := _UNION.search(text)) and not _OURS_IN(text):
        types = [t.split("'")[1] for t in m.group(1).split(",") if "'" in t]
        allowed = " or ".join("null" if t == "NoneType" else t for t in types)
        return f"{key}: expected {allowed}, got {m.group(2).strip().splitlines()[0]!r}"
    if m := _GROUP_UNKNOWN.search(text):
        return _unknown_key(f"{m.group(1)}.{m.group(2)}", list(known_keys))
    if m := _UNKNOWN.search(text):
        return _unknown_key(m.group(1), list(known_keys))
    if (m := _CLASS_PATH.search(text)) and (opt := _NOT_ACCEPTED.search(text)):
        return _unknown_init_arg(keys[0], m.group(1), opt.group(1))
    if m := _LITERAL.search(text):
        allowed = ", ".join(v.strip().strip("'\"") for v in m.group(1).split(","))
        return f"{key}: {m.group(2).strip()!r} is not allowed; allowed: {allowed}"
    if m := _TYPE.search(text):
        return f"{key}: expected {m.group(1)}, got {m.group(2).strip()!r}"
    if m := _CLASS_PATH.search(text):
        return _class_path_problem(keys[0] if keys else "algorithm", m.group(1), algorithms)
    if m := _DOT_PATH.search(text):
        return _class_path_problem(keys[0] if keys else "algorithm", m.group(1), algorithms)
    if "is abstract" in text:
        return f"{key or 'algorithm'}: missing class_path; allowed: {', '.join(algorithms)}"
    if "\n" not in text.strip():
        return text.strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    # lit-fl's own ValueErrors ("data.beta must be > 0, got 0") may arrive wrapped by jsonargparse.
    for line in reversed(lines):
        if (m := _OURS.search(line)) and "Parser key" not in line:
            return m.group(1)
    return " ".join(lines)


def _class_path_problem(key: str, class_path: str, algorithms: Iterable[str]) -> str:
    """A dotted path whose module cannot be imported gets the real cause; a bare unknown name the built-ins."""
    from lit_fl.user_code import import_problem

    module, _, name = class_path.rpartition(".")
    if module and (problem := import_problem(module, name)) is not None:
        return f"{key}.class_path: cannot load {class_path!r}: {problem}"
    return f"{key}: unknown class {class_path!r}; allowed: {', '.join(algorithms)} (or module.ClassName of your own)"


def _unknown_key(key: str, known: list[str]) -> str:
    section = key.rsplit(".", 1)[0] if "." in key else ""
    siblings = sorted({k.split(".")[-1] for k in known if "." in k and k.rsplit(".", 1)[0] == section})
    if not section:
        siblings = sorted({k.split(".")[0] for k in known})
    where = f" of {section}" if section else ""
    allowed = f"; allowed keys{where}: {', '.join(siblings)}" if siblings else ""
    return f"{key}: unknown key{allowed}"


def _unknown_init_arg(section: str, class_path: str, option: str) -> str:
    """An ``init_args`` key the class does not take; when a base class takes it but a subclass's ``__init__`` does
    not forward ``**kwargs``, say so (the key is not unknown, it is cut off)."""
    name = class_path.rsplit(".", 1)[-1]
    allowed = init_args(class_path)
    line = f"{section}.{option}: unknown key for {name}; allowed: {', '.join(allowed)}"
    stops = [klass for klass, forwards in _initialisers(class_path) if not forwards]
    if stops and option in init_args(class_path, follow_kwargs=False, start_after=stops[0]):
        line += (f" ({stops[0].__qualname__}.__init__ takes no **kwargs, so the keys of its base classes, {option} "
                 "among them, cannot reach them: add **kwargs and pass them to super().__init__)")
    return line


def _initialisers(class_path: str) -> list[tuple[type, bool]]:
    """Every class of ``class_path``'s MRO that defines ``__init__``, with whether it takes ``**kwargs``."""
    import importlib
    import inspect

    module, _, name = class_path.rpartition(".")
    cls = getattr(importlib.import_module(module), name)
    out = []
    for klass in cls.__mro__:
        if "__init__" in vars(klass) and klass is not object:
            params = inspect.signature(klass.__init__).parameters.values()
            out.append((klass, any(p.kind == p.VAR_KEYWORD for p in params)))
    return out


def init_args(class_path: str, follow_kwargs: bool = True, start_after: type | None = None) -> list[str]:
    """Constructor arguments of ``class_path`` including those its ``**kwargs`` pass to base classes (a class
    whose ``__init__`` takes no ``**kwargs`` ends the chain; ``follow_kwargs=False``: every class's, and
    ``start_after``: only the classes after that one)."""
    import inspect

    names: list[str] = []
    started = start_after is None
    for klass, forwards in _initialisers(class_path):
        if not started:
            started = klass is start_after
            continue
        for param in inspect.signature(klass.__init__).parameters.values():
            if param.name != "self" and param.kind not in (param.VAR_KEYWORD, param.VAR_POSITIONAL):
                names.append(param.name)
        if follow_kwargs and not forwards:
            break
    return sorted(dict.fromkeys(names))


def _OURS_IN(text: str) -> bool:  # noqa: N802
    """Whether a Union error wraps one of lit-fl's own messages (then that message is the clearer line)."""
    return any(" must " in line or "allowed:" in line for line in text.splitlines()[1:])
