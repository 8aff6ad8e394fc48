"""``docs/coverage.md`` is what ``python -m lit_fl.suite.coverage`` writes; its cell counts add up; every sweep of
the data file exists and every model's count is computed, not copied."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lit_fl.errors import ConfigError
from lit_fl.strict_yaml import load_yaml
from lit_fl.suite import coverage
from lit_fl.suite.paper import load_paper


@pytest.mark.slow  # builds every listed model (timm's ResNet-34 and EfficientNets at 224 x 224): ~15 s
def test_the_committed_page_is_what_the_generator_writes() -> None:
    assert coverage.main(["--check"]) == 0, "docs/coverage.md is stale: run python -m lit_fl.suite.coverage"


def test_a_tables_cells_are_its_rows_once_per_label_within_a_group_and_its_extras() -> None:
    """DFML Table 5 = dfml_table5's 8 rows + dfml_table5_images's 24; codistillation Table 1's CIFAR rows are one
    cell each although two sweeps (federated CIFAR-100 and label shards) produce them."""
    table5 = coverage.table_cells(coverage.Table(name="Table 5", cells=32,
                                                 sweeps=["dfml_table5", "dfml_table5_images"]))
    assert sum(c.count for c in table5) == 8 + 24 and all(not c.reason for c in table5)
    fed, shards = (load_paper(coverage.ROOT / "sweeps" / f"{s}.paper.yaml").rows
                   for s in ("codistillation_table1_fed", "codistillation_table1"))
    assert [r.label for r in fed] == [r.label for r in shards] and len(fed) == 18
    cells = coverage.table_cells(coverage.Table(name="T", cells=20, sweeps=[["codistillation_table1_fed",
                                                                             "codistillation_table1"]],
                                                extra=[{"count": 2, "cells": "x", "reason": "why"}]))
    assert len(cells) == 19 and cells[0].sweep == "codistillation_table1_fed, codistillation_table1"
    assert sum(c.count for c in cells if c.reason) == 2


def test_cells_that_do_not_add_up_are_one_line_naming_the_table() -> None:
    with pytest.raises(ConfigError, match="Table 3 lists 16 cells, not its 17"):
        coverage.table_cells(coverage.Table(name="Table 3", cells=17, sweeps=["dfml_table3"]))


def test_the_data_file_names_shipped_sweeps_and_every_figure_sweep_has_claims() -> None:
    data = coverage.load_data()  # a table without cells has a note, a figure a sweep or a reason (the models')
    for paper in data.papers:
        for table in paper.tables:
            if table.cells:
                coverage.table_cells(table)  # raises if a sweep is missing or the counts do not add up
        for figure in paper.figures:
            if figure.sweep:
                assert load_paper(coverage.ROOT / "sweeps" / f"{figure.sweep}.paper.yaml").claims


@pytest.mark.parametrize(("edit", "words"), [
    (lambda d: d["papers"][0]["tables"][0].update(cells=-1), ["papers[1].tables[1].cells", ">= 0"]),
    (lambda d: d["papers"][0]["tables"][0].update(cels=3), ["papers[1].tables[1]", "unknown key 'cels'", "allowed:"]),
    (lambda d: d["papers"][0]["figures"][0].update(reason="r"), ["papers[1].figures[1]", "allowed: sweep, reason"]),
    (lambda d: d["models"][0].update(input=[]), ["models[1].input", "at least 1"]),
])
def test_a_malformed_data_file_is_one_line_naming_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          edit: Any, words: list[str]) -> None:
    data = load_yaml(coverage.DATA, "coverage data")
    edit(data)
    (tmp_path / "coverage.yaml").write_text(yaml.safe_dump(data))
    monkeypatch.setattr(coverage, "DATA", tmp_path / "coverage.yaml")
    with pytest.raises(ConfigError) as err:
        coverage.load_data()
    assert str(err.value).startswith(f"coverage data {tmp_path / 'coverage.yaml'}: ") and "\n" not in str(err.value)
    assert all(word in str(err.value) for word in words), str(err.value)


def test_parameter_differences_are_computed_from_the_built_model() -> None:
    """The relative difference is lit-fl's count over the paper's, less one: codistillation's small CNN has exactly
    App. E's 109,348 parameters (0.0), WRN-40-1's 563,930 against FedORION's "0.5M" is +12.786%."""
    rows = coverage.parameter_rows([coverage.ModelEntry.model_validate(m) for m in (
        {"arch": "codist_small", "input": [3, 32, 32], "classes": 100, "paper": 109_348, "source": "App. E"},
        {"arch": "wrn_40_1", "input": [3, 32, 32], "classes": 10, "paper": 500_000, "source": "App. B"})])
    assert rows[0][1] == 109_348 and rows[0][4] == 0.0
    assert rows[1][1] == 563_930 and rows[1][4] == pytest.approx(563_930 / 500_000 - 1, rel=1e-12)
