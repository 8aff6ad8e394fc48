"""``lit-fl sweep``: shipped sweep files are valid W&B sweeps, the W&B agent's command lines are accepted by
``lit-fl fit``, bad sweep files are one line, and a stopped sweep completes with no run repeated or lost."""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, snapshot, tiny_config, write_config

from lit_fl.configs import ROOT
from lit_fl.tracking import read_metrics

SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))
SWEEP_FILES = [p for p in SWEEPS if not p.name.endswith(".paper.yaml")]


def _grid_size(path: Path) -> int:
    """Runs of a grid sweep, counted from the file itself: the product of the value lists."""
    params = yaml.safe_load(path.read_text())["parameters"]
    return math.prod(len(p["values"]) if "values" in p else 1 for p in params.values())


def test_the_shipped_sweeps_are_there() -> None:
    names = {p.stem for p in SWEEP_FILES}
    assert {"mnist5k_label_skew", "mnist5k_baselines", "mnist5k_dfml_ablations"} <= names
    for table in ("dfml_table3", "dfml_table4_cnn", "dfml_table4_resnet", "dfml_table4_vit", "dfml_table5",
                  "dfml_table6", "dfml_table9", "dfml_table11", "dfml_table12", "fedorion_table1",
                  "fedorion_table2", "fedorion_appendix", "uapdfl_table1", "uapdfl_table2", "codistillation_table1",
                  "codistillation_table1_so", "codistillation_table2_so"):
        assert table in names, table
        assert (ROOT / "sweeps" / f"{table}.paper.yaml").is_file(), f"{table} names the paper's numbers"


@pytest.mark.parametrize("path", SWEEP_FILES, ids=lambda p: p.stem)
def test_sweep_file_is_a_valid_wandb_sweep_and_dry_runs(path: Path, tmp_path: Path) -> None:
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sweeps.config import SweepConfig

    config = yaml.safe_load(path.read_text())
    SweepConfig(config)  # W&B's own schema check (raises on any problem)
    assert config["program"] == "lit-fl" and "${args}" in config["command"]
    result = run_cli("sweep", path, "--dry-run", "--run_dir", tmp_path / "runs")
    assert result.rc == 0, result.err
    assert f"{_grid_size(path)} runs (grid)" in result.out
    assert not (tmp_path / "runs").exists()  # a dry run writes nothing


def test_agent_command_line_gives_the_same_config_as_the_local_sweep(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """The W&B agent passes ``--key=value`` in its own order (W&B's create_sweep_command_args): lit-fl fit
    accepts it and resolves the same config as the command the local sweep runs."""
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sweeps import next_run
        from wandb.sdk.launch.sweeps.utils import create_sweep_command_args

    from lit_fl.cli import main

    path = ROOT / "sweeps" / "mnist5k_label_skew.yaml"
    config = yaml.safe_load(path.read_text())
    run = next_run(config, [])
    agent_argv = create_sweep_command_args({"args": run.config})["args"]
    assert any(a.startswith("--data={") for a in agent_argv)

    def resolved(argv: list[str]) -> dict:
        with pytest.raises(SystemExit):
            main(["fit", *argv, "--print_config"])
        out = yaml.safe_load(capsys.readouterr().out)
        for key in ("name", "run_dir", "resume"):
            out.pop(key, None)
        out["logger"].pop("group")
        return out

    agent = resolved(agent_argv)
    local = resolved(_local_command(path, tmp_path))
    assert agent == local
    assert agent["data"]["partition"] == "dirichlet" and agent["data"]["beta"] == 0.1
    assert agent["algorithm"]["class_path"] == "lit_fl.algorithms.DFML"
    assert agent["seed"] == 0 and agent["rounds"] == 15


def test_agent_order_keeps_algorithm_parameters_before_the_config(capsys) -> None:  # noqa: ANN001
    """W&B's engine sorts parameters by name: ``--algorithm.init_args.*`` comes before ``--config``. The config
    file must not undo them (lit-fl fit applies --config first wherever it stands)."""
    from lit_fl.cli import main
    from lit_fl.suite.engine import agent_args

    argv = agent_args({"algorithm.init_args.alpha_schedule": "fixed", "algorithm.init_args.loss": "ce",
                       "algorithm.init_args.weighted_kl": False, "config": "experiments/mnist5k/dfml.yaml"})
    assert argv[-1].startswith("--config=")
    with pytest.raises(SystemExit):
        main(["fit", *argv, "--print_config"])
    init_args = yaml.safe_load(capsys.readouterr().out)["algorithm"]["init_args"]
    assert (init_args["alpha_schedule"], init_args["loss"], init_args["weighted_kl"]) == ("fixed", "ce", False)
    assert init_args["mutual_epochs"] == 2  # and the config file's own values are there


def _local_command(path: Path, tmp_path: Path) -> list[str]:
    from lit_fl.suite.plan import plan_sweep
    from lit_fl.suite.sweep_file import load_sweep_file

    manifest = plan_sweep(load_sweep_file(path), tmp_path / "sweeps" / "x", [])
    return manifest.runs[0].command[2:]


BAD = [
    ("unknown-key", "program: lit-fl\nmethod: grid\nparamters: {seed: {values: [0]}}\n",
     "unknown key 'paramters'; allowed: apiVersion, command, controller"),
    ("grid-distribution", "program: lit-fl\nmethod: grid\nparameters: {lr: {min: 0.1, max: 1.0}}\n",
     "parameters.lr: a grid takes value, values, int_uniform or q_uniform parameters"),
    ("program", "program: python\nmethod: grid\nparameters: {seed: {values: [0]}}\n",
     "program: unknown value 'python'; allowed: lit-fl"),
    ("unknown-config", None, "no-such-config.yaml"),
    ("malformed", "program: lit-fl\nmethod: grid\nparameters: [seed: {values: [0]\n", "malformed YAML"),
    ("bad-fit-key", None, "data.betta"),
    ("bayes", None, "bayes"),
]


def test_the_sweep_file_model_declares_the_keys_of_wandbs_schema() -> None:
    from lit_fl.suite.schema import schema_keys
    from lit_fl.suite.sweep_file import SweepSpec

    assert set(SweepSpec.model_fields) == schema_keys()


@pytest.mark.parametrize(("case", "text", "words"), BAD, ids=[b[0] for b in BAD])
def test_bad_sweep_file_is_one_line_and_writes_nothing(case: str, text: str | None, words: str, tmp_path: Path) -> None:
    if text is None:
        params = {"config": {"value": "no-such-config.yaml" if case == "unknown-config" else "cfg.yaml"},
                  "seed": {"values": [0, 1]}}
        if case == "bad-fit-key":
            params["data.betta"] = {"value": 0.3}
        write_config(tmp_path / "cfg.yaml", tiny_config())
        text = yaml.safe_dump({"program": "lit-fl", "method": "bayes" if case == "bayes" else "grid",
                               "metric": {"name": "global_acc", "goal": "maximize"}, "parameters": params,
                               "command": ["${env}", "lit-fl", "fit", "${args}"]})
    (tmp_path / "bad.yaml").write_text(text)
    before = snapshot(tmp_path)
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        result = run_cli("sweep", "bad.yaml", "--run_dir", tmp_path / "runs")
    finally:
        os.chdir(cwd)
    assert result.rc == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("lit-fl: error: "), result.err
    assert words in lines[0], lines[0]
    assert snapshot(tmp_path) == before


def test_random_sweep_needs_a_count_and_draws_reproducibly(tmp_path: Path) -> None:
    write_config(tmp_path / "cfg.yaml", tiny_config())
    sweep = {"program": "lit-fl", "method": "random", "parameters": {
        "config": {"value": str(tmp_path / "cfg.yaml")},
        "algorithm.init_args.alpha_max": {"distribution": "uniform", "min": 0.5, "max": 1.0}},
        "command": ["${env}", "lit-fl", "fit", "${args}"]}
    write_config(tmp_path / "random.yaml", sweep)
    result = run_cli("sweep", tmp_path / "random.yaml", "--dry-run")
    assert result.rc == 2 and "--count" in result.err
    first = run_cli("sweep", tmp_path / "random.yaml", "--dry-run", "--count", "3")
    again = run_cli("sweep", tmp_path / "random.yaml", "--dry-run", "--count", "3")
    assert first.rc == 0 and "3 runs (random)" in first.out and first.out == again.out


def test_wandb_mode_registers_the_sweep_and_starts_an_agent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    calls = []
    fake = types.SimpleNamespace(
        sweep=lambda config, project=None, entity=None: calls.append(("sweep", config, project)) or "abc123",
        agent=lambda sweep_id, project=None, entity=None, count=None: calls.append(("agent", sweep_id, count)),
    )
    monkeypatch.setitem(sys.modules, "wandb", fake)
    result = run_cli("sweep", ROOT / "sweeps" / "mnist5k_label_skew.yaml", "--wandb", "--rounds", "5",
                     "--run_dir", tmp_path)
    assert result.rc == 0, result.err
    (_, config, project), (_, sweep_id, count) = calls
    assert project == "lit-fl" and sweep_id == "abc123" and count is None
    assert config["command"] == ["${env}", "lit-fl", "fit", "${args}", "--rounds=5"]
    assert config["parameters"]["seed"] == {"values": [0, 1, 2]}
    assert not (tmp_path / "sweeps").exists()


# -- stopping and continuing ------------------------------------------------------------------------------------


ROUNDS = 20  # long enough that a Ctrl-C sent after the first checkpoint lands mid-run


def _tiny_sweep(folder: Path, rounds: int = ROUNDS) -> Path:
    write_config(folder / "tiny.yaml", tiny_config("DFML", rounds=rounds))
    sweep = {"program": "lit-fl", "name": "tiny", "method": "grid",
             "metric": {"name": "global_acc", "goal": "maximize"},
             "parameters": {"config": {"value": str(folder / "tiny.yaml")}, "seed": {"values": [0, 1, 2]}},
             "command": ["${env}", "lit-fl", "fit", "${args}"]}
    return write_config(folder / "tiny_sweep.yaml", sweep)


def _sweep_argv(sweep: Path, runs: Path) -> list[str]:
    return [sys.executable, "-m", "lit_fl.cli", "sweep", str(sweep), "--run_dir", str(runs)]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]), WANDB_MODE="offline")


def _run_sweep(sweep: Path, runs: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(_sweep_argv(sweep, runs), capture_output=True, text=True, env=_env(), timeout=timeout)


def _sweep_process(sweep: Path, runs: Path) -> subprocess.Popen:
    return subprocess.Popen(
        _sweep_argv(sweep, runs), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env(),
        start_new_session=True,
    )


def _wait_for_checkpoint(path: Path, process: subprocess.Popen, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not path.is_file():
        assert process.poll() is None, process.stdout.read()
        assert time.monotonic() < deadline, "no checkpoint appeared"
        time.sleep(0.1)


@pytest.mark.slow
def test_stopped_sweep_completes_with_no_run_repeated_or_lost(tmp_path: Path) -> None:
    sweep = _tiny_sweep(tmp_path)
    full = tmp_path / "full"
    assert _run_sweep(sweep, full).returncode == 0

    stopped = tmp_path / "stopped"
    runs = stopped / "sweeps" / "tiny" / "runs"
    # 1. Ctrl-C (SIGINT to the whole process group, as a terminal sends it) during the first run
    process = _sweep_process(sweep, stopped)
    _wait_for_checkpoint(runs / "000-tiny-s0" / "checkpoints" / "last.ckpt", process)
    os.killpg(process.pid, signal.SIGINT)
    assert process.wait(timeout=120) == 75, process.stdout.read()
    first = json.loads((runs / "000-tiny-s0" / "summary.json").read_text())
    assert first["status"] == "interrupted" and first["rounds_completed"] < ROUNDS
    # 2. kill -9 of the sweep itself during the second run: the run dies with it (no orphan)
    process = _sweep_process(sweep, stopped)
    _wait_for_checkpoint(runs / "001-tiny-s1" / "checkpoints" / "last.ckpt", process)
    os.kill(process.pid, signal.SIGKILL)
    process.wait(timeout=60)
    time.sleep(1.0)
    # 3. run it again: it completes
    result = _run_sweep(sweep, stopped)
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((stopped / "sweeps" / "tiny" / "manifest.json").read_text())
    assert [r["status"] for r in manifest["runs"]] == ["completed"] * 3
    for name in ("000-tiny-s0", "001-tiny-s1", "002-tiny-s2"):
        rows = read_metrics(runs / name / "metrics.csv")
        assert [r["round"] for r in rows] == list(range(1, ROUNDS + 1)), name  # no round lost, none repeated
        reference = read_metrics(full / "sweeps" / "tiny" / "runs" / name / "metrics.csv")
        for key in ("global_acc", "global_acc_regular", "local_acc", "comm_mb"):
            assert [r[key] for r in rows] == [r[key] for r in reference], (name, key)
    again = _run_sweep(sweep, stopped, timeout=120)
    assert again.returncode == 0 and "3 of 3 runs already completed: skipped" in again.stdout


def test_jobs_above_the_work_or_the_cores_clamp_to_what_can_run_and_say_so(tmp_path: Path) -> None:
    """``--jobs 1000000000`` on a sweep with nothing left built a slot per job (still running after 40 s)."""
    from lit_fl.suite.manifest import Manifest, SweepRun
    from lit_fl.suite.runner import jobs_that_run, run_sweep

    said: list[str] = []
    assert jobs_that_run(10**9, 3, said.append) == min(3, os.cpu_count() or 1)
    assert said == [f"--jobs 1000000000: {min(3, os.cpu_count() or 1)} at once (3 runs to do on "
                    f"{os.cpu_count() or 1} CPU cores)"]
    said.clear()
    assert jobs_that_run(1, 3, said.append) == 1 and said == []  # nothing clamped: nothing said
    run = SweepRun(name="000-x", params={}, command=["lit-fl", "fit"], status="completed", run_dir="runs/000-x")
    (tmp_path / "runs" / "000-x").mkdir(parents=True)
    (tmp_path / "runs" / "000-x" / "summary.json").write_text(json.dumps({"status": "completed"}))
    manifest = Manifest(sweep="s", method="grid", metric={}, file="s.yaml", runs=[run])
    started = time.monotonic()
    assert run_sweep(tmp_path, manifest, jobs=10**9, report=said.append) == 0
    assert time.monotonic() - started < 5
    assert said[0] == "1 of 1 runs already completed: skipped"


def test_a_sweep_continued_from_another_working_directory_writes_its_runs_into_its_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 37: run 001 of a sweep continued from elsewhere with ``--run_dir`` at its folder was written under the
    working directory (the manifest's relative ``--run_dir``)."""
    from lit_fl.suite.manifest import SweepRun
    from lit_fl.suite.runner import run_argv

    planned = SweepRun(name="001-x", params={}, status="pending", run_dir="runs/001-x",
                       command=["lit-fl", "fit", "--config=c.yaml", "--run_dir=runs/sweeps/s/runs", "--name=001-x"])
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    sweep_dir = Path("..") / "lab" / "runs" / "sweeps" / "s"  # as the user gives it, relative to the new directory
    argv = run_argv(sweep_dir, planned)
    run_dirs = [arg for arg in argv if arg.startswith("--run_dir=")]
    assert run_dirs == [f"--run_dir={(elsewhere / sweep_dir / 'runs').absolute()}"]
    assert argv[-1] == run_dirs[0] and "--name=001-x" in argv
