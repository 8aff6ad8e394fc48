"""A fast command line: ``--help``, ``--print_config`` and config errors never import torch or the heavy libraries.

torch, Lightning, torchmetrics, timm, W&B, torchvision and the model libraries cost seconds of imports; they are
imported when a run starts. (Latency itself is measured in benchmarks/cli_latency.py, not in a timed test.)
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("torch", "lightning", "torchmetrics", "timm", "wandb", "torchvision", "vit_pytorch", "efficientnet_pytorch")

PROBE = """
import json, sys
from lit_fl.cli import main
try:
    code = main(sys.argv[1:])
except SystemExit as exit_:
    code = exit_.code
print(json.dumps({"code": code, "heavy": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


def imported_by(*argv: str, cwd: Path = ROOT) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=cwd, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    ("argv", "code"),
    [
        (["--help"], 0),
        (["fit", "--help"], 0),
        (["fit", "--config", "experiments/quickstart.yaml", "--print_config"], 0),
        (["fit", "--config", "experiments/quickstart.yaml", "--algorithm.lr", "abc"], 2),
        (["fit", "--config", "experiments/quickstart.yaml", "--models.pool", "nope"], 2),
        (["fit", "--config", "experiments/quickstart.yaml", "--trainer.precision", "16-mixed",
          "--trainer.accelerator", "cpu"], 2),
        (["fit", "--config", "experiments/dfml_cifar100.yaml", "--data.root", "/nonexistent"], 2),
        (["fit", "--config", "experiments/quickstart.yaml", "--algorithm.alpha_max", "2"], 2),  # refused by DFML
        (["fit", "--config", "experiments/quickstart.yaml", "--data.dataset", "nope"], 2),
        (["fit", "--config", "experiments/quickstart.yaml", "--rounds", "0"], 2),
    ],
)
def test_the_command_line_answers_without_heavy_imports(argv: list[str], code: int, tmp_path: Path) -> None:
    result = imported_by(*argv, *(["--run_dir", str(tmp_path)] if argv[0] == "fit" else []))
    assert result["code"] == code
    assert result["heavy"] == []


EVERY_CONFIG = """
import json, sys, tempfile
from pathlib import Path
from lit_fl.commands import fit
from lit_fl.configs import ROOT as CONFIGS, list_configs
from lit_fl.errors import DatasetNotFoundError
checked, failed = 0, {}
with tempfile.TemporaryDirectory() as tmp:
    for path in list_configs("experiments"):
        parser = fit.fit_parser()
        try:
            cfg = parser.parse_args(["--config", str(CONFIGS / path), "--run_dir", tmp])
            fit.prepare(cfg, parser)  # builds the algorithm and every config object, then the whole-config checks
            checked += 1
        except DatasetNotFoundError:  # the last check: a torchvision benchmark's files are not on this machine
            checked += 1
        except BaseException as err:
            failed[str(path)] = repr(err)
print(json.dumps({"checked": checked, "failed": failed, "heavy": [m for m in HEAVY if m in sys.modules]}))
""".replace("HEAVY", repr(HEAVY))


def test_every_shipped_config_is_built_and_checked_without_torch() -> None:
    """Every algorithm class with its hyper-parameter checks, every config class and the whole-config checks run
    before torch is imported, for each of the shipped experiment configs."""
    out = subprocess.run([sys.executable, "-c", EVERY_CONFIG], capture_output=True, text=True, cwd=ROOT, timeout=300)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["failed"] == {}
    assert result["checked"] >= 70
    assert result["heavy"] == []


def test_a_run_does_import_lightning() -> None:
    """The probe can see an import: building the runner loads Lightning."""
    code = "import sys; from lit_fl.steps import StepRunner; StepRunner('cpu'); print('lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "True"


def test_an_algorithm_may_name_a_class_defined_below_it_in_its_signature() -> None:
    """Hyper-parameter annotations are resolved when an algorithm class is defined (so the parser never runs
    TYPE_CHECKING imports); one that cannot be resolved yet stays a string, as Python leaves it."""
    from lit_fl.algorithms.base import Algorithm

    class Plugin(Algorithm):
        def __init__(self, helper: Later | None = None, lr: float = 0.1) -> None:  # noqa: F821
            super().__init__(lr=lr)

    class Later:
        pass

    assert Plugin.__init__.__annotations__["helper"] == "Later | None"
    from lit_fl.constraints import PositiveFloat

    assert inspect.signature(Algorithm.__init__).parameters["lr"].annotation == PositiveFloat  # a type, with its range
