"""The package's layers point one way, read from the source with ``ast``: no import circle anywhere in ``lit_fl/``,
and every import goes down the layer order declared once below (:data:`LAYERS`, DESIGN.md "Layers").

What counts as an arrow ``a -> b`` (module ``a`` imports lit_fl module ``b``):

* every ``import`` and ``from ... import`` of a lit_fl module, at module level or inside a function. A function-level
  import runs whenever the function does: deferring it keeps the command line fast, and a circle through it still
  means two modules that cannot be understood (or moved) apart, so it is no licence to import upward or in a circle;
* ``from lit_fl.steps import LocalTraining`` points at the module that defines ``LocalTraining`` when the package
  exports it (its ``__init__`` imports the name, eagerly or, for a lazy package, under ``TYPE_CHECKING``, the
  block that is its export table); a lazy package (:func:`lit_fl.lazy.lazy_exports`) points at every module of its
  export table, which it imports when a name is first used (the table read here is checked against the package's
  own reading below);
* imports under ``if TYPE_CHECKING:`` never run, so they cannot close an import circle and the circle check leaves
  them out; they still say that ``a`` knows ``b``'s types, so the layer order counts them.

Not arrows: the parent packages Python initialises before a submodule (every module would point at its package's
``__init__``), and modules loaded by a name held in a table (the CLI's command table, the dataset registry's
built-ins): a lookup by name, the registry's direction.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "lit_fl"

#: lit_fl's packages and top-level modules, top to bottom: a module imports its own package (or module) and the rows
#: below its own, never a row above; the names of one row import none of each other. DESIGN.md's layers (cli,
#: experiment, algorithms, federation, steps, then models, data and losses) with the command-line modules above the
#: experiment and the utility modules below everything that uses them.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),  # lit-fl COMMAND: the dispatcher
    ("commands",),  # fit, sweep, compare, partition, configs
    ("suite",),  # sweep files, plans, the local runner, compare's results, tables and figures
    ("fit_config",),  # lit-fl fit's parser, its config files and the experiment they prepare
    ("experiment",),  # builds everything from one config, owns the run directory
    ("validation",),  # the whole config's checks before a run starts
    ("algorithms",),
    ("federation",),
    ("privacy", "system"),  # differential privacy; client systems and the virtual clock
    ("config",),  # the typed config sections of data and models
    ("steps",),
    ("losses",),
    ("models", "data"),
    ("tracking", "run_dir", "cli_errors", "configs", "kernel_count"),
    ("io", "strict_yaml", "user_code", "registry", "constraints", "choices", "lazy", "run_identity", "stop_signals"),
    ("file_schema",),  # what the files lit-fl reads must hold, and the one check of them
    ("faultpoints", "errors", "__init__"),  # __init__: the package root (its version)
)

#: arrows back up the layers that stay, ``(from, to) -> why`` (at most one may): none
ALLOWED_UP: dict[tuple[str, str], str] = {}


@dataclass(frozen=True)
class Arrow:
    source: str
    target: str
    line: int
    type_only: bool  # under ``if TYPE_CHECKING:``

    def __str__(self) -> str:
        kind = " (TYPE_CHECKING)" if self.type_only else ""
        return f"{self.source} -> {self.target} (line {self.line}){kind}"


def module_name(path: Path, package: Path = PACKAGE) -> str:
    parts = path.relative_to(package.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def import_nodes(tree: ast.AST, type_only: bool = False) -> Iterator[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement under ``tree`` (functions included) and whether it stands under ``TYPE_CHECKING``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node, type_only
        elif isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.body:
                yield from import_nodes(ast.Module(body=[child], type_ignores=[]), True)
            for child in node.orelse:
                yield from import_nodes(ast.Module(body=[child], type_ignores=[]), type_only)
            continue
        yield from import_nodes(node, type_only)


def imported_names(node: ast.Import | ast.ImportFrom, module: str, is_package: bool) -> Iterator[tuple[str, str]]:
    """``(module, name)`` per name the statement imports (``name`` empty for ``import module``); relative imports
    resolved against ``module``."""
    if isinstance(node, ast.Import):
        for alias in node.names:
            yield alias.name, ""
        return
    base = node.module or ""
    if node.level:
        parts = module.split(".") if is_package else module.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([node.module] if node.module else []))
    for alias in node.names:
        yield base, alias.name


@dataclass
class Source:
    name: str
    tree: ast.Module
    is_package: bool

    @property
    def is_lazy(self) -> bool:
        return self.is_package and any(
            isinstance(n, ast.Call) and getattr(n.func, "id", None) == "lazy_exports" for n in ast.walk(self.tree))

    def exports(self) -> dict[str, str]:
        """``name -> module`` of what a package's ``__init__`` imports from lit_fl (for a lazy package: its export
        table, the block under ``TYPE_CHECKING``)."""
        found = {}
        lazy = self.is_lazy
        for node, type_only in import_nodes(self.tree):
            if lazy and not type_only:
                continue
            for module, name in imported_names(node, self.name, self.is_package):
                if name and module.startswith("lit_fl"):
                    found[name] = module
        return found


def sources(package: Path = PACKAGE) -> dict[str, Source]:
    names = {p: module_name(p, package) for p in sorted(package.rglob("*.py"))}
    return {name: Source(name, ast.parse(p.read_text()), p.name == "__init__.py") for p, name in names.items()}


def arrows(modules: dict[str, Source] | None = None) -> list[Arrow]:
    """Every arrow between lit_fl modules (see the module docstring)."""
    modules = sources() if modules is None else modules
    exports = {name: m.exports() for name, m in modules.items() if m.is_package}
    found: list[Arrow] = []
    for name, source in modules.items():
        for node, type_only in import_nodes(source.tree):
            for module, imported in imported_names(node, name, source.is_package):
                if f"{module}.{imported}" in modules:  # from lit_fl import steps
                    target = f"{module}.{imported}"
                else:
                    target = exports.get(module, {}).get(imported, module)
                if target in modules and target != name:
                    found.append(Arrow(name, target, node.lineno, type_only))
        if source.is_lazy:  # its __getattr__ imports the module of each name it exports
            found += [Arrow(name, target, 0, False) for target in sorted(set(exports[name].values())) if target != name]
    return sorted(set(found), key=str)  # one per statement and target


def find_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """One circle through each strongly connected group of ``edges`` (Tarjan), as ``[a, b, ..., a]``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    groups: list[set[str]] = []

    def connect(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(edges):
        if node not in index:
            connect(node)
    return [_circle_in(group, edges) for group in groups]


def _circle_in(group: set[str], edges: dict[str, set[str]]) -> list[str]:
    """A shortest circle from the group's first module back to itself, inside the group (breadth first)."""
    start = min(group)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for target in sorted(edges.get(node, set()) & group):
            if target == start:
                return [*paths[node], start]
            if target not in paths:
                paths[target] = [*paths[node], target]
                queue.append(target)
    raise AssertionError(f"no circle in {sorted(group)}")


def layer_of(module: str) -> str:
    """The package or top-level module of ``module`` (``lit_fl.steps.runner`` -> ``steps``; the root: ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


RANK = {layer: row for row, names in enumerate(LAYERS) for layer in names}


def arrows_up(found: list[Arrow]) -> list[str]:
    """Every arrow that does not go down :data:`LAYERS` (and is not allowed in :data:`ALLOWED_UP`)."""
    wrong = []
    for arrow in found:
        source, target = layer_of(arrow.source), layer_of(arrow.target)
        if source != target and RANK[source] >= RANK[target] and (source, target) not in ALLOWED_UP:
            wrong.append(f"{source} -> {target}: {arrow}")
    return sorted(wrong)


def test_no_import_circle() -> None:
    edges: dict[str, set[str]] = {}
    for arrow in arrows():
        if not arrow.type_only:
            edges.setdefault(arrow.source, set()).add(arrow.target)
    circles = find_cycles(edges)
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_every_arrow_goes_down_the_layers() -> None:
    wrong = arrows_up(arrows())
    assert not wrong, f"{len(wrong)} arrows go up the layers:\n" + "\n".join(wrong)


def test_every_package_and_module_has_one_layer() -> None:
    declared = [name for row in LAYERS for name in row]
    assert len(declared) == len(set(declared))
    assert {layer_of(m) for m in sources()} == set(declared)
    assert len(ALLOWED_UP) <= 1


def test_lazy_packages_read_their_export_tables_as_the_layers_do() -> None:
    """The arrows of a lazy package are read from its ``TYPE_CHECKING`` block: it must equal the table the package
    reads from it at run time."""
    lazy = [m for m in sources().values() if m.is_lazy]
    assert {m.name for m in lazy} >= {"lit_fl.steps", "lit_fl.models", "lit_fl.data", "lit_fl.federation"}
    for source in lazy:
        assert source.exports() == importlib.import_module(source.name)._EXPORTS, source.name


def test_the_reader_counts_function_imports_and_marks_type_checking(tmp_path: Path) -> None:
    package = tmp_path / "lit_fl"
    (package / "steps").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "suite.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                      "    from lit_fl.algorithms import base\ndef f():\n    import lit_fl.config\n")
    (package / "algorithms.py").write_text("from lit_fl.steps import Step\n")
    (package / "config.py").write_text("")
    (package / "steps" / "__init__.py").write_text(
        "from typing import TYPE_CHECKING\nfrom lit_fl.lazy import lazy_exports\nif TYPE_CHECKING:\n"
        "    from lit_fl.steps.step import Step\n__getattr__, __dir__, __all__ = lazy_exports(globals())\n")
    (package / "steps" / "step.py").write_text("from . import other\n")
    (package / "steps" / "other.py").write_text("")
    found = {(a.source, a.target, a.type_only) for a in arrows(sources(package))}
    assert found == {
        ("lit_fl.suite", "lit_fl.algorithms", True),  # from lit_fl.algorithms import base: a module named base
        ("lit_fl.suite", "lit_fl.config", False),  # inside a function
        ("lit_fl.algorithms", "lit_fl.steps.step", False),  # through the lazy package's export
        ("lit_fl.steps", "lit_fl.steps.step", True),  # the export table, under TYPE_CHECKING
        ("lit_fl.steps", "lit_fl.steps.step", False),  # ... which its __getattr__ imports
        ("lit_fl.steps.step", "lit_fl.steps.other", False),  # relative
    }


def test_the_circle_finder_and_the_order_report_what_is_wrong() -> None:
    assert find_cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}) == [["a", "b", "c", "a"]]
    assert find_cycles({"a": {"b"}, "b": set()}) == []
    up = [Arrow("lit_fl.steps.runner", "lit_fl.config", 49, False), Arrow("lit_fl.models.x", "lit_fl.data.y", 3, True),
          Arrow("lit_fl.config", "lit_fl.steps.precision", 13, False)]
    assert arrows_up(up) == ["models -> data: lit_fl.models.x -> lit_fl.data.y (line 3) (TYPE_CHECKING)",
                             "steps -> config: lit_fl.steps.runner -> lit_fl.config (line 49)"]


@pytest.mark.parametrize(("low", "high"), [("federation", "algorithms"), ("steps", "federation"),
                                           ("tracking", "federation"), ("suite", "commands")])
def test_the_order_keeps_what_design_says(low: str, high: str) -> None:
    assert RANK[high] < RANK[low]
