"""A user's own algorithm, model and dataset, named in a config and imported from the working directory; every
way loading them can fail gives one line naming the config key and the real cause (through the ``lit-fl`` command,
from a fresh folder, as a user runs it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tiny_config, write_config

GOSSIP_OK = """
from lit_fl.algorithms import DecentralizedFedAvg


class Gossip(DecentralizedFedAvg):
    pass
"""
MODELS = """
from torch import nn


def tiny(input_shape, num_classes):
    return nn.Sequential(nn.Flatten(), nn.Linear(input_shape[0] * input_shape[1] * input_shape[2], num_classes))
"""
DATA = """
from lit_fl.data import load_dataset


def load(root, download, seed, **options):
    return load_dataset("synthetic", seed=seed, **options)
"""


def lit_fl(cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-c", "import sys; from lit_fl.cli import main; sys.exit(main())", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)


def config(tmp_path: Path, **overrides: object) -> Path:
    cfg = tiny_config("DecentralizedFedAvg", rounds=1)
    cfg["algorithm"]["class_path"] = "gossip.Gossip"
    for key, value in overrides.items():
        section, _, name = key.partition("__")
        cfg[section][name] = value
    return write_config(tmp_path / "run.yaml", cfg)


@pytest.mark.parametrize(
    ("files", "expected"),
    [
        ({}, ["algorithm.class_path", "'gossip.Gossip'", "no module named 'gossip'"]),
        ({"gossip.py": "import numpy\nx = 1 / 0\n"}, ["algorithm.class_path", "ZeroDivisionError", "gossip.py:2"]),
        ({"gossip.py": "import not_installed_pkg\n"},
         ["algorithm.class_path", "No module named 'not_installed_pkg'", "gossip.py:1"]),
        ({"gossip.py": "class Gosip:\n    pass\n"}, ["algorithm.class_path", "has no 'Gossip'", "Gosip"]),
        ({"gossip.py": "def f(:\n"}, ["algorithm.class_path", "SyntaxError", "gossip.py:1"]),
    ],
    ids=["not-found", "raises", "missing-dependency", "no-such-class", "syntax-error"],
)
def test_an_algorithm_that_cannot_be_loaded_gives_one_line_with_the_real_cause(
    tmp_path: Path, files: dict[str, str], expected: list[str]
) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = lit_fl(tmp_path, "fit", "--config", str(config(tmp_path)), "--run_dir", str(tmp_path / "runs"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert all(part in lines[0] for part in expected), lines[0]
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize(("key", "value"), [("models__pool", ["mymodels:tiny"]), ("data__dataset", "mydata:load")])
def test_a_model_or_dataset_that_cannot_be_loaded_names_its_key(tmp_path: Path, key: str, value: object) -> None:
    (tmp_path / "gossip.py").write_text(GOSSIP_OK)
    (tmp_path / "mymodels.py").write_text("raise RuntimeError('no GPU here')\n")
    result = lit_fl(tmp_path, "fit", "--config", str(config(tmp_path, **{key: value})))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    name = key.replace("__", ".")
    assert lines[0].startswith(f"lit-fl: error: {name}: cannot load"), lines[0]
    assert ("RuntimeError: no GPU here (mymodels.py:1)" in lines[0]) if "models" in key else (
        "no module named 'mydata'" in lines[0])


def test_a_users_algorithm_model_and_dataset_run_from_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "gossip.py").write_text(GOSSIP_OK)
    (tmp_path / "mymodels.py").write_text(MODELS)
    (tmp_path / "mydata.py").write_text(DATA)
    path = config(tmp_path, models__pool=["mymodels:tiny"], data__dataset="mydata:load")
    result = lit_fl(tmp_path, "fit", "--config", str(path), "--run_dir", "runs", "--name", "mine")
    assert result.returncode == 0, result.stderr
    assert "completed: 1/1 rounds" in result.stdout
    assert (tmp_path / "runs" / "mine" / "metrics.csv").is_file()


def test_a_subclass_that_does_not_forward_kwargs_is_told_why_a_base_key_is_unknown(tmp_path: Path) -> None:
    """``lr`` belongs to the base class; ``G.__init__`` without ``**kwargs`` cuts it off. The line must not list
    ``lr`` as allowed while calling it unknown, and must say how to fix it."""
    (tmp_path / "gossip.py").write_text(
        "from lit_fl.algorithms import DecentralizedFedAvg\n\n\nclass Gossip(DecentralizedFedAvg):\n"
        "    def __init__(self, self_weight: float = 0.5) -> None:\n        super().__init__()\n")
    cfg = config(tmp_path)
    text = cfg.read_text().replace("sender_fraction: 0.5", "lr: 0.05")
    cfg.write_text(text)
    result = lit_fl(tmp_path, "fit", "--config", str(cfg), "--run_dir", str(tmp_path / "runs"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert lines[0].startswith("lit-fl: error: algorithm.lr: unknown key for Gossip; allowed: self_weight (")
    assert "Gossip.__init__ takes no **kwargs" in lines[0] and "super().__init__" in lines[0]
