"""Every shipped config parses and validates; every CPU-scale method runs through ``lit-fl fit``."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from conftest import run_cli

from lit_fl.cli import fit_parser
from lit_fl.models import is_known, resolve_pool
from lit_fl.tracking import read_metrics

EXPERIMENTS = Path(__file__).resolve().parents[1] / "experiments"
ALL_CONFIGS = sorted(EXPERIMENTS.rglob("*.yaml"))
MNIST5K = sorted((EXPERIMENTS / "mnist5k").glob("*.yaml"))
#: the folders of paper-scale configs (GPU and datasets): each file names its paper number and is run by a sweep
PAPER_SCALE = ("dfml_tables", "fedorion", "uapdfl", "codistillation", "defkt")


@pytest.mark.parametrize("path", ALL_CONFIGS, ids=lambda p: str(p.relative_to(EXPERIMENTS)))
def test_config_validates(path: Path) -> None:
    parser = fit_parser()
    cfg = parser.parse_args(["--config", str(path)])
    init = parser.instantiate_classes(cfg)  # runs every section's own validation
    assert all(is_known(arch) for arch in resolve_pool(init.models.pool))
    if set(PAPER_SCALE) & set(path.parts) or path.name.startswith("dfml_"):
        header = path.read_text().splitlines()[:3]
        assert any("Table" in line for line in header), "paper-scale configs name the number they reproduce"


def test_every_paper_scale_config_is_run_by_a_shipped_sweep() -> None:
    """A table's configs are reached through its sweep (``lit-fl sweep sweeps/<paper>_table<n>.yaml``), which also
    checks its claims: no paper-scale file is left outside every sweep."""
    swept = set()
    for sweep in (EXPERIMENTS.parent / "sweeps").glob("*.yaml"):
        if sweep.name.endswith(".paper.yaml"):
            continue
        config = yaml.safe_load(sweep.read_text()).get("parameters", {}).get("config", {})
        swept |= set(config.get("values", [config.get("value")])) if isinstance(config, dict) else set()
    paper_scale = {str(p.relative_to(EXPERIMENTS.parent)) for folder in PAPER_SCALE
                   for p in (EXPERIMENTS / folder).glob("*.yaml")}
    assert paper_scale and paper_scale <= swept, sorted(paper_scale - swept)


def test_every_method_has_a_cpu_config() -> None:
    from lit_fl.cli import ALGORITHMS

    named = {p.read_text().split("class_path: ")[1].split()[0] for p in MNIST5K}
    assert named == set(ALGORITHMS)


#: the paper settings with 10 local epochs (FedORION's), run here with fewer: the test checks that the shipped
#: config runs and that faults apply, not what 10 epochs learn (their own tests run the full configs)
SHORTER = {
    name: ["--algorithm.local_epochs", "1"] for name in ("feddf", "fedmd", "fdmeta", "scaffold", "fedntd",
                                                         "serverfedavg", "serverfedprox")
}
SHORTER["dp_local"] = ["--data.num_clients", "20"]  # local training alone: 100 clients add nothing but time
SHORTER["dsfl"] = ["--algorithm.local_epochs", "1", "--algorithm.distill_epochs", "1", "--algorithm.server_epochs", "1"]
SHORTER["feddf"] += ["--algorithm.distill_steps", "10"]


#: the mnist5k configs of server methods: every client reaches the server, no topology (summary.json says so)
SERVER_BASED = {"codistillation", "merged_codist", "dsfl", "fdmeta", "feddf", "fedkemf", "fedmd", "fedntd", "fedorion",
                "ktpfl", "scaffold", "serverfedavg", "serverfedprox", "dp_fedavg", "fedasync", "fedbuff"}
#: the mnist5k configs of local training alone: no transfer at all (no topology, and faults refused)
LOCAL_ONLY = {"local", "dp_local", "dp_sgd_local"}


def reported_column(path: Path) -> str:
    """The column the config's method declares it reports (``Algorithm.reports``)."""
    from lit_fl.algorithms.registry import ALGORITHMS

    return ALGORITHMS[path.read_text().split("class_path: ")[1].split()[0].rsplit(".", 1)[-1]].reports


def documented_columns() -> re.Pattern[str]:
    """The columns and keys docs/metrics.md defines (a table row's first cell in backticks), a ``<name>`` standing
    for any name without a slash (``acc/<arch>``, ``server_acc/<name>/<domain>``)."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "metrics.md").read_text()
    names = re.findall(r"^\| `([^`]+)` \|", text, flags=re.MULTILINE)
    return re.compile("|".join(re.sub(r"<[^>]+>", "[^/]+", re.escape(name)) for name in names))


def assert_defined_in_docs(run: Path) -> None:
    """Every metrics.csv column and summary.json key of the run is defined in docs/metrics.md."""
    columns = (run / "metrics.csv").read_text().splitlines()[0].split(",")
    defined = documented_columns()
    missing = [c for c in [*columns, *json.loads((run / "summary.json").read_text())] if not defined.fullmatch(c)]
    assert not missing, f"{run.name} writes columns docs/metrics.md does not define: {missing}"


@pytest.mark.parametrize("path", MNIST5K, ids=lambda p: p.stem)
def test_method_runs_on_mnist5k(path: Path, tmp_path: Path) -> None:
    shorter = SHORTER.get(path.stem, [])
    result = run_cli(
        "fit", "--config", path, "--rounds", "1", "--logger.wandb", "false", "--logger.progress", "false",
        "--run_dir", tmp_path, "--name", path.stem, *shorter,
    )
    assert result.rc == 0, result.err
    summary = json.loads((tmp_path / path.stem / "summary.json").read_text())
    assert summary["status"] == "completed" and 0.0 <= summary["final"]["global_acc"] <= 1.0
    assert summary["reports"] == reported_column(path)
    assert summary["final"]["reported_acc"] == summary["final"][summary["reports"]]
    expected = "none" if path.stem in LOCAL_ONLY else "server" if path.stem in SERVER_BASED else "mesh"
    assert summary["topology"] == expected
    assert_defined_in_docs(tmp_path / path.stem)

    # faults.* apply to every method that moves models (in the ledger), and are refused by one that moves none
    faulty = run_cli(
        "fit", "--config", path, "--rounds", "1", "--logger.wandb", "false", "--logger.progress", "false",
        "--run_dir", tmp_path, "--name", f"{path.stem}-faults", "--faults.drop_prob", "0.5",
        "--faults.return_drop_prob", "0.5", *shorter,
    )
    if path.stem in (*LOCAL_ONLY, "fedorion"):
        assert faulty.rc == 2 and faulty.err.count("\n") == 1 and "faults" in faulty.err, faulty.err
        return
    assert faulty.rc == 0, faulty.err
    row = read_metrics(tmp_path / f"{path.stem}-faults" / "metrics.csv")[-1]
    clean = read_metrics(tmp_path / path.stem / "metrics.csv")[-1]
    assert_defined_in_docs(tmp_path / f"{path.stem}-faults")
    assert row["dropped_senders"] + row["lost_returns"] > 0 == clean["dropped_senders"] + clean["lost_returns"]
    assert row["comm_mb"] != clean["comm_mb"]
    if path.stem not in ("fedper", "dispfl"):  # clients start from one initialisation: round 1 averages equal g's
        assert any(row[k] != clean[k] for k in row if k.startswith(("global_acc", "local_acc")))
