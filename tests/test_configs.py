"""Configs ship inside the package: a config name resolves from any directory; ``lit-fl configs`` lists them."""

from __future__ import annotations

from fnmatch import fnmatch
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from lit_fl.configs import ROOT, list_configs


def test_fit_resolves_a_shipped_config_name_from_any_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lit_fl.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", "dfml_cifar100.yaml", "--print_config"])
    assert exit_info.value.code == 0
    config = yaml.safe_load(capsys.readouterr().out)
    assert config["data"]["dataset"] == "cifar100" and config["data"]["num_clients"] == 50
    assert config["algorithm"]["class_path"] == "lit_fl.algorithms.DFML" and config["models"]["pool"] == "h2_cnn"
    with pytest.raises(SystemExit):
        main(["fit", "--config=experiments/mnist5k/fedavg.yaml", "--print_config"])  # a repo path, also elsewhere
    assert "DecentralizedFedAvg" in capsys.readouterr().out


def test_unknown_config_name_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run_cli("fit", "--config", "dfml_cifar1000.yaml")
    assert result.rc == 2 and result.err.count("\n") == 1
    assert "--config" in result.err and "dfml_cifar1000.yaml" in result.err and "lit-fl configs" in result.err


def test_configs_lists_every_shipped_file() -> None:
    result = run_cli("configs")
    assert result.rc == 0
    assert "dfml_cifar100.yaml" in result.out and "mnist5k_label_skew.yaml" in result.out
    assert ".paper.yaml" not in result.out
    assert len(list_configs("experiments")) >= 70


def test_package_data_covers_every_config() -> None:
    """A non-editable ``pip install`` ships what pyproject's package-data globs name: every config."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    pyproject = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())
    globs = pyproject["tool"]["setuptools"]["package-data"]["lit_fl"]
    for path in list_configs():
        relative = f"configs/{path.as_posix()}"
        matches = [fnmatch(relative, g.replace("**/", "*")) or fnmatch(relative, g.replace("/**", "")) for g in globs]
        assert any(matches), path
    assert (ROOT / "experiments").is_dir() and (ROOT / "sweeps").is_dir()
