"""``make mutate``: apply semantic mutations to the science one at a time and report those no test catches.

Each mutation in ``mutations.yaml`` replaces one exact snippet of one file (the snippet must occur exactly once,
so a mutation that no longer matches the code is reported as stale, never silently skipped). The tree is
copied once into a temporary folder; every mutant is written into that copy and the fast tests run there
(``PYTHONPATH`` points at the copy, so the checkout itself is never modified, and tests that start the
``lit-fl`` command import the mutant too).

A mutant is first run against the ``science_tests`` of the file (plus its own ``first`` tests in front) with
``-x``: most die within seconds. A survivor is run again against the whole of ``make test-fast``; only one that
passes there too is a survivor. The exit status is 1 when a survivor is not listed under ``harmless``.

    python tests/mutation/run.py                 # every mutation
    python tests/mutation/run.py dfml-weighted-kl fedprox-half-mu   # some, by id
    python tests/mutation/run.py --list          # the mutations, one line each
"""

from __future__ import annotations

import argparse
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
    status: str  # killed | survived | timeout
    seconds: float
    detail: str


def load(path: Path) -> tuple[list[Mutation], list[str], dict[str, str]]:
    """The mutations, the science tests and the survivors declared harmless (id -> why)."""
    spec = yaml.safe_load(path.read_text())
    mutations = [
        Mutation(m["id"], m["file"], m["find"], m["replace"], m.get("why", ""), tuple(m.get("first", ())))
        for m in spec["mutations"]
    ]
    ids = [m.id for m in mutations]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise SystemExit(f"mutations.yaml: duplicate ids {', '.join(duplicates)}")
    science = [t for t in spec["science_tests"] if (ROOT / t).exists()]
    return mutations, science, dict(spec.get("harmless") or {})


def stale(mutations: list[Mutation], root: Path) -> list[str]:
    """Mutations whose snippet does not occur exactly once in its file (the code changed under them)."""
    out = []
    for m in mutations:
        path = root / m.file
        count = path.read_text().count(m.find) if path.exists() else 0
        if count != 1 or m.find == m.replace:
            out.append(f"{m.id}: {m.file} holds the snippet {count} times (must be exactly once)")
    return out


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
            rc, output = run_tests(tree, ["tests"], timeout * 4)
    finally:
        path.write_text(original)
    seconds = time.perf_counter() - start
    if rc is None:
        return Outcome(m, "timeout", seconds, "the tests ran past the time limit (counted as killed)")
    if rc == 0:
        return Outcome(m, "survived", seconds, "")
    return Outcome(m, "killed", seconds, first_failure(output))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("ids", nargs="*", help="run only these mutation ids")
    parser.add_argument("--list", action="store_true", help="list the mutations and exit")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per mutant and science run")
    parser.add_argument("--file", type=Path, default=MUTATIONS, help="the mutation list (YAML)")
    args = parser.parse_args(argv)

    mutations, science, harmless = load(args.file)
    if args.list:
        for m in mutations:
            print(f"{m.id:34} {m.file}: {m.why}")
        return 0
    unknown = [i for i in args.ids if i not in {m.id for m in mutations}]
    if unknown:
        print(f"unknown mutation ids: {', '.join(unknown)}", file=sys.stderr)
        return 2
    chosen = [m for m in mutations if not args.ids or m.id in args.ids]
    problems = stale(chosen, ROOT)
    if problems:
        print("stale mutations (update mutations.yaml):\n  " + "\n  ".join(problems), file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory(prefix="lit-fl-mutate-") as tmp:
        tree = Path(tmp)
        copy_tree(tree)
        rc, output = run_tests(tree, science, args.timeout)
        if rc != 0:
            print(f"the unmutated science tests fail; fix them first:\n{first_failure(output)}", file=sys.stderr)
            return 2
        outcomes = []
        for i, m in enumerate(chosen, 1):
            outcome = mutate(m, tree, science, args.timeout)
            outcomes.append(outcome)
            print(f"[{i:>3}/{len(chosen)}] {outcome.status:8} {outcome.seconds:6.1f} s  {m.id:34} {outcome.detail}",
                  flush=True)

    survivors = [o.mutation.id for o in outcomes if o.status == "survived"]
    unexplained = [i for i in survivors if i not in harmless]
    print(f"\n{len(outcomes)} mutants: {len(outcomes) - len(survivors)} killed, {len(survivors)} survived")
    for i in survivors:
        print(f"  survived: {i}" + (f" (harmless: {harmless[i]})" if i in harmless else " (NOT declared harmless)"))
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
