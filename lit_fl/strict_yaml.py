"""YAML as lit-fl reads it: PyYAML's safe loader, but a mapping that repeats a key is refused (PyYAML keeps the
last value silently, so ``rounds: 5`` further down a file would win without a word), and so is a document whose
aliases expand to more than :data:`MAX_NODES` nodes (a "billion laughs" bomb: 700 bytes that expand to 10^9 nodes
in whatever walks the parsed value)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lit_fl.file_schema import MAX_TEXT_BYTES, FileSchema

#: a YAML file lit-fl reads (a config, a sweep): text, one YAML document, no key repeated in a mapping
YAML_FILE = FileSchema("")
#: the most nodes a YAML document may hold with every alias expanded (a real config holds a few hundred)
MAX_NODES = 100_000


class _AliasBomb(yaml.YAMLError):
    """A document whose aliases expand beyond :data:`MAX_NODES`."""


class _DuplicateKey(yaml.constructor.ConstructorError):
    """A mapping that repeats a key."""


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):  # unhashable keys are PyYAML's own error
                continue
            if key in seen:
                raise _DuplicateKey(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)

    def construct_document(self, node: yaml.Node) -> Any:
        _check_expansion(node)
        return super().construct_document(node)


def _check_expansion(root: yaml.Node) -> None:
    """Count the nodes of ``root``'s graph with every alias expanded, each node's size computed once (memoised:
    linear in the composed graph, so a bomb is refused at once); a cycle (``&a [*a]``) counts its link as one."""
    sizes: dict[int, int] = {}
    opened: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, children_done = stack.pop()
        if children_done:
            sizes[id(node)] = size = 1 + sum(sizes.get(id(child), 1) for child in _children(node))
            if size > MAX_NODES:
                raise _AliasBomb(f"its aliases expand to more than {MAX_NODES:,} nodes (an alias bomb?); lit-fl "
                                 f"reads YAML of at most {MAX_NODES:,} nodes with aliases expanded")
        elif id(node) not in opened:
            opened.add(id(node))
            stack.append((node, True))
            stack.extend((child, False) for child in _children(node) if id(child) not in opened)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return list(node.value) if isinstance(node, yaml.SequenceNode) else []


def load_yaml(path: str | Path, what: str) -> Any:
    """The YAML document in ``path``; a malformed file or a repeated key is one :class:`~lit_fl.errors.ConfigError`
    line naming ``what`` (e.g. ``sweep sweeps/x.yaml``), the line and the problem (:data:`YAML_FILE`)."""
    return parse_yaml(YAML_FILE.read_text(path, what), what)


def parse_yaml(text: str, what: str) -> Any:
    """The YAML document ``text`` (read from ``what``), refused as :func:`load_yaml` refuses a file."""
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _AliasBomb as err:
        YAML_FILE.refuse(what, str(err))
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        YAML_FILE.refuse(what, f"{where}malformed YAML: {problem}")


#: jsonargparse's own YAML loader, which :func:`jsonargparse_yaml_load` calls once the bounds hold
_JSONARGPARSE_YAML: list[Any] = []


def jsonargparse_yaml_load(text: str) -> Any:
    """jsonargparse's YAML loader with lit-fl's bounds, for what jsonargparse reads itself: every command-line value
    and a section's file named inside a config (``data: data/iid.yaml``), which never passes through
    :func:`load_yaml`. An alias bomb or a repeated key is one :class:`~lit_fl.errors.ConfigError` line; text that is
    not YAML goes on to jsonargparse's own loader, which reports it (or keeps it as a string) as it always has."""
    what = "a YAML file or value read by the config parser (a config section's file)"
    if len(text) > MAX_TEXT_BYTES:
        YAML_FILE.refuse(what, f"{len(text):,} characters; lit-fl reads at most {MAX_TEXT_BYTES:,}")
    try:
        yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except _AliasBomb as err:
        YAML_FILE.refuse(what, str(err))
    except _DuplicateKey as err:
        YAML_FILE.refuse(what, f"line {err.problem_mark.line + 1}: {err.problem}")
    except yaml.YAMLError:
        pass
    return _JSONARGPARSE_YAML[0](text)


def bound_jsonargparse() -> None:
    """Make :func:`jsonargparse_yaml_load` the loader of jsonargparse's ``yaml`` mode (the mode lit-fl's parsers
    use); its exceptions stay PyYAML's."""
    from jsonargparse import get_loader, set_loader

    if not _JSONARGPARSE_YAML:
        _JSONARGPARSE_YAML.append(get_loader("yaml"))
    set_loader("yaml", jsonargparse_yaml_load, exceptions=(yaml.YAMLError,))
