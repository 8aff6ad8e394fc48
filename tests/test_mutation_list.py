"""``make mutate``'s list cannot rot: every mutation of ``tests/mutation/mutations.yaml`` names a snippet found
exactly once in its file, a mutant that compiles, and tests that exist, and the list keeps its schema. Read with
the runner's own :func:`load` and :func:`problems` (``tests/mutation/run.py``); no mutant is run here.

When this fails after a refactor, the science a mutation breaks has moved: find it (``git log -S 'the snippet'``)
and rewrite the mutation's ``find``/``replace`` (and ``file``) so that it breaks the same rule in its new place."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

RUN_PY = Path(__file__).parent / "mutation" / "run.py"


def _runner() -> ModuleType:
    """``tests/mutation/run.py`` as a module (it is a script, not a package)."""
    if "lit_fl_mutation_run" not in sys.modules:
        spec = importlib.util.spec_from_file_location("lit_fl_mutation_run", RUN_PY)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
        spec.loader.exec_module(module)
    return sys.modules["lit_fl_mutation_run"]


run = _runner()


def test_every_mutation_runs_on_the_current_code() -> None:
    spec = run.load(run.MUTATIONS)
    found = run.problems(spec.mutations, spec.science, run.ROOT)
    assert not found, "mutations.yaml is stale (rewrite each mutation where its science now lives):\n" + "\n".join(
        found)


def test_the_runner_copies_what_the_list_names() -> None:
    """The mutants run in a copy of ``COPIED``: a mutated file or a test outside it would run against nothing."""
    spec = run.load(run.MUTATIONS)
    named = [m.file for m in spec.mutations] + spec.science + [t.split("::")[0] for m in spec.mutations
                                                               for t in m.first]
    outside = sorted({f for f in named if Path(f).parts[0] not in run.COPIED})
    assert not outside


# --- the checks themselves, on a small tree of their own ----------------------------------------------------------

SCIENCE = '''\
def kl(p, q, t):
    return (p * (p / q).log()).sum() * t * t


def scale(x):
    return 0.5 * x * x
'''

TESTS = '''\
import pytest


@pytest.mark.parametrize("name", ["scaffold", "dispfl"])
def test_kl(name):
    pass


class TestScale:
    def test_half(self):
        pass
'''


def _tree(root: Path, mutations: str, science: str = "[tests/test_sci.py]", harmless: str = "{}") -> Path:
    (root / "pkg").mkdir()
    (root / "pkg" / "sci.py").write_text(SCIENCE)
    (root / "tests").mkdir()
    (root / "tests" / "test_sci.py").write_text(TESTS)
    listing = root / "mutations.yaml"
    listing.write_text(f"science_tests: {science}\nharmless: {harmless}\nmutations:\n"
                       + textwrap.indent(textwrap.dedent(mutations), "  "))
    return listing


def _problems(root: Path, mutations: str, **kwargs: str) -> list[str]:
    spec = run.load(_tree(root, mutations, **kwargs))
    return run.problems(spec.mutations, spec.science, root)


GOOD = '''\
- id: kl-temperature-once
  file: pkg/sci.py
  find: "* t * t"
  replace: "* t"
  why: "T^2"
  first: ["tests/test_sci.py::test_kl[scaffold]", "tests/test_sci.py::TestScale::test_half", tests/test_sci.py]
'''


def test_a_mutation_that_matches_once_and_names_real_tests_passes(tmp_path: Path) -> None:
    assert _problems(tmp_path, GOOD) == []


@pytest.mark.parametrize(("find", "count"), [("return (p * (p / q).log()).sum() * t * t * t", 0), ("return", 2)])
def test_a_snippet_not_found_exactly_once_is_named_with_its_id_and_file(tmp_path: Path, find: str,
                                                                        count: int) -> None:
    found = _problems(tmp_path, f'- {{id: moved, file: pkg/sci.py, find: "{find}", replace: "x", why: w}}\n')
    assert found == [f"moved: pkg/sci.py holds the snippet {count} times (must be exactly once)"]


def test_a_missing_file_is_named(tmp_path: Path) -> None:
    found = _problems(tmp_path, "- {id: gone, file: pkg/old.py, find: a, replace: b, why: w}\n")
    assert found == ["gone: the file pkg/old.py does not exist"]


def test_a_mutant_that_does_not_compile_is_refused(tmp_path: Path) -> None:
    found = _problems(tmp_path, '- {id: broken, file: pkg/sci.py, find: "0.5 * x", replace: "0.5 * (x", why: w}\n')
    assert len(found) == 1 and found[0].startswith("broken: the mutant of pkg/sci.py does not compile")


def test_a_replacement_equal_to_its_snippet_is_refused(tmp_path: Path) -> None:
    found = _problems(tmp_path, '- {id: same, file: pkg/sci.py, find: "0.5 * x", replace: "0.5 * x", why: w}\n')
    assert found == ["same: in pkg/sci.py the replacement equals the snippet (no mutant)"]


@pytest.mark.parametrize(("selection", "why"), [
    ("tests/test_gone.py", "names no file"),
    ("tests/test_sci.py::test_gone", "names test_gone, which tests/test_sci.py does not define"),
    ("tests/test_sci.py::TestScale::test_gone", "names test_gone, which tests/test_sci.py does not define"),
    ("tests/test_sci.py::TestGone::test_half", "names TestGone, which tests/test_sci.py does not define"),
    ("tests/test_sci.py::test_kl[fdmeta]", "names the parameter [fdmeta], not a string literal of tests/test_sci.py"),
])
def test_a_test_selection_that_names_no_test_is_named(tmp_path: Path, selection: str, why: str) -> None:
    found = _problems(tmp_path, GOOD.replace("tests/test_sci.py]", f'"{selection}"]'))
    assert found == [f"kl-temperature-once: first: {selection} {why}"]


def test_a_missing_science_test_is_named(tmp_path: Path) -> None:
    found = _problems(tmp_path, GOOD, science="[tests/test_sci.py, tests/test_gone.py]")
    assert found == ["science_tests: tests/test_gone.py names no file"]


@pytest.mark.parametrize(("mutations", "harmless", "error"), [
    (GOOD + GOOD, "{}", "mutation kl-temperature-once: the id is used 2 times (ids must be unique)"),
    ("- {id: a, file: pkg/sci.py, find: x, replace: y}\n", "{}", "mutation a: the key 'why' is missing"),
    ("- {id: a, file: pkg/sci.py, find: x, replace: y, why: w, frist: [t]}\n", "{}",
     "mutation a: unknown key 'frist' (allowed: id, file, find, replace, why, first)"),
    ("- {id: a, file: pkg/sci.py, find: x, replace: 1, why: w}\n", "{}", "mutation a: replace must be a string"),
    ("- {id: a, file: pkg/sci.py, find: '', replace: y, why: w}\n", "{}",
     "mutation a: find must be a string, not empty"),
    ("- {id: a, file: pkg/sci.py, find: x, replace: y, why: w, first: tests/test_sci.py}\n", "{}",
     "mutation a: first must be a list of test selections (path or path::test)"),
    (GOOD, "{gone: renamed}", "harmless gone: no mutation has this id"),
])
def test_the_schema_is_checked_on_load(tmp_path: Path, mutations: str, harmless: str, error: str) -> None:
    with pytest.raises(run.MutationListError) as caught:
        run.load(_tree(tmp_path, mutations, harmless=harmless))
    assert str(caught.value).splitlines() == [error]
