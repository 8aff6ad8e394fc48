"""``lit-fl sweep --dry-run`` under generated sweep files and ``.paper.yaml`` files, valid and damaged by one
generated edit (Hypothesis): it lists exactly the runs of the grid (their number computed here), or exits 2 in at
most three lines naming the file; never a traceback, never a write. And the lazily walked grid that lets a dry run
stream its first runs at once is W&B's own grid, run for run."""

from __future__ import annotations

import itertools
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli, snapshot, tiny_config, write_config
from fuzz_inputs import budget, check_refusal_or_success
from hypothesis import example, given
from hypothesis import strategies as st

from lit_fl.suite.engine import expand
from lit_fl.suite.schema import quiet
from lit_fl.suite.sweep_file import SweepFile

# -- the lazy grid is W&B's grid ------------------------------------------------------------------------------------

VALUE = st.one_of(st.integers(-3, 3), st.sampled_from([0.5, 1.0, True, "a", "b", None]), st.lists(st.integers(0, 2),
                                                                                                  max_size=2))


@st.composite
def grid_parameters(draw: st.DrawFn) -> dict[str, Any]:
    names = draw(st.lists(st.sampled_from(["a", "b", "c", "d.e", "f"]), min_size=1, max_size=4, unique=True))
    params: dict[str, Any] = {}
    for name in names:
        kind = draw(st.sampled_from(["values", "value", "int_uniform", "q_uniform"]))
        if kind == "values":
            params[name] = {"values": draw(st.lists(VALUE, min_size=1, max_size=4))}
        elif kind == "value":
            params[name] = {"value": draw(VALUE)}
        elif kind == "int_uniform":
            low = draw(st.integers(-2, 2))
            params[name] = {"distribution": "int_uniform", "min": low, "max": low + draw(st.integers(1, 3))}
        else:
            params[name] = {"distribution": "q_uniform", "min": 0, "max": draw(st.integers(1, 3)), "q": 0.5}
    return params


@budget(40)
@given(grid_parameters())
@example({"a": {"values": [1, 2, 1]}, "b": {"values": ["a", "b", "a", "b"]}})  # W&B skips a repeated combination
def test_the_lazy_grid_is_wandbs_grid_run_for_run(parameters: dict[str, Any]) -> None:
    config = {"program": "lit-fl", "method": "grid", "parameters": parameters}
    with quiet():
        from sweeps import next_runs

        theirs = [run.config for run in next_runs(config, [], n=10_000) if run is not None]
    ours = expand(SweepFile(Path("s.yaml"), config))
    assert ours == [{k: v["value"] for k, v in run.items()} for run in theirs]


# -- sweep --dry-run --------------------------------------------------------------------------------------------------

SWEEP_DAMAGE = {  # a generated edit of the sweep file: the change, and whether the dry run must refuse it
    "values-not-a-list": ({"parameters": {"seed": {"values": 3}}}, True),
    "unknown-parameter-key": ({"parameters": {"seed": {"valuez": [1]}}}, True),
    "parameter-not-a-mapping": ({"parameters": {"seed": 5}}, True),
    "method-unknown": ({"method": "gridd"}, True),
    "method-a-number": ({"method": 5}, True),
    "parameters-a-list": ({"parameters": ["seed"]}, True),
    "unknown-key": ({"paramters": {}}, True),
    "name-a-path": ({"name": "../x"}, True),
    "rounds-zero": ({"parameters": {"rounds": {"values": [1, 0]}}}, True),
    "rounds-text": ({"parameters": {"rounds": {"value": "many"}}}, True),
    "beta-negative": ({"parameters": {"data.beta": {"values": [-1.0]}}}, True),
    "unknown-fit-key": ({"parameters": {"data.betta": {"value": 1}}}, True),
    "min-above-max": ({"parameters": {"seed": {"min": 3, "max": 1}}}, True),
    "uniform-in-a-grid": ({"parameters": {"seed": {"distribution": "uniform", "min": 0, "max": 1}}}, True),
    "values-empty": ({"parameters": {"seed": {"values": []}}}, True),
}
TEXT_DAMAGE = {  # the sweep file's text replaced or edited
    "empty": lambda text: b"",
    "not-utf8": lambda text: text.replace(b"grid", b"gr\xffid"),
    "repeated-key": lambda text: text + b"method: random\n",
    "a-list": lambda text: b"- program\n",
    "cut": lambda text: text[: len(text) // 2],
}
PAPER_DAMAGE = {  # a .paper.yaml beside the sweep file: its text (each refused, naming the file)
    "value-text": b"rows: [{match: {rounds: 1}, value: abc}]\n",
    "value-percent": b"rows: [{match: {rounds: 1}, value: 73.6}]\n",
    "value-list": b"rows: [{match: {rounds: 1}, value: [0.5]}]\n",
    "match-not-a-mapping": b"rows: [{match: 1, value: 0.5}]\n",
    "matches-no-run": b"rows: [{match: {rounds: 99}, value: 0.5}]\n",
    "repeated-key": b"rows: []\nrows: []\n",
    "unknown-key": b"rowz: []\nrows: []\n",
    "row-unknown-key": b"rows: [{match: {rounds: 1}, value: 0.5, 1: x}]\n",
    "metric-a-list": b"metric: [a]\nrows: []\n",
    "not-utf8": b"source: \xff\nrows: []\n",
    "claim-bad": b"rows: []\nclaims: [{claim: c, better: {rounds: 1}}]\n",
    "claim-matches-no-run": b"rows: []\nclaims: [{claim: c, better: {rounds: 9}, worse: {rounds: 8}}]\n",
}


@st.composite
def sweep_files(draw: st.DrawFn) -> dict[str, Any]:
    parameters: dict[str, Any] = {"seed": {"values": draw(st.lists(st.integers(0, 4), min_size=1, max_size=4))}}
    if draw(st.booleans()):
        parameters["rounds"] = {"values": draw(st.lists(st.integers(1, 3), min_size=1, max_size=3))}
    if draw(st.booleans()):
        parameters["data.beta"] = {"values": draw(st.lists(st.sampled_from([0.1, 0.5, 1.0]), min_size=1, max_size=3))}
    return {"program": "lit-fl", "name": "fz", "method": "grid", "parameters": parameters}


def _runs_of(sweep: dict[str, Any]) -> int:
    """The reference: the product of each parameter's distinct values (``config`` has one)."""
    counts = [len({yaml.safe_dump(spec["values"][i]) for i in range(len(spec["values"]))})
              for spec in sweep["parameters"].values() if "values" in spec]
    return math.prod(counts)


def _merge(base: dict[str, Any], change: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in change.items():
        out[key] = {**out[key], **value} if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


@pytest.mark.slow  # the command end to end, dozens of times: tens of seconds on 2 cores
@budget(25)
@given(sweep_files(), st.sampled_from(["none", *SWEEP_DAMAGE, *(f"text:{k}" for k in TEXT_DAMAGE),
                                        *(f"paper:{k}" for k in PAPER_DAMAGE), "paper:valid"]))
@example({"program": "lit-fl", "name": "fz", "method": "grid", "parameters": {"seed": {"values": [0, 0, 1]}}},
         "none")  # a repeated value is one run: the size said first is the number of runs listed
@example({"program": "lit-fl", "name": "fz", "method": "grid", "parameters": {"seed": {"values": [0]}}},
         "rounds-zero")  # found by the fuzz profile: listed --rounds=0 (only parsed, never checked as fit checks it)
@example({"program": "lit-fl", "name": "fz", "method": "grid", "parameters": {"seed": {"values": [0]}}},
         "values-not-a-list")  # reported as "top level: ... not valid under any of the given schemas", without the key
def test_a_dry_run_lists_the_reference_runs_or_refuses_naming_the_file(sweep: dict[str, Any], damage: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_config(root / "cfg.yaml", tiny_config("DecentralizedFedAvg", rounds=1))
        sweep = {**sweep, "parameters": {"config": {"value": str(root / "cfg.yaml")}, **sweep["parameters"]}}
        must_refuse, names = False, "fz.yaml"
        if damage in SWEEP_DAMAGE:
            change, must_refuse = SWEEP_DAMAGE[damage]
            sweep = _merge(sweep, change)
        text = yaml.safe_dump(sweep, sort_keys=False).encode()
        if damage.startswith("text:"):
            text = TEXT_DAMAGE[damage[5:]](text)
            must_refuse = damage != "text:cut"
        (root / "fz.yaml").write_bytes(text)
        if damage.startswith("paper:"):
            seed = sweep["parameters"]["seed"]["values"][0]
            paper = PAPER_DAMAGE.get(damage[6:], f"rows: [{{match: {{seed: {seed}}}, value: 0.5}}]\n".encode())
            (root / "fz.paper.yaml").write_bytes(paper)
            must_refuse, names = damage != "paper:valid", "fz.paper.yaml"
        before = snapshot(root)
        result = run_cli("sweep", root / "fz.yaml", "--dry-run", "--run_dir", root / "runs")
        check_refusal_or_success(result.rc, result.out, result.err, names if result.rc == 2 else None)
        assert snapshot(root) == before  # a dry run writes nothing
        if must_refuse:
            assert result.rc == 2, (damage, result.out[-500:])
        if result.rc == 0 and not damage.startswith("text:"):
            lines = result.out.splitlines()
            runs = _runs_of(sweep)
            assert len(lines) == runs + 1 and lines[-1].startswith(f"{runs} runs (grid)"), (runs, lines[-3:])
            assert result.err.startswith(f"planning {runs:,} runs"), result.err
            seeds = sweep["parameters"]["seed"]["values"]
            for line, seed in zip(lines[:-1], itertools.cycle(dict.fromkeys(seeds))):  # seed is the last key W&B sorts
                assert f"--seed={seed} " in line, (line, seed)
