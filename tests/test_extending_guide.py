"""docs/extending.md: its commands run as written, from a fresh folder holding a copy of examples/, with the
installed ``lit-fl`` command; the user's method (examples/gossip.py) fits, resumes, fails under faults, takes a
user's model, sweeps, compares and documents its keys."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from lit_fl.tracking import read_metrics

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "extending.md"


def guide_commands() -> list[str]:
    """The first bash block of the guide, line by line."""
    block = re.search(r"```bash\n(.*?)```", GUIDE.read_text(), re.S)
    assert block is not None
    return [line for line in block.group(1).splitlines() if line.strip()]


@pytest.mark.slow
def test_the_guides_commands_run_as_written(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    assert shutil.which("lit-fl"), "lit-fl is installed (pip install -e .)"
    env = {**os.environ, "WANDB_MODE": "offline", "WANDB_SILENT": "true"}
    script = "set -e\n" + "\n".join(guide_commands()) + "\n"
    result = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 0, result.stderr[-3000:]
    runs = tmp_path / "examples" / "runs"
    resumed = read_metrics(runs / "gossip" / "metrics.csv")
    assert [r["round"] for r in resumed] == list(range(1, 13))  # resumed from round 10 to 12
    faulty = read_metrics(runs / "gossip-faults" / "metrics.csv")
    assert faulty[9]["comm_mb"] < resumed[9]["comm_mb"] and sum(r["dropped_senders"] for r in faulty) > 0
    assert faulty[9]["global_acc"] != resumed[9]["global_acc"]
    assert json.loads((runs / "gossip-mlp" / "summary.json").read_text())["status"] == "completed"
    assert (runs / "sweeps" / "gossip_sweep" / "compare" / "dashboard.html").is_file()
    assert "--algorithm.self_weight" in result.stdout and "--algorithm.local_epochs" in result.stdout
