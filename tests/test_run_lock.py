"""One writer per run directory: a second ``lit-fl fit`` on a folder another process is writing gets one line naming
the holder's PID and exits 2, writing nothing; a dead holder's lock is free (the OS releases a flock with its
process), so a run killed with -9 resumes."""

from __future__ import annotations

import os
from pathlib import Path

from conftest import run_cli, snapshot, tiny_config, write_config

from lit_fl.run_dir import RunDir


def test_a_second_writer_gets_one_line_naming_the_holder_and_writes_nothing(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
    runs = tmp_path / "runs"
    assert run_cli("fit", "--config", cfg, "--run_dir", runs, "--name", "twin").rc == 0
    with RunDir(runs / "twin").lock(fresh=False):  # another process writing the run (its PID: ours)
        before = snapshot(tmp_path)
        result = run_cli("fit", "--resume", runs / "twin", "--rounds", "2")
        assert result.rc == 2, result.err
        assert result.err.strip().splitlines() == [
            f"lit-fl: error: run directory {runs / 'twin'} is being written by another lit-fl process (PID "
            f"{os.getpid()}); wait for it to end, or choose another --name"]
        assert snapshot(tmp_path) == before


def test_a_dead_holders_lock_is_free_and_a_fresh_run_never_writes_into_another(tmp_path: Path) -> None:
    cfg = write_config(tmp_path / "c.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
    runs = tmp_path / "runs"
    assert run_cli("fit", "--config", cfg, "--run_dir", runs, "--name", "r").rc == 0
    (runs / "r" / ".lock").write_text("999999\n")  # left by a process killed with -9: no flock held any more
    result = run_cli("fit", "--resume", runs / "r", "--rounds", "2")
    assert result.rc == 0, result.err
    assert (runs / "r" / ".lock").read_text().strip() == str(os.getpid())
    # a fresh run's folder that another run filled meanwhile (between its existence check and its lock) is refused
    (runs / "late").mkdir()
    (runs / "late" / "config.yaml").write_text("seed: 0\n")
    try:
        with RunDir(runs / "late").lock(fresh=True):
            raise AssertionError("a fresh run took a folder another run had written")
    except Exception as err:  # noqa: BLE001
        assert "exists; choose another --name or continue it with --resume" in str(err)


def test_a_second_sweep_on_one_sweep_folder_gets_one_line(tmp_path: Path) -> None:
    from test_sweep import _tiny_sweep

    from lit_fl.run_dir import writer_lock

    sweep = _tiny_sweep(tmp_path, rounds=1)
    folder = tmp_path / "runs" / "sweeps" / "tiny"
    with writer_lock(folder, "sweep", "give another --run_dir"):  # another `lit-fl sweep` running this sweep
        result = run_cli("sweep", sweep, "--run_dir", tmp_path / "runs")
    assert result.rc == 2, result.err
    assert result.err.strip().splitlines() == [
        f"lit-fl: error: sweep {folder} is being written by another lit-fl process (PID {os.getpid()}); wait for it "
        "to end, or give another --run_dir"]
    assert sorted(p.name for p in folder.iterdir()) == [".lock"]  # nothing of the sweep was written


def test_a_sweep_name_is_a_folder_name_and_run_options_are_not_forwarded(tmp_path: Path) -> None:
    import yaml
    from test_sweep import _tiny_sweep

    sweep = _tiny_sweep(tmp_path, rounds=1)
    for name in ("/abs/path", "../../x", ".."):
        config = yaml.safe_load(sweep.read_text())
        config["name"] = name
        sweep.write_text(yaml.safe_dump(config))
        result = run_cli("sweep", sweep, "--run_dir", tmp_path / "runs", "--dry-run")
        assert result.rc == 2 and result.err.count("\n") == 1, result.err
        assert f"name: {name!r} is not allowed" in result.err
    sweep = _tiny_sweep(tmp_path, rounds=1)
    for option in ("--resume", "--name"):
        result = run_cli("sweep", sweep, "--run_dir", tmp_path / "runs", option, str(tmp_path / "elsewhere"))
        assert result.rc == 2 and result.err.count("\n") == 1, result.err
        assert f"sweep: {option} is not passed to a sweep's runs" in result.err
    assert not (tmp_path / "runs").exists() and not (tmp_path / "elsewhere").exists()
