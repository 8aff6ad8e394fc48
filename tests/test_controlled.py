"""A claim compares configurations that differ only in what it is about (``lit_fl/suite/controlled.py``).

``lit-fl sweep`` resolves both sides of every claim to the full configuration ``lit-fl fit`` would run and refuses a
sweep whose claim compares configurations that differ elsewhere (the initialisation, the data, the rounds) without
the paper's reason under the claim's ``differs``; every shipped sweep passes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli

import lit_fl.configs
from lit_fl.errors import ConfigError
from lit_fl.suite.controlled import effective_config, subject, uncontrolled
from lit_fl.suite.paper import load_paper
from lit_fl.suite.plan import check_paper, plan_sweep
from lit_fl.suite.sweep_file import load_sweep_file

CONFIGS = Path(lit_fl.configs.__file__).parent  # the shipped experiments/ and sweeps/
UAPDFL, FEDPER = "experiments/mnist5k/uapdfl.yaml", "experiments/mnist5k/fedper.yaml"
CLAIM = {"claim": "UA-PDFL above FedPer", "better": {"config": UAPDFL}, "worse": {"config": FEDPER}}


def write_sweep(folder: Path, parameters: dict[str, Any], claims: list[dict[str, Any]]) -> Path:
    """``folder/toy.yaml`` (seeds 0 and 1 over ``parameters``) and its ``toy.paper.yaml`` with ``claims``."""
    sweep = {"program": "lit-fl", "name": "toy", "method": "grid",
             "parameters": {**parameters, "seed": {"values": [0, 1]}, "rounds": {"value": 2}}}
    path = folder / "toy.yaml"
    path.write_text(yaml.safe_dump(sweep))
    (folder / "toy.paper.yaml").write_text(yaml.safe_dump({"source": "test", "metric": "local_acc", "rows": [],
                                                           "claims": claims}))
    return path


def check(path: Path, tmp_path: Path) -> None:
    sweep = load_sweep_file(path)
    check_paper(sweep, plan_sweep(sweep, tmp_path / "runs", []))


def test_a_claim_across_initialisations_is_refused_naming_the_key(tmp_path: Path) -> None:
    """UA-PDFL starts every client from its own draw (its paper default), FedPer from one shared draw: the claim
    would measure the initialisation, not the method."""
    path = write_sweep(tmp_path, {"config": {"values": [UAPDFL, FEDPER]}}, [CLAIM])
    with pytest.raises(ConfigError, match=r"claim 1 \(.*uapdfl.* vs .*fedper.*\) differs in models\.same_init: "
                                          r"false vs true, outside what the claim is about \(algorithm\)"):
        check(path, tmp_path)
    result = run_cli("sweep", path, "--dry-run", "--run_dir", tmp_path / "cli")
    assert result.rc == 2 and "models.same_init" in result.err and "Traceback" not in result.err
    assert len(result.err.strip().splitlines()) <= 2, result.err  # "planning ..." and the one error line


def test_the_same_initialisation_on_both_sides_or_a_reason_is_accepted(tmp_path: Path) -> None:
    parameters = {"config": {"values": [UAPDFL, FEDPER]}, "models.same_init": {"values": [True, False]}}
    both = write_sweep(tmp_path, parameters, [CLAIM])
    check(both, tmp_path)
    noted = write_sweep(tmp_path, {"config": {"values": [UAPDFL, FEDPER]}},
                        [{**CLAIM, "differs": {"models.same_init": "the paper initialises its own method so"}}])
    check(noted, tmp_path)


def test_a_key_a_config_file_sets_on_one_side_only_is_found(tmp_path: Path) -> None:
    """Two experiment files of one method, one with another Dirichlet beta: the claim is about the algorithm, so
    data.beta must be equal."""
    config = yaml.safe_load((CONFIGS / UAPDFL).read_text())
    skewed = tmp_path / "skewed.yaml"
    skewed.write_text(yaml.safe_dump({**config, "data": {**config["data"], "beta": 0.1}}))
    claim = {"claim": "x", "better": {"config": str(skewed)}, "worse": {"config": FEDPER}}
    path = write_sweep(tmp_path, {"config": {"values": [str(skewed), FEDPER]}, "models.same_init": {"value": True}},
                       [claim])
    with pytest.raises(ConfigError, match=r"differs in data\.beta: 0\.1 vs 0\.5"):
        check(path, tmp_path)


def test_an_ablation_is_about_the_keys_its_matches_name_or_its_about(tmp_path: Path) -> None:
    dfml = "experiments/mnist5k/dfml.yaml"
    loss, schedule = "algorithm.init_args.loss", "algorithm.init_args.alpha_schedule"
    parameters = {"config": {"value": dfml}, loss: {"values": ["wsm", "ce"]}, schedule: {"values": ["cyclic", "fixed"]}}
    fair = {"claim": "WSM above CE", "better": {loss: "wsm", schedule: "cyclic"},
            "worse": {loss: "ce", schedule: "cyclic"}}
    check(write_sweep(tmp_path, parameters, [fair]), tmp_path)
    both = {"claim": "WSM+cyclic above CE+fixed", "better": {loss: "wsm", schedule: "cyclic"},
            "worse": {loss: "ce", schedule: "fixed"}}
    assert subject(load_paper_claim(tmp_path, parameters, both)) == (schedule, loss)  # the keys it names
    narrowed = {**both, "about": [loss]}
    with pytest.raises(ConfigError, match=r"differs in algorithm\.init_args\.alpha_schedule: \"cyclic\" vs \"fixed\""):
        check(write_sweep(tmp_path, parameters, [narrowed]), tmp_path)


def load_paper_claim(tmp_path: Path, parameters: dict[str, Any], claim: dict[str, Any]) -> Any:
    write_sweep(tmp_path, parameters, [claim])
    return load_paper(tmp_path / "toy.paper.yaml").claims[0]


def test_effective_config_resolves_the_methods_initialisation_default() -> None:
    assert effective_config([f"--config={UAPDFL}"])["models.same_init"] is False  # UA-PDFL: one draw per client
    assert effective_config([f"--config={FEDPER}"])["models.same_init"] is True
    assert effective_config([f"--config={UAPDFL}", "--models.same_init=true"])["models.same_init"] is True


SHIPPED = sorted(p for p in (CONFIGS / "sweeps").glob("*.paper.yaml") if load_paper(p).claims)


@pytest.mark.parametrize("paper", SHIPPED, ids=lambda p: p.name.removesuffix(".paper.yaml"))
def test_every_shipped_claim_is_a_controlled_comparison(paper: Path, tmp_path: Path) -> None:
    sweep = load_sweep_file(paper.with_name(paper.name.replace(".paper.yaml", ".yaml")))
    manifest = plan_sweep(sweep, tmp_path, [])
    assert uncontrolled(load_paper(paper), manifest) == []
