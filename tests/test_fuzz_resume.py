"""``lit-fl fit --resume`` and ``lit-fl partition`` under a run folder damaged by one generated edit (Hypothesis): a
key of config.yaml set to a generated value or removed, the file cut, emptied, given a repeated key or bytes that
are not UTF-8; metrics.csv and summary.json damaged; ``--rounds`` below, at or above the rounds done. Each either
works (a resumed run ends with the metrics of an uninterrupted one) or exits 2 in at most three lines; never a
traceback, never a write outside the run folder (or partition's ``--out``). Tiny runs: 4 clients, 2-3 rounds."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli, snapshot, tiny_config, write_config
from fuzz_inputs import budget, check_refusal_or_success
from hypothesis import example, given
from hypothesis import strategies as st

from lit_fl.tracking import read_metrics

pytestmark = pytest.mark.usefixtures("one_thread")

KEYS = ["seed", "rounds", "eval_every", "data.beta", "data.num_clients", "data.partition", "models.pool",
        "algorithm.init_args.lr", "checkpoint_every", "logger.progress"]
VALUES = st.one_of(st.integers(-2, 5), st.sampled_from([0.5, 1e9, "abc", "", None, True, [1], {"a": 1}, ".nan",
                                                        ".inf"]))
TEXT_EDITS = {
    "cut": lambda text: text[: len(text) // 2],
    "empty": lambda text: b"",
    "repeated-key": lambda text: text + b"seed: 1\n",
    "not-utf8": lambda text: text.replace(b"synthetic", b"synth\xffetic"),
    "a-list": lambda text: b"- seed\n",
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``done``: a 2-round run; ``full``: the same run for 3 rounds (the reference of a resumed run)."""
    root = tmp_path_factory.mktemp("resume")
    config = write_config(root / "cfg.yaml", tiny_config("DecentralizedFedAvg", rounds=2))
    for name, rounds in (("done", 2), ("full", 3)):
        result = run_cli("fit", "--config", config, "--run_dir", root, "--name", name, "--rounds", rounds)
        assert result.rc == 0, result.err
    return root


def _set(config: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, last = dotted.split(".")
    for key in parents:
        config = config.setdefault(key, {}) if isinstance(config.get(key), dict) else config
    if value == "<removed>":
        config.pop(last, None)
    else:
        config[last] = value


def _damage_config(folder: Path, edit: tuple[str, Any]) -> str:
    """Apply ``edit`` to ``folder/config.yaml``; returns what a refusal must name."""
    kind, value = edit
    path = folder / "config.yaml"
    if kind in TEXT_EDITS:
        path.write_bytes(TEXT_EDITS[kind](path.read_bytes()))
        return "config.yaml" if kind in ("not-utf8", "repeated-key", "a-list") else ""
    config = yaml.safe_load(path.read_text())
    _set(config, kind, value)
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return ""


EDITS = st.one_of(st.tuples(st.sampled_from(KEYS), st.one_of(VALUES, st.just("<removed>"))),
                  st.tuples(st.sampled_from(sorted(TEXT_EDITS)), st.none()), st.just(("none", None)))


@pytest.mark.slow  # the command end to end, dozens of times: tens of seconds on 2 cores
@budget(8)
@given(EDITS, st.sampled_from([1, 2, 3]))
@example(("none", None), 1)  # was "completed: 2/1 rounds"
@example(("none", None), 3)
@example(("a-list", None), 1)  # the damaged config.yaml was read as no config: "arguments are required: algorithm"
def test_resume_continues_to_the_uninterrupted_metrics_or_refuses(runs: Path, edit: tuple[str, Any],
                                                                   rounds: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        run = root / "done"
        shutil.copytree(runs / "done", run)
        must_name = "" if edit[0] == "none" else _damage_config(run, edit)
        before = snapshot(root)
        result = run_cli("fit", "--resume", run, "--rounds", rounds)
        check_refusal_or_success(result.rc, result.out, result.err, must_name or None)
        after = snapshot(root)
        assert {k for k in after if not k.startswith("done")} == {k for k in before if not k.startswith("done")}
        if rounds < 2:  # refused: for --rounds, or for a damage said first
            assert result.rc == 2 and "2/1" not in result.out, result.err
            assert edit[0] != "none" or "--rounds: " in result.err, result.err
        if edit[0] == "none" and rounds >= 2:
            assert result.rc == 0, result.err
        if result.rc == 0:
            assert result.out.startswith(f"completed: {rounds}/{rounds} rounds"), result.out
            reference = read_metrics(runs / "full" / "metrics.csv")[:rounds]
            resumed = read_metrics(run / "metrics.csv")
            assert [r["global_acc"] for r in resumed] == [r["global_acc"] for r in reference]
            assert [r["comm_mb"] for r in resumed] == [r["comm_mb"] for r in reference]


@pytest.mark.slow  # the command end to end, dozens of times: tens of seconds on 2 cores
@budget(8)
@given(EDITS)
@example(("none", None))
@example(("a-list", None))  # was "Unexpected config: - seed", without the file
def test_partition_of_a_run_config_works_or_refuses_and_writes_only_under_out(runs: Path,
                                                                              edit: tuple[str, Any]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        shutil.copytree(runs / "done", root / "done")
        must_name = "" if edit[0] == "none" else _damage_config(root / "done", edit)
        before = snapshot(root)
        result = run_cli("partition", "--config", root / "done" / "config.yaml", "--out", root / "out")
        check_refusal_or_success(result.rc, result.out, result.err, must_name or None)
        after = {k: v for k, v in snapshot(root).items() if k != "out" and not k.startswith("out/")}
        assert after == before
        if edit[0] == "none":
            assert result.rc == 0, result.err
        if result.rc == 0:
            counts = (root / "out" / "partition.csv").read_text().splitlines()
            assert len(counts) > 1, counts


@pytest.mark.parametrize("column", ["global_acc", "acc/cnn_8"])
def test_resume_over_a_metrics_csv_that_lost_a_column_is_one_line(runs: Path, tmp_path: Path, column: str) -> None:
    """A base column (checked when the run starts) or a per-architecture one (checked at the first row written):
    exit 2 naming metrics.csv and the column, never the KeyError of a header written by the run itself."""
    run = tmp_path / "done"
    shutil.copytree(runs / "done", run)
    lines = (run / "metrics.csv").read_text().splitlines()
    index = lines[0].split(",").index(column)
    (run / "metrics.csv").write_text("\n".join(",".join(c for j, c in enumerate(line.split(",")) if j != index)
                                               for line in lines) + "\n")
    result = run_cli("fit", "--resume", run, "--rounds", 3)
    check_refusal_or_success(result.rc, result.out, result.err, "metrics.csv")
    assert result.rc == 2 and f"no column {column}" in result.err, result.err
