"""``make mutate``: apply semantic mutations to the science one at a time and report those no test catches.

Each mutation in ``mutations.yaml`` replaces one exact snippet of one file (the snippet must occur exactly once,
so a mutation that no longer matches the code is reported as stale, never silently skipped; ``make test`` checks
this for the whole list in ``tests/test_mutation_list.py``, with :func:`load` and :func:`problems` below). The tree
is copied once into a temporary folder; every mutant is written into that copy and the fast tests run there
(``PYTHONPATH`` points at the copy, so the checkout itself is never modified, and tests that start the
``lit-fl`` command import the mutant too).

A mutant is first run against the ``science_tests`` of the file (plus its own ``first`` tests in front) with
``-x``: most die within seconds. A survivor is run again against the whole of ``make test-fast``; only one that
passes there too is a survivor. The exit status is 1 when a survivor is not listed under ``harmless``, 2 when
the list is stale or a mutant's tests ran no test at all.

    python tests/mutation/run.py                 # every mutation
    python tests/mutation/run.py dfml-weighted-kl fedprox-half-mu   # some, by id
    python tests/mutation/run.py --list          # the mutations, one line each
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
MUTATIONS = Path(__file__).with_name("mutations.yaml")
COPIED = ("lit_fl", "tests", "pyproject.toml")
# The check of this list itself: in a mutant's tree the mutated snippet is gone, so it would "kill" every mutant.
LIST_TEST = "tests/test_mutation_list.py"
BASELINE_LIMIT = 3600.0  # seconds for the unmutated science tests (about 5 minutes on 2 busy cores)
NOTHING_RAN = (4, 5)  # pytest's usage error (a selection that names no test) and 'no tests collected'
PYTEST = [sys.executable, "-m", "pytest", "-q", "-x", "-m", "not slow", "-p", "no:cacheprovider", "-rf",
          "--no-header", "-W", "ignore"]


@dataclass(frozen=True)
class Mutation:
    id: str
    file: str
    find: str
    replace: str
    why: str = ""
    first: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Outcome:
    mutation: Mutation
    status: str  # killed | survived | timeout | error
    seconds: float
    detail: str


class MutationListError(ValueError):
    """``mutations.yaml`` does not have the schema below; the message lists every problem, one a line."""


@dataclass(frozen=True)
class MutationList:
    """``mutations.yaml``: the mutations, the science tests and the survivors declared harmless (id -> why)."""

    mutations: list[Mutation]
    science: list[str]
    harmless: dict[str, str]


REQUIRED = ("id", "file", "find", "replace", "why")
OPTIONAL = ("first",)


def load(path: Path) -> MutationList:
    """Read ``path`` and check its schema: a mapping with ``science_tests`` (test paths), ``harmless`` (id: why,
    may be empty) and ``mutations``, each a mapping of the strings ``id``, ``file``, ``find``, ``replace`` and
    ``why`` (the paper rule it breaks) and an optional list ``first`` of test selections; ids unique; every harmless
    id a mutation's. Raises :class:`MutationListError` naming every entry that breaks it. Whether the named files,
    snippets and tests exist is :func:`problems`' question."""
    spec = yaml.safe_load(path.read_text())
    if not isinstance(spec, dict) or not isinstance(spec.get("mutations"), list):
        raise MutationListError(f"{path.name}: a mapping with a list under 'mutations' expected")
    errors = [f"{path.name}: unknown top-level key {k!r} (allowed: science_tests, harmless, mutations)"
              for k in spec if k not in ("science_tests", "harmless", "mutations")]
    science = spec.get("science_tests")
    if not _strings(science):
        errors.append(f"{path.name}: science_tests must be a list of test paths")
    harmless = spec.get("harmless") or {}
    if not isinstance(harmless, dict):
        errors.append(f"{path.name}: harmless must be a mapping id: why")
        harmless = {}
    mutations = []
    for n, entry in enumerate(spec["mutations"], 1):
        entry_errors = _entry_errors(entry)
        name = entry.get("id", f"#{n}") if isinstance(entry, dict) else f"#{n}"
        errors += [f"mutation {name}: {e}" for e in entry_errors]
        if not entry_errors:
            mutations.append(Mutation(entry["id"], entry["file"], entry["find"], entry["replace"], entry["why"],
                                      tuple(entry.get("first", ()))))
    ids = [m.id for m in mutations]
    errors += [f"mutation {i}: the id is used {ids.count(i)} times (ids must be unique)"
               for i in sorted({i for i in ids if ids.count(i) > 1})]
    errors += [f"harmless {i}: no mutation has this id" for i in harmless if i not in ids]
    if errors:
        raise MutationListError("\n".join(errors))
    return MutationList(mutations, list(science), {str(k): str(v) for k, v in harmless.items()})


def _strings(value: object) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


def _entry_errors(entry: object) -> list[str]:
    if not isinstance(entry, dict):
        return ["a mapping with keys id, file, find, replace, why (and first) expected"]
    errors = [f"the key {k!r} is missing" for k in REQUIRED if k not in entry]
    errors += [f"unknown key {k!r} (allowed: {', '.join((*REQUIRED, *OPTIONAL))})"
               for k in entry if k not in (*REQUIRED, *OPTIONAL)]
    errors += [f"{k} must be a string" + ("" if k == "replace" else ", not empty") for k in REQUIRED
               if k in entry and not (isinstance(entry[k], str) and (entry[k] or k == "replace"))]
    if "first" in entry and not _strings(entry["first"]):
        errors.append("first must be a list of test selections (path or path::test)")
    return errors


def problems(mutations: list[Mutation], science: list[str], root: Path) -> list[str]:
    """What keeps ``mutations`` from running under ``root``, one line each naming the mutation (or
    ``science_tests``) and the file or test at fault: the file is missing; the snippet does not occur exactly once
    in it (the code changed under the mutation) or equals its replacement; the mutant of a Python file does not
    compile (it would die of a SyntaxError, testing nothing); a science test or a ``first`` selection names no test
    (pytest would stop with a usage error)."""
    out = [f"science_tests: {t} {why}" for t in science if (why := missing_test(t, root))]
    for m in mutations:
        path = root / m.file
        if not path.is_file():
            out.append(f"{m.id}: the file {m.file} does not exist")
            continue
        source = path.read_text()
        count = source.count(m.find)
        if count != 1:
            out.append(f"{m.id}: {m.file} holds the snippet {count} times (must be exactly once)")
        elif m.find == m.replace:
            out.append(f"{m.id}: in {m.file} the replacement equals the snippet (no mutant)")
        elif path.suffix == ".py" and (error := compile_error(source.replace(m.find, m.replace, 1), m.file)):
            out.append(f"{m.id}: the mutant of {m.file} does not compile ({error})")
        out += [f"{m.id}: first: {t} {why}" for t in m.first if (why := missing_test(t, root))]
    return out


def compile_error(source: str, filename: str) -> str:
    """The SyntaxError of ``source`` in one line, or ``""`` when it compiles."""
    try:
        compile(source, filename, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"line {exc.lineno}: {exc.msg}"
    return ""


def missing_test(selection: str, root: Path) -> str:
    """Why pytest would find nothing at ``selection`` (``path``, ``path::test``, ``path::Class::test`` or either
    with a ``[param]`` id), or ``""``. The file must exist and define the test (read, never imported); a
    parametrization id must appear in the file as a string literal (an id computed at collection time cannot be
    checked without importing the module: keep ids that the list names literal)."""
    path, *names = selection.split("::")
    file = root / path
    if not file.is_file():
        return "names no file"
    if not names:
        return ""
    last, _, param = names[-1].partition("[")
    try:
        tree = ast.parse(file.read_text(), filename=path)
    except SyntaxError as exc:
        return f"names {path}, which does not parse (line {exc.lineno}: {exc.msg})"
    scope: list[ast.stmt] = tree.body
    for name in [*names[:-1], last]:
        found = next((n for n in scope if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and n.name == name), None)
        if found is None:
            return f"names {name}, which {path} does not define"
        scope = found.body if isinstance(found, ast.ClassDef) else []
    literals = {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)}
    param = param.removesuffix("]")
    if param and param not in literals and not all(part in literals for part in param.split("-")):
        return f"names the parameter [{param}], not a string literal of {path}"
    return ""


def copy_tree(target: Path) -> None:
    for name in COPIED:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, target / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        else:
            shutil.copy2(source, target / name)


def run_tests(tree: Path, tests: list[str], timeout: float) -> tuple[int | None, str]:
    """``pytest`` in the mutated copy; ``(None, output)`` on a timeout."""
    env = {**os.environ, "PYTHONPATH": str(tree), "WANDB_MODE": "offline", "WANDB_SILENT": "true",
           "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        done = subprocess.run([*PYTEST, *tests], cwd=tree, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout or b""
        return None, out.decode() if isinstance(out, bytes) else out
    return done.returncode, done.stdout + done.stderr


def first_failure(output: str) -> str:
    """The first ``FAILED``/``ERROR`` line of pytest's short summary, else its last line."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line.split(" - ")[0]
    lines = [line for line in output.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def mutate(m: Mutation, tree: Path, science: list[str], timeout: float) -> Outcome:
    path = tree / m.file
    original = path.read_text()
    path.write_text(original.replace(m.find, m.replace, 1))
    start = time.perf_counter()
    try:
        rc, output = run_tests(tree, unique([*m.first, *science]), timeout)
        if rc == 0:  # survived the science tests: the whole fast suite decides
            rc, output = run_tests(tree, ["tests", "--ignore", LIST_TEST], timeout * 4)
    finally:
        path.write_text(original)
    seconds = time.perf_counter() - start
    if rc is None:
        return Outcome(m, "timeout", seconds, "the tests ran past the time limit (counted as killed)")
    if rc == 0:
        return Outcome(m, "survived", seconds, "")
    if rc in NOTHING_RAN:
        return Outcome(m, "error", seconds, f"pytest ran no test (exit {rc}): {first_failure(output)}")
    return Outcome(m, "killed", seconds, first_failure(output))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="run only these mutation ids")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=float, default=300.0,
                        help="the least seconds a mutant's science run may take (at least twice the unmutated run's; "
                             "the whole fast suite four times that)")
    parser.add_argument("--file", type=Path, default=MUTATIONS, help="the mutation list (YAML)")
    args = parser.parse_args(argv)

    try:
        spec = load(args.file)
    except MutationListError as exc:
        print(f"{args.file} breaks its schema:\n  " + str(exc).replace("\n", "\n  "), file=sys.stderr)
        return 2
    mutations, science, harmless = spec.mutations, spec.science, spec.harmless
    if args.list:
        for m in mutations:
            print(f"{m.id:34} {m.file}: {m.why}")
        return 0
    unknown = [i for i in args.ids if i not in {m.id for m in mutations}]
    if unknown:
        print(f"unknown mutation ids: {', '.join(unknown)}", file=sys.stderr)
        return 2
    chosen = [m for m in mutations if not args.ids or m.id in args.ids]
    found = problems(chosen, science, ROOT)
    if found:
        print("stale mutations (update mutations.yaml):\n  " + "\n  ".join(found), file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="lit-fl-mutate-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        start = time.perf_counter()
        rc, output = run_tests(tree, science, BASELINE_LIMIT)
        baseline = time.perf_counter() - start
        if rc is None:
            print(f"the unmutated science tests ran past {BASELINE_LIMIT:.0f} s", file=sys.stderr)
            return 2
        if rc != 0:
            print(f"the unmutated science tests fail (pytest exit {rc}); fix them first:\n{first_failure(output)}",
                  file=sys.stderr)
            return 2
        limit = max(args.timeout, 2 * baseline)  # a loaded machine is slower for the mutants too
        print(f"unmutated science tests: {baseline:.0f} s; a mutant's may take {limit:.0f} s", flush=True)
        outcomes = []
        for i, m in enumerate(chosen, 1):
            outcome = mutate(m, tree, science, limit)
            outcomes.append(outcome)
            print(f"[{i:>3}/{len(chosen)}] {outcome.status:8} {outcome.seconds:6.1f} s  {m.id:34} {outcome.detail}",
                  flush=True)

    survivors = [o.mutation.id for o in outcomes if o.status == "survived"]
    errors = [o.mutation.id for o in outcomes if o.status == "error"]
    unexplained = [i for i in survivors if i not in harmless]
    killed = len(outcomes) - len(survivors) - len(errors)
    print(f"\n{len(outcomes)} mutants: {killed} killed, {len(survivors)} survived, {len(errors)} ran no test")
    for i in errors:
        print(f"  ran no test: {i} (fix its first: selection)")
    for i in survivors:
        print(f"  survived: {i}" + (f" (harmless: {harmless[i]})" if i in harmless else " (NOT declared harmless)"))
    return 2 if errors else 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
