"""Damaged and unusual input to ``compare``, ``sweep`` and ``partition``, tried as a reliability tester would: every
file a command reads in every damaged form, every output path in every unwritable form. Each case exits non-zero
with at most three lines on stderr (the last one naming the file or key), no traceback, and writes nothing. All
cases run in one process on hand-made run folders."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, snapshot, tiny_config, write_config

from lit_fl.suite.manifest import Manifest, SweepRun
from lit_fl.tracking import MetricsCSV

# -- hand-made runs and a sweep folder --------------------------------------------------------------------------


def _run(folder: Path, seed: int, accuracy: list[float]) -> None:
    csv = MetricsCSV(folder / "metrics.csv")
    for r, a in enumerate(accuracy, 1):
        csv.append({"round": r, "global_acc": a, "comm_mb": float(r)})
    (folder / "config.yaml").write_text(yaml.safe_dump({"seed": seed, "data": {"beta": 0.5}}))
    (folder / "summary.json").write_text(json.dumps({"status": "completed"}))


def _world(tmp: Path) -> None:
    """tmp/runs/{a,b}: plain runs; tmp/sweep: a sweep folder of two runs with paper numbers; tmp/cfg.yaml,
    tmp/sweep.yaml: a config and a sweep file over it; tmp/a-file: a file."""
    _run(tmp / "runs" / "a", 0, [0.5, 0.6])
    _run(tmp / "runs" / "b", 1, [0.55, 0.65])
    sweep = tmp / "sweep"
    runs = [SweepRun(f"00{s}-s{s}", {"seed": s}, ["lit-fl", "fit"], "completed", f"runs/00{s}-s{s}") for s in (0, 1)]
    for run in runs:
        _run(sweep / run.run_dir, run.params["seed"], [0.5, 0.7])
    Manifest("sw", "grid", {"name": "global_acc", "goal": "maximize"}, "sw.yaml", [], runs).save(sweep)
    (sweep / "paper.yaml").write_text(yaml.safe_dump({"source": "T", "metric": "global_acc",
                                                       "rows": [{"match": {}, "value": 0.7}]}))
    write_config(tmp / "cfg.yaml", tiny_config("DFML", rounds=1))
    sweep_file = {"program": "lit-fl", "name": "tiny", "method": "grid",
                  "parameters": {"config": {"value": str(tmp / "cfg.yaml")}, "seed": {"values": [0, 1]}}}
    write_config(tmp / "sweep.yaml", sweep_file)
    (tmp / "a-file").write_text("not a folder")


def _write(relative: str, content: str | bytes) -> Callable[[Path], None]:
    def damage(tmp: Path) -> None:
        path = tmp / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())

    return damage


def _edit_sweep(**changes: object) -> Callable[[Path], None]:
    def damage(tmp: Path) -> None:
        config = yaml.safe_load((tmp / "sweep.yaml").read_text())
        for key, value in changes.items():
            if value is None:
                config.pop(key, None)
            else:
                config[key] = value
        write_config(tmp / "sweep.yaml", config)

    return damage


def _nothing(tmp: Path) -> None:
    pass


BINARY = bytes(range(256)) * 4
SWEEP = ["sweep", "{tmp}/sweep.yaml", "--run_dir", "{tmp}/out-runs"]
PARTITION = ["partition", "--config", "{tmp}/cfg.yaml", "--out", "{tmp}/partition"]

# (id, damage, argv, words the last stderr line must contain)
CASES: list[tuple[str, Callable[[Path], None], list[str], list[str]]] = [
    # compare: what it reads
    ("compare-missing-path", _nothing, ["compare", "{tmp}/nowhere"], ["nowhere", "does not exist"]),
    ("compare-path-is-a-file", _nothing, ["compare", "{tmp}/a-file"], ["a-file", "not a folder"]),
    ("compare-empty-folder", _write("empty/.keep", ""), ["compare", "{tmp}/empty"], ["no runs with metrics"]),
    ("compare-metrics-not-a-number", _write("runs/a/metrics.csv", "round,global_acc\n1,abc\n"),
     ["compare", "{tmp}/runs"], ["runs/a/metrics.csv", "line 2", "'abc' is not a number"]),
    ("compare-metrics-short-row", _write("runs/a/metrics.csv", "round,global_acc,comm_mb\n1,0.5\n"),
     ["compare", "{tmp}/runs"], ["runs/a/metrics.csv", "line 2", "one value per column"]),
    ("compare-metrics-long-row", _write("runs/a/metrics.csv", "round,global_acc\n1,0.5,7,8\n"),
     ["compare", "{tmp}/runs"], ["runs/a/metrics.csv", "line 2"]),
    ("compare-metrics-binary", _write("runs/a/metrics.csv", BINARY), ["compare", "{tmp}/runs"],
     ["runs/a/metrics.csv", "not a text file"]),
    ("compare-metrics-no-round", _write("runs/a/metrics.csv", "x,y\n1,2\n"), ["compare", "{tmp}/runs"],
     ["runs/a/metrics.csv", "no round column"]),
    ("compare-config-malformed", _write("runs/a/config.yaml", "seed: [0\n"), ["compare", "{tmp}/runs"],
     ["runs/a/config.yaml", "malformed YAML"]),
    ("compare-config-a-list", _write("runs/a/config.yaml", "- 1\n- 2\n"), ["compare", "{tmp}/runs"],
     ["runs/a/config.yaml", "expected a mapping"]),
    ("compare-config-binary", _write("runs/a/config.yaml", BINARY), ["compare", "{tmp}/runs"],
     ["runs/a/config.yaml", "not a text file"]),
    ("compare-config-duplicate-key", _write("runs/a/config.yaml", "seed: 0\nseed: 1\n"), ["compare", "{tmp}/runs"],
     ["runs/a/config.yaml", "duplicate key 'seed'"]),
    ("compare-manifest-malformed", _write("sweep/manifest.json", "{\"sweep\": "), ["compare", "{tmp}/sweep"],
     ["sweep/manifest.json", "damaged"]),
    ("compare-manifest-a-list", _write("sweep/manifest.json", "[1, 2]"), ["compare", "{tmp}/sweep"],
     ["sweep/manifest.json", "damaged"]),
    ("compare-manifest-no-runs", _write("sweep/manifest.json", json.dumps({"sweep": "s"})), ["compare", "{tmp}/sweep"],
     ["sweep/manifest.json", "damaged"]),
    ("compare-manifest-bad-run", _write("sweep/manifest.json", json.dumps(
        {"sweep": "s", "method": "grid", "metric": {}, "file": "f", "runs": [{"name": "r"}]})),
     ["compare", "{tmp}/sweep"], ["sweep/manifest.json", "damaged"]),
    ("compare-manifest-metric-a-string", _write("sweep/manifest.json", json.dumps(  # issue 37: an AttributeError
        {"sweep": "s", "method": "grid", "metric": "global_acc", "file": "f", "runs": []})),
     ["compare", "{tmp}/sweep"], ["sweep/manifest.json", "damaged", "metric"]),
    ("compare-manifest-binary", _write("sweep/manifest.json", BINARY), ["compare", "{tmp}/sweep"],
     ["sweep/manifest.json", "damaged"]),
    ("compare-sweep-run-metrics-damaged", _write("sweep/runs/000-s0/metrics.csv", "round,global_acc\n1,x\n"),
     ["compare", "{tmp}/sweep"], ["000-s0/metrics.csv", "not a number"]),
    ("compare-paper-malformed", _write("sweep/paper.yaml", "rows: [\n"), ["compare", "{tmp}/sweep"],
     ["paper.yaml", "malformed YAML"]),
    ("compare-paper-duplicate-key", _write("sweep/paper.yaml", "metric: a\nmetric: b\nrows: []\n"),
     ["compare", "{tmp}/sweep"], ["paper.yaml", "duplicate key 'metric'"]),
    ("compare-paper-unknown-key", _write("sweep/paper.yaml", "rowz: []\nrows: []\n"), ["compare", "{tmp}/sweep"],
     ["paper.yaml", "rowz"]),
    ("compare-paper-value-not-fraction", _write("sweep/paper.yaml", "rows: [{match: {}, value: 73.6}]\n"),
     ["compare", "{tmp}/sweep"], ["paper.yaml", "fraction"]),
    ("compare-paper-claim-unknown-key", _write(
        "sweep/paper.yaml", "rows: []\nclaims: [{claim: c, better: {seed: 0}, worse: {seed: 1}, when: now}]\n"),
     ["compare", "{tmp}/sweep"], ["paper.yaml", "claims[1]", "unknown key 'when'", "allowed: about, at, axis, better"]),
    # compare: what it writes and its options
    ("compare-out-is-a-file", _nothing, ["compare", "{tmp}/runs", "--out", "{tmp}/a-file"], ["--out", "not a folder"]),
    ("compare-out-under-a-file", _nothing, ["compare", "{tmp}/runs", "--out", "{tmp}/a-file/out"], ["--out"]),
    ("compare-out-impossible", _nothing, ["compare", "{tmp}/runs", "--out", "/dev/null/out"], ["--out", "writable"]),
    ("compare-target-nan", _nothing, ["compare", "{tmp}/runs", "--target", "nan"], ["--target", "finite"]),
    ("compare-target-above-one", _nothing, ["compare", "{tmp}/runs", "--target", "80"], ["--target", "(0, 1]"]),
    ("compare-metric-unknown", _nothing, ["compare", "{tmp}/runs", "--metric", "global_accc"],
     ["--metric", "global_accc", "global_acc"]),
    # sweep: the sweep file
    ("sweep-file-missing", _nothing, ["sweep", "{tmp}/none.yaml"], ["none.yaml"]),
    ("sweep-malformed", _write("sweep.yaml", "program: lit-fl\nparameters: {a\n"), SWEEP, ["sweep.yaml", "malformed"]),
    ("sweep-duplicate-key", _write("sweep.yaml", "program: lit-fl\nmethod: grid\nmethod: random\nparameters: {}\n"),
     SWEEP, ["sweep.yaml", "duplicate key 'method'"]),
    ("sweep-binary", _write("sweep.yaml", BINARY), SWEEP, ["sweep.yaml", "not a text file"]),
    ("sweep-a-list", _write("sweep.yaml", "- program\n"), SWEEP, ["sweep.yaml", "mapping"]),
    ("sweep-empty", _write("sweep.yaml", ""), SWEEP, ["sweep.yaml", "mapping"]),
    ("sweep-unknown-key", _edit_sweep(paramters={}), SWEEP, ["sweep.yaml", "paramters"]),
    ("sweep-program", _edit_sweep(program="python"), SWEEP, ["program", "unknown value 'python'", "allowed: lit-fl"]),
    ("sweep-bayes-offline", _edit_sweep(method="bayes", metric={"name": "global_acc", "goal": "maximize"}), SWEEP,
     ["bayes", "--wandb"]),
    ("sweep-random-without-count", _edit_sweep(method="random"), SWEEP, ["--count"]),
    ("sweep-name-a-path", _edit_sweep(name="../x"), SWEEP, ["name", "'../x' is not allowed"]),
    ("sweep-command-without-args", _edit_sweep(command=["lit-fl", "fit"]), SWEEP, ["command", "${args}"]),
    ("sweep-unknown-run-key", _edit_sweep(parameters={"roundz": {"value": 3}}), SWEEP, ["roundz"]),
    ("sweep-bad-run-value", _edit_sweep(parameters={"rounds": {"value": "many"}}), SWEEP, ["run 000", "rounds"]),
    ("sweep-config-missing", _edit_sweep(parameters={"config": {"value": "nowhere.yaml"}}), SWEEP, ["nowhere.yaml"]),
    ("sweep-config-duplicate-key", _write("cfg.yaml", "rounds: 1\nrounds: 2\n"), SWEEP,
     ["cfg.yaml", "duplicate key 'rounds'"]),
    ("sweep-paper-row-matches-nothing", _write("sweep.paper.yaml", "rows: [{match: {seed: 9}, value: 0.5}]\n"), SWEEP,
     ["sweep.paper.yaml", "rows[1]", "matches no run"]),
    ("sweep-paper-claim-matches-nothing", _write(
        "sweep.paper.yaml", "rows: []\nclaims: [{claim: c, better: {rounds: 9}, worse: {rounds: 8}}]\n"), SWEEP,
     ["sweep.paper.yaml", "claims[1].better", "matches no run"]),
    # sweep: its options and what it writes
    ("sweep-jobs-zero", _nothing, [*SWEEP, "--jobs", "0"], ["--jobs"]),
    ("sweep-count-zero", _nothing, [*SWEEP, "--count", "0"], ["--count"]),
    ("sweep-override-without-value", _nothing, [*SWEEP, "--rounds"], ["--rounds needs a value"]),
    ("sweep-resume-forwarded", _nothing, [*SWEEP, "--resume", "{tmp}/runs/a"], ["--resume is not passed"]),
    ("sweep-positional-override", _nothing, [*SWEEP, "rounds=3"], ["rounds=3"]),
    ("sweep-run-dir-is-a-file", _nothing, ["sweep", "{tmp}/sweep.yaml", "--run_dir", "{tmp}/a-file"],
     ["--run_dir", "not a folder"]),
    ("sweep-run-dir-impossible", _nothing, ["sweep", "{tmp}/sweep.yaml", "--run_dir", "/dev/null/runs"],
     ["--run_dir", "writable"]),
    ("sweep-folder-of-another-sweep", _write("out-runs/sweeps/tiny/manifest.json", json.dumps(
        {"sweep": "tiny", "method": "grid", "metric": {}, "file": "f", "runs": []})), SWEEP,
     ["holds a sweep with other runs"]),
    ("sweep-folder-manifest-damaged", _write("out-runs/sweeps/tiny/manifest.json", "{"), SWEEP,
     ["manifest.json", "damaged"]),
    # partition: what fit refuses, and its output
    ("partition-out-is-a-file", _nothing, ["partition", "--config", "{tmp}/cfg.yaml", "--out", "{tmp}/a-file"],
     ["--out", "not a folder"]),
    ("partition-out-impossible", _nothing, ["partition", "--config", "{tmp}/cfg.yaml", "--out", "/dev/null/p"],
     ["--out", "writable"]),
    ("partition-beta", _nothing, [*PARTITION, "--data.beta", "-1"], ["data.beta"]),
    ("partition-rounds-zero", _nothing, [*PARTITION, "--rounds", "0"], ["rounds", ">= 1"]),
    ("partition-unknown-key", _nothing, [*PARTITION, "--data.betta", "1"], ["data.betta"]),
    ("partition-clients-one", _nothing, [*PARTITION, "--data.num_clients", "1"], ["data.num_clients"]),
    ("partition-config-missing", _nothing, ["partition", "--config", "{tmp}/none.yaml"], ["--config", "none.yaml"]),
    ("partition-config-duplicate-key", _write("cfg.yaml", "seed: 1\nseed: 2\n"), PARTITION,
     ["cfg.yaml", "duplicate key 'seed'"]),
    ("partition-config-binary", _write("cfg.yaml", BINARY), PARTITION, ["cfg.yaml", "not a text file"]),
]


@pytest.mark.parametrize(("case", "damage", "argv", "words"), CASES, ids=[c[0] for c in CASES])
def test_damaged_input_is_at_most_three_lines_and_writes_nothing(
    case: str, damage: Callable[[Path], None], argv: list[str], words: list[str], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a default output folder (./compare, ./partition) would land here
    _world(tmp_path)
    damage(tmp_path)
    before = snapshot(tmp_path)
    result = run_cli(*[a.replace("{tmp}", str(tmp_path)) for a in argv])
    assert result.rc != 0, (result.rc, result.out[-500:])
    lines = result.err.strip().splitlines()
    assert 1 <= len(lines) <= 3 and "Traceback" not in result.err, result.err
    for word in words:
        assert word in lines[-1], f"{word!r} missing from {lines[-1]!r}"
    assert snapshot(tmp_path) == before  # nothing written, nothing half-written


def test_the_suite_holds_at_least_40_cases_of_each_command_family() -> None:
    assert len(CASES) >= 40 and len({c[0] for c in CASES}) == len(CASES)
    for command in ("compare", "sweep", "partition"):
        assert sum(c[0].startswith(command) for c in CASES) >= 5, command
