"""YAML as lit-fl reads it: PyYAML's safe loader, but a mapping that repeats a key is refused (PyYAML keeps the
last value silently, so ``rounds: 5`` further down a file would win without a word)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from lit_fl.file_schema import FileSchema

#: a YAML file lit-fl reads (a config, a sweep): text, one YAML document, no key repeated in a mapping
YAML_FILE = FileSchema("")


class _StrictLoader(yaml.SafeLoader):
    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)):  # unhashable keys are PyYAML's own error
                continue
            if key in seen:
                raise yaml.constructor.ConstructorError(None, None, f"duplicate key {key!r}", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


def load_yaml(path: str | Path, what: str) -> Any:
    """The YAML document in ``path``; a malformed file or a repeated key is one :class:`~lit_fl.errors.ConfigError`
    line naming ``what`` (e.g. ``sweep sweeps/x.yaml``), the line and the problem (:data:`YAML_FILE`)."""
    text = YAML_FILE.read_text(path, what)
    try:
        return yaml.load(text, Loader=_StrictLoader)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"line {mark.line + 1}: " if mark is not None else ""
        problem = getattr(err, "problem", None) or str(err).splitlines()[0]
        YAML_FILE.refuse(what, f"{where}malformed YAML: {problem}")
