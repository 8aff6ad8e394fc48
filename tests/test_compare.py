"""``lit-fl compare``: the numbers of the results table on hand-made runs, the paper's number beside ours, a
one-line refusal for a folder without runs, and the dashboard drawn by a real browser (headless Chromium)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
import yaml
from conftest import run_cli, snapshot

from lit_fl.suite.compare.curves import color

HEADER = ["round", "reported_acc", "global_acc", "global_acc_regular", "local_acc", "comm_mb", "acc/cnn_a", "acc/cnn_b"]
# (configuration, seed) -> global_acc per round; comm_mb = 10 MB per round
CURVES = {
    ("dfml.yaml", 0): [0.50, 0.70, 0.85, 0.90],
    ("dfml.yaml", 1): [0.60, 0.82, 0.84, 0.86],
    ("fedavg.yaml", 0): [0.40, 0.50, 0.60, 0.70],
    ("fedavg.yaml", 1): [0.45, 0.55, 0.81, 0.80],
}


def _write_run(folder: Path, values: list[float]) -> None:
    folder.mkdir(parents=True)
    with (folder / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(HEADER)
        for i, acc in enumerate(values, start=1):
            writer.writerow([i, acc, acc, acc - 0.05, acc + 0.05, 10.0 * i, acc - 0.01, acc + 0.01])
    (folder / "summary.json").write_text(json.dumps({"status": "completed"}))


@pytest.fixture
def sweep_dir(tmp_path: Path) -> Path:
    root = tmp_path / "runs" / "sweeps" / "toy"
    runs = []
    for i, ((config, seed), values) in enumerate(CURVES.items()):
        name = f"{i:03d}-{config[:-5]}-s{seed}"
        _write_run(root / "runs" / name, values)
        algorithm = "DFML" if config == "dfml.yaml" else "DecentralizedFedAvg"
        (root / "runs" / name / "config.yaml").write_text(f"algorithm:\n  class_path: lit_fl.algorithms.{algorithm}\n")
        params = {"config": f"experiments/{config}", "data": {"partition": "dirichlet", "beta": 0.1}, "seed": seed}
        runs.append({"name": name, "params": params, "command": [], "status": "completed", "run_dir": f"runs/{name}"})
    manifest = {"sweep": "toy", "method": "grid", "metric": {"name": "global_acc", "goal": "maximize"},
                "file": "toy.yaml", "overrides": [], "runs": runs}
    (root / "manifest.json").write_text(json.dumps(manifest))
    match = {"config": "experiments/dfml.yaml", "data": {"partition": "dirichlet", "beta": 0.1}}
    paper = {"source": "DFML Table 6", "metric": "global_acc", "rows": [{"match": match, "value": 0.7366}]}
    (root / "paper.yaml").write_text(yaml.safe_dump(paper))
    return root


def test_results_table_numbers(sweep_dir: Path) -> None:
    result = run_cli("compare", sweep_dir, "--target", "0.8")
    assert result.rc == 0, result.err
    with (sweep_dir / "compare" / "results.csv").open() as handle:
        rows = {row["configuration"]: row for row in csv.DictReader(handle)}
    dfml, fedavg = rows["dfml"], rows["fedavg"]  # data is the same for all: not in the label
    # final: mean(0.90, 0.86) = 0.88, sample std = 0.02 * sqrt(2) / 2 * 2 = 0.028284...
    assert float(dfml["final_global_acc_mean"]) == pytest.approx(0.88)
    assert float(dfml["final_global_acc_std"]) == pytest.approx(0.0282843, rel=1e-5)
    assert float(dfml["best_global_acc_mean"]) == pytest.approx((0.90 + 0.86) / 2)
    # target 0.8: seed 0 at round 3 (30 MB), seed 1 at round 2 (20 MB)
    assert float(dfml["rounds_to_target_mean"]) == pytest.approx(2.5)
    assert float(dfml["mb_to_target_mean"]) == pytest.approx(25.0)
    assert dfml["seeds_reaching_target"] == "2" and dfml["seeds"] == "2"
    # fedavg: only seed 1 reaches 0.8 (round 3); best = mean(0.70, 0.81)
    assert fedavg["seeds_reaching_target"] == "1" and float(fedavg["rounds_to_target_mean"]) == 3.0
    assert float(fedavg["best_global_acc_mean"]) == pytest.approx(0.755)
    # the paper's number beside the configuration it names, and only there
    assert float(dfml["paper"]) == pytest.approx(0.7366) and fedavg["paper"] == ""
    markdown = (sweep_dir / "compare" / "results.md").read_text()
    assert "| dfml | 2 | 4 | 88.00 ± 2.83 |" in markdown and "73.66" in markdown
    assert markdown in result.out  # the table is printed too
    figures = sorted(p.name for p in (sweep_dir / "compare" / "figures").glob("*.png"))
    assert figures == ["acc_cnn_a.png", "acc_cnn_b.png", "global_acc.png", "global_acc_regular.png", "local_acc.png",
                       "reported_acc.png"]
    assert "\\begin{tabular}" in (sweep_dir / "compare" / "results.tex").read_text()


def test_plain_run_directories_are_grouped_by_their_differing_keys(tmp_path: Path) -> None:
    for name, (algo, seed) in {"a": ("DFML", 0), "b": ("DFML", 1), "c": ("DecentralizedFedAvg", 0)}.items():
        _write_run(tmp_path / "runs" / name, [0.5, 0.6])
        config = {"seed": seed, "rounds": 2, "algorithm": {"class_path": f"lit_fl.algorithms.{algo}"}, "name": name}
        (tmp_path / "runs" / name / "config.yaml").write_text(yaml.safe_dump(config))
    result = run_cli("compare", tmp_path / "runs", "--out", tmp_path / "out")
    assert result.rc == 0, result.err
    assert "| DFML | 2 |" in result.out and "| DecentralizedFedAvg | 1 |" in result.out


def test_compare_without_runs_is_one_line_and_writes_nothing(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    before = snapshot(tmp_path)
    result = run_cli("compare", tmp_path / "empty")
    assert result.rc == 2
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and "no runs" in lines[0] and str(tmp_path / "empty") in lines[0]
    assert snapshot(tmp_path) == before


def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver")
    return (browser, driver) if browser and driver else None


@pytest.mark.skipif(_chromium() is None, reason="needs Debian's chromium and chromium-driver (.ci/run installs them)")
def test_dashboard_draws_every_figure_in_a_real_browser(sweep_dir: Path, tmp_path: Path) -> None:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    assert run_cli("compare", sweep_dir).rc == 0
    page = sweep_dir / "compare" / "dashboard.html"
    text = page.read_text()
    assert "<script src" not in text and "Plotly.newPlot" in text  # plotly.js inlined: opens offline
    browser, driver_path = _chromium()
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 f"--user-data-dir={tmp_path / 'profile'}", "--window-size=1400,1000"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(driver_path), options=options)
    try:
        driver.get(page.as_uri())
        figures = driver.execute_script("""
            return Array.from(document.querySelectorAll('.js-plotly-plot')).map(div => ({
                id: div.id,
                expected: div.data.filter(t => t.visible !== 'legendonly').length,
                drawn: div.querySelectorAll('g.trace.scatter').length,
                legend: div.querySelectorAll('g.legend g.traces').length,
                title: div.querySelector('.gtitle').textContent,
                overlap: ['.gtitle', 'g.legend'].filter(other => {  // the toolbar's box against the title's, legend's
                    const a = div.querySelector('.modebar').getBoundingClientRect();
                    const b = div.querySelector(other).getBoundingClientRect();
                    return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
                }),
                colors: div.data.filter(t => t.mode === 'lines+markers').map(t => t.line.color),
            }));""")
        errors = [e for e in driver.get_log("browser") if e["level"] == "SEVERE"]
        driver.save_screenshot(str(sweep_dir / "compare" / "screenshot.png"))
    finally:
        driver.quit()
    from lit_fl.suite.compare.curves import panels
    from lit_fl.suite.compare.results import load_comparison

    expected = panels(load_comparison([sweep_dir]))
    assert expected[:4] == ["reported_acc", "global_acc", "global_acc_regular", "local_acc"]
    assert len(figures) == 2 * len(expected)  # every panel x (round, MB)
    assert figures[0]["title"].startswith("Reported accuracy")
    for fig in figures:
        assert fig["expected"] == 4  # per configuration: band + mean (seeds hidden until clicked)
        assert fig["drawn"] == fig["expected"], fig  # every visible trace drawn in the SVG
        assert fig["legend"] >= 6, fig  # 2 means + 4 switchable seeds in the legend
        assert "DFML" not in fig["title"], fig  # DFML and FedAvg runs: no panel is titled after one method
        assert fig["overlap"] == [], fig  # plotly's toolbar never covers a title or the legend
        assert fig["colors"] == [color(0), color(1)], fig  # the colours of the PNG figures
    assert errors == [], errors


def test_png_figures_draw_each_configuration_in_its_dashboard_colour(sweep_dir: Path) -> None:
    import numpy as np
    from PIL import Image

    assert run_cli("compare", sweep_dir).rc == 0
    pixels = np.asarray(Image.open(sweep_dir / "compare" / "figures" / "global_acc.png").convert("RGB")).reshape(-1, 3)
    for i in (0, 1):
        rgb = [int(color(i)[k : k + 2], 16) for k in (1, 3, 5)]
        assert (pixels == rgb).all(axis=1).sum() > 100, color(i)  # its mean line, in exactly that colour
    assert (pixels == [255, 127, 14]).all(axis=1).sum() == 0  # matplotlib's own C1 orange appears nowhere


def test_titles_name_a_method_only_when_every_run_is_that_method_and_panels_add_information(
    sweep_dir: Path, tmp_path: Path
) -> None:
    from lit_fl.suite.compare.curves import methods, panels, title
    from lit_fl.suite.compare.results import load_comparison

    mixed = load_comparison([sweep_dir])
    assert methods(mixed) == {"DFML", "DecentralizedFedAvg"}
    assert title("global_acc", methods(mixed)) == "Global accuracy"
    dfml = load_comparison(sorted((sweep_dir / "runs").glob("*-dfml-*")))
    assert title("global_acc", methods(dfml)) == "Global accuracy (DFML: peak models)"
    assert title("local_acc", {"DecentralizedFedAvg"}) == "Local accuracy (DecentralizedFedAvg)"
    assert "acc/cnn_a" in panels(mixed)  # two architectures with their own curves: a panel each
    for run in mixed.runs:  # one architecture: its accuracy is the global accuracy again, no panel
        for row in run.rows:
            row["acc/cnn_a"], row["acc/cnn_b"] = row["global_acc"], row["global_acc_regular"]
    assert not [p for p in panels(mixed) if p.startswith("acc/")]


def test_an_unfinished_run_and_a_folder_left_out_are_said_on_the_page(sweep_dir: Path) -> None:
    run = sweep_dir / "runs" / "001-dfml-s1"
    (run / "summary.json").write_text(json.dumps({"status": "interrupted"}))
    manifest = json.loads((sweep_dir / "manifest.json").read_text())
    manifest["runs"].append({**manifest["runs"][0], "name": "004-dfml-s2", "run_dir": "runs/004-dfml-s2",
                             "status": "pending", "params": {**manifest["runs"][0]["params"], "seed": 2}})
    (sweep_dir / "manifest.json").write_text(json.dumps(manifest))
    result = run_cli("compare", sweep_dir)
    assert result.rc == 0, result.err
    page = (sweep_dir / "compare" / "dashboard.html").read_text()
    assert "1 unfinished run(s), not in the means and statistics: 001-dfml-s1 (seed 1, round 4)" in page
    assert "<li>004-dfml-s2: pending: no evaluated round yet</li>" in page
    assert "001-dfml-s1 (seed 1, unfinished: not in the mean)" in page  # its own line, off the mean
    report = (sweep_dir / "compare" / "results.md").read_text()
    assert "## Left out" in report and "- 004-dfml-s2: pending: no evaluated round yet" in report
