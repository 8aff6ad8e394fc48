"""A fast command line: ``--help``, ``--print_config`` and config errors never import the heavy libraries.

Lightning, torchmetrics, timm, W&B, torchvision and the model libraries cost seconds of imports; they are
imported when a run starts. (Latency itself is measured in benchmarks/cli_latency.py, not in a timed test.)
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("lightning", "torchmetrics", "timm", "wandb", "torchvision", "vit_pytorch", "efficientnet_pytorch")

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
    ],
)
def test_the_command_line_answers_without_heavy_imports(argv: list[str], code: int, tmp_path: Path) -> None:
    result = imported_by(*argv, *(["--run_dir", str(tmp_path)] if argv[0] == "fit" else []))
    assert result["code"] == code
    assert result["heavy"] == []


def test_a_run_does_import_lightning() -> None:
    """The probe can see an import: building the runner loads Lightning."""
    code = "import sys; from lit_fl.steps import StepRunner; StepRunner('cpu'); print('lightning' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.stdout.strip() == "True"
