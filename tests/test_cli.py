"""``lit-fl fit`` end to end: help, --print_config, the run directory contract and one-line config errors."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, snapshot, tiny_config, write_config

from lit_fl.tracking import read_metrics

RUN = "done"


@pytest.fixture(scope="module")
def finished(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A completed 3-round DFML run: ``<root>/cfg.yaml`` and ``<root>/runs/done``."""
    root = tmp_path_factory.mktemp("cli")
    cfg = write_config(root / "cfg.yaml", tiny_config("DFML", rounds=3))
    result = run_cli("fit", "--config", cfg, "--run_dir", root / "runs", "--name", RUN)
    assert result.rc == 0, result.err
    assert "completed: 3/3 rounds" in result.out
    (root / "out.txt").write_text(result.out)
    return root


def test_fit_help_text(capsys: pytest.CaptureFixture[str]) -> None:
    from lit_fl.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "--config" in text
    assert "--rounds" in text
    assert "--algorithm" in text


def test_print_config_is_resolved_yaml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from lit_fl.cli import main

    cfg = write_config(tmp_path / "cfg.yaml", tiny_config("DFML"))
    with pytest.raises(SystemExit) as exit_info:
        main(["fit", "--config", str(cfg), "--run_dir", str(tmp_path / "runs"), "--print_config"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "alpha_max" in text
    printed = yaml.safe_load(text)
    assert printed["algorithm"]["class_path"] == "lit_fl.algorithms.DFML"
    assert printed["algorithm"]["init_args"]["alpha_max"] == 0.9  # a default, filled in
    assert printed["data"]["dataset"] == "synthetic"
    assert not (tmp_path / "runs").exists()


def test_run_directory_contract(finished: Path) -> None:
    run = finished / "runs" / RUN
    assert sorted(p.name for p in finished.joinpath("runs").iterdir()) == [RUN]

    config = yaml.safe_load((run / "config.yaml").read_text())
    assert config["algorithm"]["class_path"] == "lit_fl.algorithms.DFML"
    assert config["algorithm"]["init_args"]["mutual_epochs"] == 1
    assert "alpha_max" in config["algorithm"]["init_args"]  # resolved: defaults written out
    assert config["data"]["dataset"] == "synthetic"
    assert config["data"]["beta"] == 0.5
    assert config["data"]["options"]["num_classes"] == 4
    assert config["models"]["pool"] == ["cnn_4_8", "cnn_8"]
    assert config["rounds"] == 3
    assert "config" not in config and "resume" not in config

    rows = read_metrics(run / "metrics.csv")
    header = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    required = ["round", "reported_acc", "global_acc", "global_acc_regular", "local_acc", "alpha", "comm_mb", "round_s"]
    required += ["acc/cnn_4_8", "acc/cnn_8"]
    assert set(required) <= set(header), sorted(set(required) - set(header))
    assert [r["round"] for r in rows] == [1, 2, 3]
    for row in rows:
        for key in ("global_acc", "global_acc_regular", "local_acc", "acc/cnn_4_8", "acc/cnn_8"):
            assert 0.0 <= row[key] <= 1.0, (key, row)
        assert row["reported_acc"] == row["global_acc"]  # DFML reports its peak models' global accuracy
        assert 0.0 <= row["alpha"] <= 0.9
        assert row["round_s"] >= 0.0
    comm = [r["comm_mb"] for r in rows]
    assert comm == sorted(comm) and comm[-1] > 0.0

    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed"
    assert summary["rounds_completed"] == 3
    assert summary["final"]["round"] == 3
    assert math.isclose(summary["final"]["global_acc"], rows[-1]["global_acc"], abs_tol=1e-5)
    best = max(rows, key=lambda r: r["reported_acc"])
    assert math.isclose(summary["best"]["reported_acc"], best["reported_acc"], abs_tol=1e-5)
    assert summary["best"]["round"] == best["round"] and summary["best_global_acc"]["round"] == best["round"]
    assert summary["reports"] == "global_acc" and summary["topology"] == "mesh"

    assert (run / "checkpoints" / "last.ckpt").is_file()
    assert not (run / "wandb").exists()


def test_the_final_line_says_the_reported_accuracy_and_the_traffic_in_significant_digits(finished: Path) -> None:
    """``completed: ... reported_acc X (best Y at round R; column), M MB sent``: M to three significant digits (a
    run that sent 0.042 MB does not say 0.0)."""
    import re

    summary = json.loads((finished / "runs" / RUN / "summary.json").read_text())
    line = (finished / "out.txt").read_text().splitlines()[-1]
    final, best = summary["final"]["reported_acc"], summary["best"]
    assert f"reported_acc {final:.4f} (best {best['reported_acc']:.4f} at round {best['round']}; global_acc)" in line
    sent = re.search(r", (\S+) MB sent", line)
    assert sent and summary["comm_mb"] < 1.0 and float(sent.group(1)) == float(f"{summary['comm_mb']:.3g}"), line


def test_the_last_round_is_evaluated_only_when_eval_every_asks_for_it(tmp_path: Path) -> None:
    """Issue 38: the final evaluation follows eval_every like every other round (a run pays only for the
    evaluations it asks for); the last line says which round its accuracy is from, or that none was evaluated."""
    config = write_config(tmp_path / "tiny.yaml", tiny_config("DecentralizedFedAvg", rounds=3))
    runs = tmp_path / "runs"
    three = run_cli("fit", "--config", config, "--run_dir", runs, "--name", "three", "--eval_every", "2")
    assert three.rc == 0, three.err
    assert [row["round"] for row in read_metrics(runs / "three" / "metrics.csv")] == [2]
    assert "3/3 rounds, reported_acc " in three.out and " at round 2 (best " in three.out, three.out
    none = run_cli("fit", "--config", config, "--run_dir", runs, "--name", "none", "--eval_every", "5")
    assert none.rc == 0, none.err
    assert not (runs / "none" / "metrics.csv").exists()  # no row was written
    assert "3/3 rounds, not evaluated (no round was a multiple of eval_every)" in none.out, none.out
    assert json.loads((runs / "none" / "summary.json").read_text())["final"] == {}


@pytest.mark.parametrize(("mb", "shown"), [(0.0, "0"), (0.0421, "0.0421"), (0.04216, "0.0422"), (1.5, "1.5"),
                                           (45.678, "45.7"), (1234.6, "1,235"), (0.0000123, "1.23e-05")])
def test_megabytes_keep_three_significant_digits(mb: float, shown: str) -> None:
    from lit_fl.commands.fit import megabytes

    assert megabytes(mb) == shown


def test_summary_records_the_network_a_method_used() -> None:
    """``summary.json``'s ``topology``: the topology's name for a method that reads it, ``server`` for a server method
    (with a server model, or ``uses_topology`` false: FedMD's logits), ``none`` for one that sends nothing."""
    from federations import tiny_federation

    from lit_fl.algorithms import DecentralizedFedAvg, FedMD, Local, ServerFedAvg
    from lit_fl.experiment import topology_used
    from lit_fl.federation.topology import ring

    fed = tiny_federation(num_clients=4, pool=("cnn_4_8",))
    assert topology_used(DecentralizedFedAvg(), fed) == "mesh"
    assert topology_used(Local(), fed) == "none"
    assert topology_used(FedMD(), fed) == "server"
    server = ServerFedAvg()
    server.setup(fed)
    assert topology_used(server, fed) == "server"
    ringed = tiny_federation(num_clients=4, pool=("cnn_4_8",))
    ringed.topology = ring(4)
    assert topology_used(DecentralizedFedAvg(), ringed) == "ring" and topology_used(FedMD(), ringed) == "server"


# (extra argv, config changes, words the one error line must contain); ids name the case
BAD = [
    pytest.param(["--rounds", "-1"], {}, ["rounds", ">= 1"], id="negative-rounds"),
    pytest.param(["--data.beta", "0"], {}, ["data.beta", "> 0"], id="beta-zero"),
    pytest.param(["--data.beta", "-1"], {}, ["data.beta", "> 0"], id="beta-negative"),
    pytest.param(["--algorithm.sender_fraction", "1.5"], {}, ["algorithm.sender_fraction", "(0, 1]"], id="sender"),
    pytest.param(["--data.dataset", "imagenet"], {}, ["data.dataset", "imagenet", "mnist5k"], id="dataset"),
    pytest.param(["--models.pool", "[resnet99]"], {}, ["models.pool", "resnet99", "cnn_"], id="pool"),
    pytest.param(["--rounds", "abc"], {}, ["rounds", "int"], id="wrong-type"),
    pytest.param(
        [],
        {"data": {"betta": 0.1}},
        ["data.betta", "beta"],
        id="unknown-yaml-key",
    ),
    pytest.param(
        ["--data.partition", "foo"], {}, ["data.partition", "dirichlet"], id="partition"
    ),
]


def _bad_config(root: Path, changes: dict) -> Path:
    config = tiny_config("DFML", rounds=3)
    for section, values in changes.items():
        config[section].update(values)
    return write_config(root / "bad.yaml", config)


def _copy_runs(finished: Path, tmp_path: Path) -> Path:
    runs = tmp_path / "runs"
    shutil.copytree(finished / "runs", runs)
    return runs


def _assert_one_line_error(err: str, words: list[str]) -> None:
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"expected one stderr line, got {err!r}"
    assert lines[0].startswith("lit-fl: error: "), lines[0]
    for word in words:
        assert word in lines[0], f"{word!r} missing from {lines[0]!r}"


@pytest.mark.parametrize(("argv", "changes", "words"), BAD)
def test_bad_config_new_run(
    argv: list[str],
    changes: dict,
    words: list[str],
    finished: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    runs = _copy_runs(finished, tmp_path)
    cfg = _bad_config(tmp_path, changes)
    before = snapshot(tmp_path)
    result = run_cli("fit", "--config", cfg, "--run_dir", runs, "--name", "new", *argv)
    assert result.rc != 0
    _assert_one_line_error(result.err, words)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("argv", "changes", "words"), BAD)
def test_bad_config_on_resume_leaves_run_untouched(
    argv: list[str],
    changes: dict,
    words: list[str],
    finished: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    runs = _copy_runs(finished, tmp_path)
    cfg = _bad_config(tmp_path, changes)
    before = snapshot(tmp_path)
    result = run_cli("fit", "--config", cfg, "--resume", runs / RUN, *argv)
    assert result.rc != 0
    _assert_one_line_error(result.err, words)
    assert snapshot(tmp_path) == before


def test_existing_run_dir_needs_resume(finished: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    runs = _copy_runs(finished, tmp_path)
    cfg = _bad_config(tmp_path, {})
    before = snapshot(tmp_path)
    result = run_cli("fit", "--config", cfg, "--run_dir", runs, "--name", RUN)
    assert result.rc != 0
    _assert_one_line_error(result.err, [RUN, "--resume"])
    assert snapshot(tmp_path) == before


def test_resume_without_checkpoint_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = _bad_config(tmp_path, {})
    before = snapshot(tmp_path)
    result = run_cli("fit", "--config", cfg, "--resume", tmp_path / "runs" / "missing")
    assert result.rc != 0
    _assert_one_line_error(result.err, ["--resume", "missing"])
    assert snapshot(tmp_path) == before


def test_missing_torchvision_dataset_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    cfg = write_config(tmp_path / "cfg.yaml", tiny_config())
    before = snapshot(tmp_path)
    result = run_cli(
        "fit", "--config", cfg, "--data.dataset", "cifar10", "--data.options", "{}",
        "--data.root", tmp_path / "nothing", "--run_dir", tmp_path / "runs",
    )
    assert result.rc == 2
    _assert_one_line_error(result.err, ["CIFAR-10", str(tmp_path / "nothing"), "--data.download true"])
    assert snapshot(tmp_path) == before
