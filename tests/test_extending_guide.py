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


def test_the_guide_names_every_hook_of_decentralized_methods_and_dfml() -> None:
    """Every public method a subclass of DecentralizedAlgorithm or DFML may override is in the guide's hook table
    (a new hook without a line there fails this test)."""
    from lit_fl.algorithms import DFML, DecentralizedAlgorithm
    from lit_fl.algorithms.base import Algorithm

    text = GUIDE.read_text()
    table = text[text.index("### Hooks of DecentralizedAlgorithm and DFML"):text.index("### Draw randomness")]
    contract = {"run_round", "setup", "state_dict", "load_state_dict", "batches", "work", "local_phase", "name"}
    hooks = {name for cls in (DecentralizedAlgorithm, DFML) for name, value in vars(cls).items()
             if not name.startswith("_") and (callable(value) or name == "alpha") and name not in contract}
    hooks |= {"local_work"} & set(vars(Algorithm))
    missing = sorted(h for h in hooks if f"`{h}(" not in table)
    assert not missing, f"hooks missing from docs/extending.md: {missing}"
    for name in ("Participants", "lit_fl.federation.round", "**kwargs", "runner.run_phase", "ClientWork"):
        assert name in text, name


def test_the_guides_dfml_variant_runs_and_picks_the_richest_participant(tmp_path: Path) -> None:
    """The guide's example, copied as a user would, runs two rounds; every round's aggregator holds the most
    training data among that round's participants."""
    import subprocess
    import sys

    import yaml
    from conftest import tiny_config
    from federations import tiny_federation

    code = next(b for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S) if "RichestAggregator" in b)
    (tmp_path / "richest.py").write_text(code)
    config = tiny_config("DFML", rounds=2)
    config["algorithm"]["class_path"] = "richest.RichestAggregator"
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(config))
    command = [sys.executable, "-c", "import sys; from lit_fl.cli import main; sys.exit(main())", "fit", "--config",
               "run.yaml", "--run_dir", "runs", "--name", "richest"]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "WANDB_MODE": "offline"})
    assert result.returncode == 0, result.stderr[-2000:]
    rows = read_metrics(tmp_path / "runs" / "richest" / "metrics.csv")
    assert len(rows) == 2 and all(r["num_participants"] >= 2 for r in rows)

    sizes = [c.num_train for c in tiny_federation(num_clients=4).clients]  # the run's partition: same data, seed
    assert len(set(sizes)) == 4  # distinct sizes: the richest participant is well defined
    for row in rows:
        participants = _participants(tmp_path / "richest.py", int(row["round"]))
        assert int(row["aggregator"]) == max(participants, key=sizes.__getitem__), (row, sizes, participants)


def _participants(module: Path, round_: int) -> list[int]:
    """The participants of a round as the user's class draws them (its selection replayed on the same seed)."""
    import importlib.util

    from federations import tiny_federation

    spec = importlib.util.spec_from_file_location("richest_replay", module)
    assert spec is not None and spec.loader is not None
    user = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(user)
    algo = user.RichestAggregator(sender_fraction=0.5)
    fed = tiny_federation(num_clients=4)
    drawn = None
    for r in range(1, round_ + 1):
        drawn = algo.select(r, fed)
    assert drawn is not None
    return list(drawn.all)
