"""Shared helpers for the end-to-end CLI tests: a tiny config, an in-process ``lit-fl`` call, a snapshot of a
folder. (Lightning takes seconds to import, so the CLI is called in-process, never in a subprocess.)"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, settings

TESTS_DIR = Path(__file__).parent
if str(TESTS_DIR) not in sys.path:  # for ``from wandb_records import read_run``
    sys.path.insert(0, str(TESTS_DIR))

TINY_POOL = ["cnn_4_8", "cnn_8"]

# Hypothesis (the property-based tests, test_fuzz_*.py): ``fast`` in ``make test`` (derandomized: the same examples
# every run, a few dozen per test, no example database), ``fuzz`` for ``make fuzz`` (LIT_FL_HYPOTHESIS=fuzz: random
# examples, 100 times as many; fuzz_inputs.budget scales each test's count).
_QUIET = [HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.function_scoped_fixture]
settings.register_profile("fast", derandomize=True, database=None, deadline=None, max_examples=25,
                          suppress_health_check=_QUIET, print_blob=True)
settings.register_profile("fuzz", derandomize=False, deadline=None, max_examples=2500, suppress_health_check=_QUIET,
                          print_blob=True)
settings.load_profile(os.environ.get("LIT_FL_HYPOTHESIS", "fast"))


@pytest.fixture
def one_thread() -> Iterator[None]:
    """Tiny models: one intra-op thread is fastest, and far faster on a busy shared CPU. A module opts in with
    ``pytestmark = pytest.mark.usefixtures("one_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def float64_native(one_thread: None) -> Iterator[None]:
    """float64 by default and PyTorch's own CPU convolutions (those a fused phase uses on a CPU): fused against
    unfused within float64 rounding."""
    import torch

    from lit_fl.steps.fusion import native_cpu_convolutions

    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with native_cpu_convolutions(torch.device("cpu")):
            yield
    finally:
        torch.set_default_dtype(previous)
TINY_OPTIONS = {"num_classes": 4, "input_shape": [1, 8, 8], "num_train": 400, "num_test": 100}


def tiny_config(algorithm: str = "DFML", rounds: int = 3, wandb: bool = False, **init_args: Any) -> dict[str, Any]:
    """A run of a few seconds on CPU: 4 synthetic-data clients, two small CNNs."""
    args: dict[str, Any] = {"sender_fraction": 0.5, **init_args}
    if algorithm == "DFML":
        args = {"mutual_epochs": 1, "period": 2, "period_increment": 2, **args}
    return {
        "seed": 0,
        "rounds": rounds,
        "algorithm": {"class_path": f"lit_fl.algorithms.{algorithm}", "init_args": args},
        "data": {"dataset": "synthetic", "num_clients": 4, "beta": 0.5, "options": dict(TINY_OPTIONS)},
        "models": {"pool": list(TINY_POOL)},
        "logger": {"wandb": wandb, "progress": False},
    }


def write_config(path: Path, config: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path


@dataclass
class CliResult:
    rc: int
    out: str
    err: str


def run_cli(*argv: str) -> CliResult:
    """``lit-fl ARGV`` in-process; an exception escaping ``main`` fails the test with its text."""
    from lit_fl.cli import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main([str(a) for a in argv])
        except SystemExit:
            raise
        except BaseException as exc:  # report what escaped instead of an exit code
            pytest.fail(
                f"main({[str(a) for a in argv]}) raised {type(exc).__module__}.{type(exc).__name__}: {exc!r} "
                "instead of returning a non-zero exit code",
                pytrace=False,
            )
    return CliResult(rc, out.getvalue(), err.getvalue())


def snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root`` (folders as None, files with their bytes)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(Path(root).rglob("*"))}
