"""``make reproduce``: run the CPU-scale reproduction sweeps and write ``docs/reproductions.md`` from them.

    python -m lit_fl.suite.reproduce                       # every sweep (about an hour on 2 cores), then the page
    python -m lit_fl.suite.reproduce --only mnist5k_defkt  # one sweep, then the page from every finished sweep;
                                                           # a sweep not run here keeps its section as it was
    python -m lit_fl.suite.reproduce --docs-only           # the page from the sweeps already run

Each sweep runs with ``--jobs 2`` into ``runs/reproduce/sweeps/NAME`` (run again, a finished sweep is skipped and
keeps the wall time it took; an interrupted one continues). The wall time of a sweep that ran is recorded beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

from lit_fl.configs import resolve_config
from lit_fl.errors import ConfigError
from lit_fl.io import atomic_write_text
from lit_fl.suite.manifest import MANIFEST_FILE
from lit_fl.suite.reproductions import WALL_TIME, Reproduction, page_sections, write_reproductions

#: (paper section, sweep name, target accuracy of "rounds to target"), in the page's order
SWEEPS = [
    ("DFML (Decentralized Federated Mutual Learning)", "mnist5k_label_skew", 0.8),
    ("DFML (Decentralized Federated Mutual Learning)", "mnist5k_baselines", 0.8),
    ("DFML (Decentralized Federated Mutual Learning)", "mnist5k_dfml_ablations", 0.8),
    ("DFML (Decentralized Federated Mutual Learning)", "mnist5k_dfml_transfer", 0.8),
    ("DFML (Decentralized Federated Mutual Learning)", "mnist5k_dfml_homogeneous", 0.8),
    ("FedORION", "mnist5k_fedorion", 0.8),
    ("FedORION", "mnist5k_fedorion_baselines", 0.8),
    ("UA-PDFL", "mnist5k_uapdfl", 0.8),
    ("UA-PDFL", "mnist5k_uapdfl_baselines", 0.8),
    ("Def-KT", "mnist5k_defkt", 0.8),
    ("Knowledge codistillation", "mnist5k_codistillation", 0.8),
    ("Differential privacy: DP-FedAvg", "mnist5k_dp_fedavg", 0.8),
    ("Differential privacy: DP-SGD", "mnist5k_dp_sgd", 0.8),
    ("System heterogeneity: the virtual clock", "mnist5k_clock", 0.8),
    ("System heterogeneity: the virtual clock", "mnist5k_partial_work", 0.9),
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", action="append", default=None, help="run only this sweep (may repeat)")
    parser.add_argument("--docs-only", action="store_true", help="write the page from the sweeps already run")
    parser.add_argument("--run_dir", type=Path, default=Path("runs") / "reproduce")
    parser.add_argument("--out", type=Path, default=Path("docs"), help="where reproductions.md goes (default docs)")
    args = parser.parse_args(argv)
    names = [name for _, name, _ in SWEEPS]
    unknown = sorted(set(args.only or []) - set(names))
    if unknown:
        print(f"reproduce: --only {unknown[0]!r} is not a reproduction sweep; allowed: {', '.join(names)}",
              file=sys.stderr)
        return 2
    if not args.docs_only:
        origin = provenance()  # what every sweep of this call runs: taken once, before the first sweep starts
        for name in args.only or names:
            rc = run_sweep(name, args.run_dir, origin)
            if rc != 0:
                print(f"reproduce: sweep {name} exited {rc}; `make reproduce` again continues it", file=sys.stderr)
                return rc
    done = []
    previous = page_sections(args.out / "reproductions.md")
    for paper, name, target in SWEEPS:
        folder = args.run_dir / "sweeps" / name
        unfinished = unfinished_runs(folder)
        if unfinished == NOT_RUN and name in previous:  # ran elsewhere: its section stays as it was
            done.append(Reproduction(paper, sweep_file(name), folder, target, kept=previous[name]))
            continue
        if unfinished:
            print(f"reproduce: sweep {name}: {unfinished}; left off the page", file=sys.stderr)
            continue
        done.append(Reproduction(paper, sweep_file(name), folder, target))
    try:
        page = write_reproductions(done, args.out)
    except ConfigError as err:  # a paper file that does not fit its sweep's runs
        print(f"reproduce: {err}", file=sys.stderr)
        return 2
    print(f"{len(done)} of {len(SWEEPS)} sweeps -> {page}")
    return 0


def run_sweep(name: str, run_dir: Path, origin: dict[str, str] | None = None) -> int:
    """``lit-fl sweep sweeps/NAME.yaml --jobs 2``; the wall time and the provenance (``origin``, default: this
    process's :func:`provenance`) are recorded when every run ran in this call."""
    command = [sys.executable, "-m", "lit_fl.cli", "sweep", str(sweep_file(name)), "--jobs", "2",
               "--run_dir", str(run_dir)]
    print(f"reproduce: {' '.join(command[2:])}", flush=True)
    start = time.perf_counter()
    result = subprocess.run(command, stdout=subprocess.PIPE, text=True, env=dict(os.environ))
    wall_s = time.perf_counter() - start
    print(result.stdout, end="", flush=True)
    manifest = json.loads(MANIFEST_FILE.read_text(run_dir / "sweeps" / name / "manifest.json"))
    runs = len(manifest["runs"])
    if result.returncode == 0 and "already completed: skipped" not in result.stdout:
        record = {"wall_s": round(wall_s, 1), "runs": runs, "jobs": 2,
                  "machine": machine(), "provenance": origin or provenance()}
        atomic_write_text(run_dir / "sweeps" / name / WALL_TIME, json.dumps(record) + "\n")
    return result.returncode


#: :func:`unfinished_runs` of a sweep that has no runs in the folder
NOT_RUN = "not run"


def unfinished_runs(folder: Path) -> str:
    """Why a sweep folder cannot be on the page yet ("not run", "3 of 18 runs not completed"); empty when every run
    of its manifest completed."""
    try:
        runs = json.loads(MANIFEST_FILE.read_text(folder / "manifest.json"))["runs"]
    except (OSError, ValueError, KeyError, TypeError):
        return NOT_RUN
    left = sum(run.get("status") != "completed" for run in runs)
    return f"{left} of {len(runs)} runs not completed" if left else ""


def sweep_file(name: str) -> Path:
    """``sweeps/NAME.yaml`` (the shipped sweep file)."""
    return resolve_config(f"{name}.yaml", kind="sweeps", key="sweep")


def provenance() -> dict[str, str]:
    """What a re-run must match for "digit for digit": the lit-fl commit (``+dirty`` when the working tree has
    uncommitted changes; ``unknown`` outside a git checkout), torch, Python and the CPU model."""
    import torch

    root = Path(__file__).resolve().parents[2]
    commit = _git(root, "rev-parse", "--short=12", "HEAD") or "unknown"
    if commit != "unknown" and _git(root, "status", "--porcelain", "--untracked-files=no"):
        commit += "+dirty"
    return {"lit_fl": commit, "torch": torch.__version__, "python": platform.python_version(), "cpu": machine()}


def _git(root: Path, *args: str) -> str:
    """``git args`` in ``root`` (stripped stdout; empty when git or the checkout is missing)."""
    try:
        result = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return result.stdout.strip() if result.returncode == 0 else ""


def machine() -> str:
    """``2-core AMD EPYC``: the CPU the sweep ran on."""
    model = platform.processor() or platform.machine()
    try:
        model = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return f"{os.cpu_count()}-core {model}"


if __name__ == "__main__":
    sys.exit(main())
