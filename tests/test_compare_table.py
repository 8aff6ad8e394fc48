"""``compare``'s results table on hand-made runs: rounds and MB to a target reached exactly, the sample std of
every column over seeds, the final (last) against the best accuracy."""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import pytest

from lit_fl.suite.compare.results import Comparison, Group, RunResult
from lit_fl.suite.compare.table import TableRow, first_reach, table_rows


def run(seed: int, accuracy: list[float], mb_per_round: float) -> RunResult:
    """A run whose traffic grows by ``mb_per_round`` per round (so rounds and MB are not proportional across seeds)."""
    rows = [{"round": float(r), "global_acc": a, "comm_mb": mb_per_round * r} for r, a in enumerate(accuracy, 1)]
    return RunResult(name=f"s{seed}", path=Path(f"s{seed}"), params={}, seed=seed, rows=rows)


def row_of(*runs: RunResult, target: float) -> TableRow:
    comparison = Comparison("t", [Group("dfml", {}, list(runs))], paper=None, metric="global_acc", source=Path("."))
    (row,) = table_rows(comparison, target)
    return row


def test_a_run_that_reaches_the_target_exactly_counts_at_that_round() -> None:
    assert first_reach(run(0, [0.5, 0.8, 0.9], 3.0), "global_acc", 0.8) == (2.0, 6.0)
    assert first_reach(run(0, [0.5, 0.79999, 0.9], 3.0), "global_acc", 0.8) == (3.0, 9.0)
    assert all(math.isnan(v) for v in first_reach(run(0, [0.5, 0.7], 3.0), "global_acc", 0.8))


def test_rounds_and_mb_to_target_are_mean_and_sample_std_over_seeds() -> None:
    row = row_of(run(0, [0.6, 0.7, 0.8, 0.9], 2.0), run(1, [0.8, 0.85, 0.9, 0.7], 5.0),
                 run(2, [0.5, 0.6, 0.9, 0.95], 1.0), target=0.8)
    rounds, mb = [3.0, 1.0, 3.0], [6.0, 5.0, 3.0]
    assert row.reached == 3
    assert row.rounds_to_target.mean == pytest.approx(statistics.mean(rounds))
    assert row.rounds_to_target.std == pytest.approx(statistics.stdev(rounds))  # 1.1547, not pstdev's 0.9428
    assert row.mb_to_target.mean == pytest.approx(statistics.mean(mb))
    assert row.mb_to_target.std == pytest.approx(statistics.stdev(mb))
    # final = the last round (0.9, 0.7, 0.95), best = the maximum (0.9, 0.9, 0.95)
    assert row.final.mean == pytest.approx((0.9 + 0.7 + 0.95) / 3)
    assert row.final.std == pytest.approx(statistics.stdev([0.9, 0.7, 0.95]))
    assert row.best.mean == pytest.approx((0.9 + 0.9 + 0.95) / 3)


def test_seeds_that_never_reach_the_target_are_left_out_of_its_columns() -> None:
    row = row_of(run(0, [0.6, 0.8], 2.0), run(1, [0.6, 0.7], 2.0), target=0.8)
    assert row.reached == 1
    assert row.rounds_to_target.mean == 2.0 and row.rounds_to_target.std == 0.0
    assert row.mb_to_target.mean == 4.0


def loss_run(seed: int, losses: list[float]) -> RunResult:
    rows = [{"round": float(r), "global_acc": 0.5, "train_loss": v, "dropped_senders": float(r % 2),
             "comm_mb": 2.0 * r} for r, v in enumerate(losses, 1)]
    return RunResult(name=f"s{seed}", path=Path(f"s{seed}"), params={}, seed=seed, rows=rows)


def test_a_loss_is_a_number_whose_best_is_its_minimum_and_whose_target_is_reached_from_above() -> None:
    from lit_fl.suite.compare.table import header, to_markdown

    runs = [loss_run(0, [2.0, 0.9, 1.2]), loss_run(1, [1.5, 1.1, 0.7])]
    comparison = Comparison("t", [Group("m", {}, runs)], paper=None, metric="train_loss", source=Path("."))
    (row,) = table_rows(comparison, 1.0)
    assert row.best.mean == pytest.approx((0.9 + 0.7) / 2) and row.final.mean == pytest.approx((1.2 + 0.7) / 2)
    assert row.rounds_to_target.mean == pytest.approx((2 + 3) / 2)  # 0.9 <= 1 at round 2, 0.7 <= 1 at round 3
    assert header(comparison, 1.0)[3] == "final train_loss"  # a number, not a percentage
    assert "0.95 ± 0.3536" in to_markdown(comparison, 1.0)
    accuracy = Comparison("t", [Group("m", {}, runs)], paper=None, metric="global_acc", source=Path("."))
    assert header(accuracy, 0.8)[3] == "final global_acc (%)" and "50.00 ± 0.00" in to_markdown(accuracy, 0.8)


def test_the_dashboard_plots_every_numeric_column(tmp_path: Path) -> None:
    from lit_fl.suite.compare.curves import every_numeric_column
    from lit_fl.suite.compare.dashboard import write_dashboard

    comparison = Comparison("t", [Group("m", {}, [loss_run(0, [2.0, 1.0])])], paper=None, metric="global_acc",
                            source=Path("."))
    assert every_numeric_column(comparison) == ["global_acc", "dropped_senders", "train_loss"]
    ids = write_dashboard(comparison, "", tmp_path / "d.html")
    page = (tmp_path / "d.html").read_text()
    assert len(ids) == 6 and '"text":"train_loss\\u003cbr\\u003e\\u003csup\\u003evs communication round' in page


def test_an_unfinished_run_is_named_and_never_averaged_into_the_final_accuracy(tmp_path: Path) -> None:
    """One seed stopped at round 2, one finished at round 3: final is the finished run's, the row says the rest."""
    import json

    from lit_fl.suite.compare.results import load_comparison
    from lit_fl.tracking import MetricsCSV

    for name, accuracy, status in (("a", [0.70, 0.72], "interrupted"), ("b", [0.70, 0.75, 0.78], "completed")):
        run_dir = tmp_path / name
        csv = MetricsCSV(run_dir / "metrics.csv")
        for r, a in enumerate(accuracy, 1):
            csv.append({"round": r, "reported_acc": a, "global_acc": a, "comm_mb": float(r)})
        (run_dir / "config.yaml").write_text("seed: 0\n" if name == "a" else "seed: 1\n")
        (run_dir / "summary.json").write_text(json.dumps({"status": status}))
    comparison = load_comparison([tmp_path], None)
    (row,) = table_rows(comparison, 0.8)
    assert row.final.values == [0.78] and row.rounds == 3 and row.seeds == 1
    assert row.label.endswith("[unfinished, left out: a (seed 0) at round 2]")
    unfinished = Comparison("t", [Group("g", {}, [comparison.runs[0]])], None, "global_acc", tmp_path)
    (only,) = table_rows(unfinished, 0.8)
    assert only.label == "g [unfinished, shown alone: a (seed 0) at round 2]" and only.rounds == 2


def test_a_curve_is_the_mean_of_the_completed_runs_only() -> None:
    from lit_fl.suite.compare.curves import curve

    done = [run(0, [0.5, 0.7, 0.9], 1.0), run(1, [0.6, 0.8, 1.0], 1.0)]
    stopped = run(2, [0.1, 0.1], 1.0)
    stopped.complete = False
    c = curve(Group("g", {}, [*done, stopped]), "global_acc")
    assert c.mean == pytest.approx([0.55, 0.75, 0.95]) and c.rounds == [1.0, 2.0, 3.0]
    alone = curve(Group("g", {}, [stopped]), "global_acc")  # no run completed: the unfinished one is drawn alone
    assert alone.mean == pytest.approx([0.1, 0.1])


def test_a_single_seed_shows_its_value_without_a_spread() -> None:
    from lit_fl.suite.compare.table import to_markdown

    one = Comparison("t", [Group("m", {}, [loss_run(0, [2.0, 0.9, 1.2])])], paper=None, metric="global_acc",
                     source=Path("."))
    text = to_markdown(one, 0.8)
    assert "| 50.00 |" in text and "±" not in text.split("\n", 2)[2]


def test_labels_leave_unset_keys_out_and_qualify_generic_or_shared_names() -> None:
    from lit_fl.suite.compare.results import label

    assert label({"algorithm.alpha_max": None, "topology.name": "ring"}) == "topology.name=ring"
    assert label({"algorithm.lr": 0.1, "algorithm.global_lr": 0.01}) == "lr=0.1, global_lr=0.01"
    assert label({"algorithm.server.lr": 0.1, "algorithm.lr": 0.01}) == "server.lr=0.1, algorithm.lr=0.01"


def test_the_png_legend_is_never_clipped(tmp_path: Path) -> None:
    """A long label: the saved figure grows to hold the legend below the panels (the old legend inside the first
    panel ran out of the image)."""
    from PIL import Image

    from lit_fl.suite.compare.figures import write_figures

    long = "a configuration with a label far longer than the panel it is drawn in " * 2
    comparison = Comparison("t", [Group(long, {}, [loss_run(0, [2.0, 0.9, 1.2])]), Group("b", {}, [loss_run(1, [1.0,
                            1.1, 0.7])])], paper=None, metric="global_acc", source=Path("."))
    (path, *_) = write_figures(comparison, tmp_path)
    width, height = Image.open(path).size
    assert height > 4 * 120  # the legend sits below the 4-inch panels, inside the image
    assert width >= 11 * 120 * 0.9


def test_configurations_are_labelled_by_the_settings_that_differ_as_key_value(tmp_path: Path) -> None:
    """A sweep over whole sections (``algorithm: {class_path, init_args}``, ``data: {partition, beta}``): each label
    names the class and ``key=value`` of only the settings that set configurations apart, never a section's bare
    values (``fd.FederatedDistillation 1.0-kl-1.0-True-...``) nor a setting all of them share."""
    import json

    from lit_fl.suite.compare.results import load_comparison
    from lit_fl.tracking import MetricsCSV

    fd = {"temperature": 1.0, "distance": "kl", "beta": 1.0, "detach": True, "weighting": "samples", "lr": 0.01}
    algorithms = [
        {"class_path": "fd.FederatedDistillation", "init_args": fd},
        {"class_path": "fd.FederatedDistillation", "init_args": {**fd, "temperature": 2.0}},
        {"class_path": "lit_fl.algorithms.DFML", "init_args": {"alpha_max": 0.9, "lr": 0.01}},
    ]
    datas = [{"partition": "dirichlet", "beta": 0.1}, {"partition": "dirichlet", "beta": 0.5}, {"partition": "iid"}]
    root, runs = tmp_path / "sweep", []
    for i, (algorithm, data) in enumerate((a, d) for a in algorithms for d in datas):
        name = f"{i:03d}"
        csv = MetricsCSV(root / "runs" / name / "metrics.csv")
        csv.append({"round": 1, "reported_acc": 0.5, "comm_mb": 1.0})
        (root / "runs" / name / "summary.json").write_text(json.dumps({"status": "completed"}))
        params = {"algorithm": algorithm, "data": data, "rounds": 3, "seed": 0}
        runs.append({"name": name, "params": params, "command": [], "status": "completed", "run_dir": f"runs/{name}"})
    (root / "manifest.json").write_text(json.dumps({"sweep": "fd", "method": "grid", "metric": {}, "file": "fd.yaml",
                                                   "overrides": [], "runs": runs}))
    shown = [g.label for g in load_comparison([root]).groups]
    assert shown[:3] == ["FederatedDistillation, temperature=1.0, partition=dirichlet, beta=0.1",
                         "FederatedDistillation, temperature=1.0, partition=dirichlet, beta=0.5",
                         "FederatedDistillation, temperature=1.0, partition=iid"]
    assert shown[3] == "FederatedDistillation, temperature=2.0, partition=dirichlet, beta=0.1"
    assert shown[6:] == ["DFML, partition=dirichlet, beta=0.1", "DFML, partition=dirichlet, beta=0.5",
                         "DFML, partition=iid"]


def test_configurations_alike_but_for_a_setting_one_lacks_are_told_apart() -> None:
    from lit_fl.suite.compare.results import labels

    assert labels([{"config": "a.yaml", "algorithm.mu": 0.5}, {"config": "a.yaml"}]) == ["mu=0.5", ""]
    assert labels([{"config": "a.yaml", "seed": 1}, {"config": "b.yaml", "seed": 1}]) == ["a", "b"]


def test_the_dashboard_leaves_out_a_column_no_run_shown_has_a_value_in(tmp_path: Path) -> None:
    """Server methods log no ``alpha`` and no ``aggregator`` (NaN in every row): no empty panel for them; a column
    that one run of the comparison fills is drawn."""
    from lit_fl.suite.compare.curves import every_numeric_column
    from lit_fl.suite.compare.dashboard import write_dashboard

    runs = [loss_run(0, [2.0, 1.0]), loss_run(1, [1.5, 1.1])]
    for run_ in runs:
        for row in run_.rows:
            row.update({"alpha": math.nan, "aggregator": math.nan, "server_acc/global": math.nan,
                        "kd_loss": 0.3 if run_.seed == 1 and row["round"] == 2 else math.nan})
    comparison = Comparison("t", [Group("m", {}, runs)], paper=None, metric="global_acc", source=Path("."))
    assert every_numeric_column(comparison) == ["global_acc", "dropped_senders", "kd_loss", "train_loss"]
    assert len(write_dashboard(comparison, "", tmp_path / "d.html")) == 2 * 4
    page = (tmp_path / "d.html").read_text()
    assert '"text":"kd_loss\\u003cbr' in page
    assert not [c for c in ("alpha", "aggregator", "Server model global: accuracy") if f'"text":"{c}\\u003cbr' in page]


def test_runs_without_reported_acc_are_compared_by_a_named_column(tmp_path: Path) -> None:
    """A run written before lit-fl wrote ``reported_acc``: the default table says, in one line, to name a column."""
    import json

    from lit_fl.errors import ConfigError
    from lit_fl.suite.compare.results import load_comparison

    for seed in (0, 1):
        run_dir = tmp_path / f"old{seed}"
        run_dir.mkdir()
        (run_dir / "metrics.csv").write_text("round,global_acc,comm_mb\n1,0.5,1.0\n")
        (run_dir / "config.yaml").write_text(f"seed: {seed}\n")
        (run_dir / "summary.json").write_text(json.dumps({"status": "completed"}))
    with pytest.raises(ConfigError, match=r"'reported_acc' is not a column .*name a column with --metric.*global_acc"):
        load_comparison([tmp_path])
    assert load_comparison([tmp_path], "global_acc").metric == "global_acc"


def test_a_paper_row_without_a_run_is_shown_and_counted_and_the_most_specific_row_stands_by_each_config(
) -> None:
    """Issue 37 case 10: a row matching no run was dropped without a word, and a general row's number stood beside
    a configuration a more specific row describes."""
    from lit_fl.suite.compare.table import to_csv, to_markdown
    from lit_fl.suite.paper import Paper, PaperRow

    paper = Paper(metric="global_acc", rows=[
        PaperRow(match={"algorithm": "dfml"}, value=0.70, label="DFML"),
        PaperRow(match={"algorithm": "dfml", "alpha": 0.5}, value=0.80, label="DFML a=0.5"),
        PaperRow(match={"algorithm": "fedavg"}, value=0.60, label="FedAvg"),  # no FedAvg run in this comparison
    ])
    groups = [Group("dfml a=0.5", {"algorithm": "dfml", "alpha": 0.5}, [run(0, [0.5, 0.75], 1.0)]),
              Group("dfml a=1", {"algorithm": "dfml", "alpha": 1.0}, [run(0, [0.5, 0.72], 1.0)])]
    comparison = Comparison("t", groups, paper=paper, metric="global_acc", source=Path("."))
    lines = to_markdown(comparison, 0.7).splitlines()
    assert lines[2].startswith("| dfml a=0.5 |") and lines[2].endswith("| 80.00 |")  # its own row, not DFML's 70
    assert lines[3].startswith("| dfml a=1 |") and lines[3].endswith("| 70.00 |")
    assert lines[4] == "| FedAvg [paper only: no run] | 0 | - | - | - | - | - | 60.00 |"
    assert lines[-1] == "1 paper row of global_acc match no run: shown as 'paper only: no run'."
    assert "FedAvg [paper only: no run],0,0,,,,,,,,,0,0.7,0.6" in to_csv(comparison, 0.7)


def run_with(column: str, seed: int, accuracy: list[float], values: list[float] | None) -> RunResult:
    """A run with ``values`` of ``column`` per round beside its accuracy, or without the column (``None``)."""
    rows = [{"round": float(r), "global_acc": a, "comm_mb": float(r)} for r, a in enumerate(accuracy, 1)]
    for row, value in zip(rows, values or []):
        row[column] = value
    return RunResult(name=f"s{seed}", path=Path(f"s{seed}"), params={}, seed=seed, rows=rows)


def private_run(seed: int, accuracy: list[float], epsilons: list[float] | None) -> RunResult:
    """A run with ``epsilon`` per round (a differentially private one), or without (``None``)."""
    return run_with("epsilon", seed, accuracy, epsilons)


def test_a_private_comparison_shows_epsilon_beside_accuracy_and_draws_accuracy_against_it(tmp_path: Path) -> None:
    from lit_fl.suite.compare.curves import axes
    from lit_fl.suite.compare.dashboard import figure, write_dashboard
    from lit_fl.suite.compare.table import to_csv, to_markdown

    dp = Group("dp", {}, [private_run(0, [0.5, 0.7], [1.0, 1.5]), private_run(1, [0.6, 0.8], [1.0, 1.5])])
    local = Group("local", {}, [private_run(0, [0.4, 0.5], None)])
    comparison = Comparison("t", [dp, local], paper=None, metric="global_acc", source=Path("."))
    lines = to_markdown(comparison, 0.75).splitlines()
    assert lines[0].endswith("| final epsilon |")
    assert lines[2].startswith("| dp |") and lines[2].endswith("| 1.5 ± 0 |")
    assert lines[3].startswith("| local |") and lines[3].endswith("| - |")
    assert to_csv(comparison, 0.75).splitlines()[0].endswith("final_epsilon_mean,final_epsilon_std")
    by_metric = axes(comparison, ["global_acc", "epsilon"])
    assert by_metric["global_acc"] == ["round", "comm_mb", "epsilon"]
    assert by_metric["epsilon"] == ["round", "comm_mb"]  # epsilon against itself is no view
    data = figure(comparison, "global_acc", "epsilon")["data"]
    mean = next(t for t in data if t["name"].startswith("dp (mean"))
    assert mean["x"] == [1.0, 1.5] and mean["y"] == pytest.approx([0.55, 0.75])
    assert not any(t["name"].startswith("local") for t in data)  # no privacy: nothing to draw against epsilon
    ids = write_dashboard(comparison, "", tmp_path / "d.html")
    assert "vs privacy spent, epsilon(delta)" in (tmp_path / "d.html").read_text()
    assert len(ids) == 3 + 2  # global_acc against round, MB and epsilon; epsilon against round and MB
    assert figure(comparison, "global_acc", "epsilon")["layout"]["xaxis"]["type"] == "log"


def test_a_private_comparisons_png_has_an_epsilon_panel(tmp_path: Path) -> None:
    from PIL import Image

    from lit_fl.suite.compare.figures import write_figures

    dp = Group("dp", {}, [private_run(0, [0.5, 0.7], [1.0, 1.5])])
    plain = Group("dp", {}, [private_run(0, [0.5, 0.7], None)])
    widths = []
    for group, folder in ((dp, "private"), (plain, "plain")):
        comparison = Comparison("t", [group], paper=None, metric="global_acc", source=Path("."))
        (path,) = write_figures(comparison, tmp_path / folder)
        widths.append(Image.open(path).size[0])
    assert widths[0] > 1.3 * widths[1]  # three panels (round, MB, epsilon) against two


def test_a_comparison_without_privacy_has_no_epsilon_column() -> None:
    from lit_fl.suite.compare.table import to_markdown

    comparison = Comparison("t", [Group("m", {}, [private_run(0, [0.5], None)])], paper=None, metric="global_acc",
                            source=Path("."))
    assert "epsilon" not in to_markdown(comparison, 0.9)


def timed_run(seed: int, accuracy: list[float], virtual: list[float] | None) -> RunResult:
    """A run with ``virtual_s`` per round (on the virtual clock), or without (``None``)."""
    return run_with("virtual_s", seed, accuracy, virtual)


def test_runs_on_the_virtual_clock_are_drawn_against_virtual_time(tmp_path: Path) -> None:
    """Every metric gets a virtual-time view (the seeds' geometric-mean virtual_s at each round, on a log axis);
    virtual_s itself is an axis, not a panel; a run without the clock has no curve there."""
    from lit_fl.suite.compare.curves import axes, every_numeric_column
    from lit_fl.suite.compare.dashboard import figure, write_dashboard
    from lit_fl.suite.compare.table import to_csv, to_markdown

    fast = Group("fedbuff", {}, [timed_run(0, [0.5, 0.7], [10.0, 30.0]), timed_run(1, [0.6, 0.8], [20.0, 50.0])])
    plain = Group("fedavg", {}, [timed_run(0, [0.4, 0.5], None)])
    comparison = Comparison("t", [fast, plain], paper=None, metric="global_acc", source=Path("."))
    assert comparison.timed and not comparison.private
    assert axes(comparison, ["global_acc"]) == {"global_acc": ["round", "comm_mb", "virtual_s"]}
    assert "virtual_s" not in every_numeric_column(comparison)
    data = figure(comparison, "global_acc", "virtual_s")["data"]
    mean = next(t for t in data if t["name"].startswith("fedbuff (mean"))
    assert mean["x"] == pytest.approx([math.sqrt(10.0 * 20.0), math.sqrt(30.0 * 50.0)], rel=1e-12)
    assert mean["y"] == pytest.approx([0.55, 0.75])
    assert not any(t["name"].startswith("fedavg") for t in data)
    assert figure(comparison, "global_acc", "virtual_s")["layout"]["xaxis"]["type"] == "log"
    write_dashboard(comparison, "", tmp_path / "d.html")
    assert "vs virtual time (s)" in (tmp_path / "d.html").read_text()
    lines = to_markdown(comparison, 0.7).splitlines()
    assert lines[0].endswith("| virtual s to 0.7 |")
    assert lines[2].startswith("| fedbuff |") and lines[2].endswith("| 40 ± 14.1 |")  # seeds reach at 30 s and 50 s
    assert lines[3].startswith("| fedavg |") and lines[3].endswith("| not reached |")
    assert to_csv(comparison, 0.7).splitlines()[0].endswith("virtual_s_to_target_mean,virtual_s_to_target_std")
