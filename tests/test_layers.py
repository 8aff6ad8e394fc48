"""The package's layers point one way, read from the source (every import: module level, under TYPE_CHECKING and
inside functions): the round loop (``federation/``) depends on no method (``algorithms/``) and no suite
(``suite/``), the steps (``steps/``) do not depend on the federation, and ``suite/`` has no import circle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lit_fl"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> set[str]:
    """Every ``lit_fl`` module ``path`` imports, wherever the import stands."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("lit_fl"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("lit_fl"):
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)  # ``from lit_fl.suite import engine``
    return found


def graph() -> dict[str, set[str]]:
    modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in imports(path) if m in modules} for name, path in modules.items()}


@pytest.mark.parametrize(("layer", "forbidden"), [
    ("lit_fl.federation", ("lit_fl.algorithms", "lit_fl.suite")),
    ("lit_fl.steps", ("lit_fl.federation", "lit_fl.algorithms", "lit_fl.suite")),
    ("lit_fl.tracking", ("lit_fl.federation", "lit_fl.algorithms", "lit_fl.suite", "lit_fl.commands")),
])
def test_a_layer_imports_nothing_above_it(layer: str, forbidden: tuple[str, ...]) -> None:
    wrong = sorted(f"{module} imports {target}" for module, targets in graph().items()
                   if module.startswith(layer) for target in targets if target.startswith(forbidden))
    assert not wrong, "\n".join(wrong)


def test_suite_has_no_import_circle() -> None:
    edges = {m: {t for t in targets if t.startswith("lit_fl.suite") and t != m}
             for m, targets in graph().items() if m.startswith("lit_fl.suite")}
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(edges.get(module, ())):
            if state.get(target) == 1:
                pytest.fail("import circle: " + " -> ".join([*path[path.index(target):], target]))
            if target not in state:
                visit(target, [*path, target])
        state[module] = 2

    for module in sorted(edges):
        if module not in state:
            visit(module, [module])


def test_the_reader_sees_imports_inside_functions_and_type_checking(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from lit_fl.suite import engine\n"
                      "def f():\n    import lit_fl.algorithms.base\n")
    assert {"lit_fl.suite", "lit_fl.suite.engine", "lit_fl.algorithms.base"} <= imports(source)
