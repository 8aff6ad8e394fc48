"""The paper's claims (``claims:`` of ``NAME.paper.yaml``) checked by ``lit-fl compare`` on hand-made runs: paired
by seed (never by position, never unpaired), the verdict of the one-sided paired t-test Holm-adjusted over the
sweep's claims, seeds and unfinished runs left out and named, one-line refusals of a malformed claim, and the Claims
section of results.md and the dashboard."""

from __future__ import annotations

import csv
import json
import math
import random
import statistics
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import yaml
from conftest import run_cli
from hypothesis import given
from hypothesis import strategies as st

from lit_fl.errors import ConfigError
from lit_fl.suite.compare.claims import (
    FAILS,
    HOLDS,
    NOISE,
    RULE,
    TOO_FEW,
    ClaimResult,
    evaluate_claims,
    holm_adjusted,
    paired_p_greater,
    run_value,
    student_t_sf,
)
from lit_fl.suite.compare.results import Comparison, Group, RunResult
from lit_fl.suite.compare.table import CLAIMS_HEADER, claims_html, claims_markdown
from lit_fl.suite.paper import Claim, Paper, load_paper

DFML, FEDAVG, FEDPROX = "experiments/dfml.yaml", "experiments/fedavg.yaml", "experiments/fedprox.yaml"


def run(config: str, seed: int, final: float, beta: float = 0.1, complete: bool = True,
        metric: str = "global_acc") -> RunResult:
    """Three rounds: ``final - 0.1``, ``final + 0.05`` (the best) and ``final``, then a round without evaluation."""
    values = [final - 0.1, final + 0.05, final, math.nan]
    rows = [{"round": float(r), metric: v, "comm_mb": float(r)} for r, v in enumerate(values, 1)]
    params = {"config": config, "data.beta": beta}
    return RunResult(f"{Path(config).stem}-b{beta}-s{seed}", Path("."), params, seed, rows, complete)


def comparison(runs: list[RunResult], *claims: Claim, metric: str = "global_acc") -> Comparison:
    """The runs grouped into configurations (in order of first appearance), as ``load_comparison`` does."""
    groups: dict[str, Group] = {}
    for r in runs:
        key = json.dumps(r.params, sort_keys=True)
        label = f"{Path(r.params['config']).stem} beta={r.params['data.beta']}"
        groups.setdefault(key, Group(label, dict(r.params))).runs.append(r)
    paper = Paper(source="test", metric=metric, rows=[], claims=tuple(claims))
    return Comparison("t", list(groups.values()), paper, metric, Path("sweep"))


def claim(better: str = DFML, worse: str | list[str] = FEDAVG, **kwargs: Any) -> Claim:
    worse_matches = tuple({"config": w} for w in ([worse] if isinstance(worse, str) else worse))
    return Claim(text="DFML above FedAvg", better={"config": better}, worse=worse_matches, **kwargs)


def only(results: list[ClaimResult]) -> ClaimResult:
    (result,) = results
    return result


def pair(better: list[float], worse: list[float], **kwargs: Any) -> ClaimResult:
    """Claim 1 on runs of seeds 0, 1, ... with these final accuracies."""
    runs = [run(DFML, s, v) for s, v in enumerate(better)] + [run(FEDAVG, s, v) for s, v in enumerate(worse)]
    return only(evaluate_claims(comparison(runs, claim(**kwargs))))


# --- the t distribution --------------------------------------------------------------------------------------


def test_student_t_tail_at_the_textbook_critical_values() -> None:
    """t_{0.95} for 1, 2, 4 and 10 degrees of freedom (any table), and the symmetric tail."""
    for t, df in ((6.313752, 1), (2.919986, 2), (2.131847, 4), (1.812461, 10)):
        assert student_t_sf(t, df) == pytest.approx(0.05, abs=1e-6)
        assert student_t_sf(-t, df) == pytest.approx(0.95, abs=1e-6)
    assert student_t_sf(0.0, 3) == 0.5 and student_t_sf(math.inf, 5) == pytest.approx(0.0, abs=1e-15)


def test_the_paired_p_value_is_scipys_one_sided_paired_t_test() -> None:
    stats = pytest.importorskip("scipy.stats")
    better, worse = [0.81, 0.74, 0.92, 0.66, 0.70], [0.80, 0.70, 0.93, 0.61, 0.69]
    expected = stats.ttest_rel(better, worse, alternative="greater").pvalue
    assert paired_p_greater([b - w for b, w in zip(better, worse)]) == pytest.approx(expected, rel=1e-9)
    for df in range(1, 30):
        for t in (-4.0, -0.5, 0.3, 1.7, 3.1, 25.0):
            assert student_t_sf(t, df) == pytest.approx(stats.t.sf(t, df), abs=1e-12)


# --- Holm's adjustment ----------------------------------------------------------------------------------------


def test_holm_adjusts_a_hand_computed_family_and_leaves_nan_out() -> None:
    """Sorted 0.005, 0.01, 0.03, 0.04 with m = 4: 4·0.005 = 0.02, 3·0.01 = 0.03, 2·0.03 = 0.06, then 1·0.04 = 0.04
    is raised to the running max 0.06; the NaN (a pair with one seed) stays NaN and does not make m = 5."""
    ps = [0.01, 0.04, math.nan, 0.03, 0.005]
    adjusted = holm_adjusted(ps)
    assert math.isnan(adjusted[2])
    expected = [0.03, 0.06, 0.06, 0.02]
    got = adjusted[:2] + adjusted[3:]
    assert all(math.isclose(a, e, rel_tol=4e-15) for a, e in zip(got, expected)), got  # a few ulps of (m-j+1)·p
    assert holm_adjusted([]) == [] and holm_adjusted([0.03]) == [0.03] and holm_adjusted([0.6, 0.7]) == [1.0, 1.0]


def holm_reference(ps: list[float]) -> list[float]:
    """Holm (1979) as written: rank r of each p among the m non-NaN ones (1 = smallest, ties by position), then the
    max over ranks j <= r of min(1, (m - j + 1) p_(j))."""
    kept = [(p, i) for i, p in enumerate(ps) if not math.isnan(p)]
    ranked = sorted(kept)
    m = len(ranked)
    out = [math.nan] * len(ps)
    for r, (_, i) in enumerate(ranked, start=1):
        out[i] = max(min(1.0, (m - j + 1) * ranked[j - 1][0]) for j in range(1, r + 1))
    return out


P_VALUES = st.lists(st.one_of(st.floats(0.0, 1.0), st.just(math.nan), st.sampled_from([0.0, 0.01, 0.05, 1.0])),
                    max_size=12)


@given(P_VALUES)
def test_holm_is_the_reference_monotone_at_least_p_and_at_most_1(ps: list[float]) -> None:
    adjusted = holm_adjusted(ps)
    reference = holm_reference(ps)
    assert len(adjusted) == len(ps)
    for p, a, ref in zip(ps, adjusted, reference):
        if math.isnan(p):
            assert math.isnan(a)
            continue
        assert a == ref and p <= a <= 1.0
    kept = sorted((p, a) for p, a in zip(ps, adjusted) if not math.isnan(p))
    assert all(a1 <= a2 for (_, a1), (_, a2) in zip(kept, kept[1:]))  # monotone in the order of p
    if len(kept) == 1:
        assert kept[0][1] == kept[0][0]  # a family of one: Holm is p itself


def test_holm_on_random_families_with_a_fixed_seed() -> None:
    rng = random.Random(1979)
    for _ in range(500):
        ps = [rng.choice((math.nan, rng.random() * 0.1, rng.random())) for _ in range(rng.randint(0, 15))]
        adjusted, reference = holm_adjusted(ps), holm_reference(ps)
        assert [math.isnan(a) for a in adjusted] == [math.isnan(p) for p in ps]
        assert [a for a in adjusted if not math.isnan(a)] == [r for r in reference if not math.isnan(r)]
        m = sum(not math.isnan(p) for p in ps)
        assert all(p <= a <= min(1.0, m * p) for p, a in zip(ps, adjusted) if not math.isnan(p))  # Holm <= Bonferroni


# --- pairing ---------------------------------------------------------------------------------------------------


def test_runs_are_paired_by_seed_not_by_position_nor_unpaired() -> None:
    """Seeds differ far more than the methods (seed s: base 0.5, 0.7, 0.9): DFML is 1 point above FedAvg on every
    seed. The runs come in different seed orders, and FedAvg has an extra seed 3 that DFML lacks."""
    base = {0: 0.5, 1: 0.7, 2: 0.9}
    lift = {0: 0.010, 1: 0.012, 2: 0.009}
    better = [run(DFML, s, base[s] + lift[s]) for s in (2, 0, 1)]
    worse = [run(FEDAVG, s, base[s]) for s in (0, 1, 2)] + [run(FEDAVG, 3, 0.99)]
    result = only(evaluate_claims(comparison(better + worse, claim())))
    assert [s for s, _ in result.differences] == [0, 1, 2]
    assert [d for _, d in result.differences] == pytest.approx([lift[0], lift[1], lift[2]])
    assert result.missing == ("seed 3 (no dfml beta=0.1 run)",)
    assert result.holding == 3 and result.n == 3 and result.verdict == HOLDS
    # unpaired, the extra seed makes FedAvg look better; by position, DFML seed 2 meets FedAvg seed 0
    unpaired = statistics.fmean(r.rows[2]["global_acc"] for r in better) - statistics.fmean(
        r.rows[2]["global_acc"] for r in worse)
    assert unpaired < 0 < result.mean
    by_position = [b.rows[2]["global_acc"] - w.rows[2]["global_acc"] for b, w in zip(better, worse)]
    assert sum(d > 0 for d in by_position) < 3


def test_a_claim_over_a_sweep_varying_another_parameter_is_one_pair_per_value() -> None:
    """``better: {config: dfml}`` against FedAvg over beta 0.1 and 0.5: DFML wins at 0.1, loses at 0.5; a beta-0.1
    run is never compared with a beta-0.5 one."""
    runs = []
    for s, (up, down) in enumerate(((0.03, -0.04), (0.02, -0.05), (0.04, -0.03))):
        runs += [run(DFML, s, 0.6 + up, 0.1), run(FEDAVG, s, 0.6, 0.1)]
        runs += [run(DFML, s, 0.8 + down, 0.5), run(FEDAVG, s, 0.8, 0.5)]
    low, high = evaluate_claims(comparison(runs, claim()))
    assert (low.better, low.worse) == ("dfml beta=0.1", "fedavg beta=0.1")
    assert (high.better, high.worse) == ("dfml beta=0.5", "fedavg beta=0.5")
    assert low.mean == pytest.approx(0.03) and low.verdict == HOLDS
    assert high.mean == pytest.approx(-0.04) and high.verdict == FAILS


def test_worse_as_a_list_is_better_than_each_with_the_papers_numbers_of_each() -> None:
    runs = [run(DFML, s, 0.80 + 0.01 * s) for s in range(3)] + [run(FEDAVG, s, 0.70 + 0.012 * s) for s in range(3)]
    runs += [run(FEDPROX, s, 0.79 + 0.01 * s + (0.02, -0.02, 0.01)[s]) for s in range(3)]
    fedavg, fedprox = evaluate_claims(comparison(runs, claim(worse=[FEDAVG, FEDPROX], paper=(0.8, 0.7, 0.75))))
    assert fedavg.worse == "fedavg beta=0.1" and fedavg.paper == (0.8, 0.7) and fedavg.verdict == HOLDS
    assert fedprox.worse == "fedprox beta=0.1" and fedprox.paper == (0.8, 0.75) and fedprox.verdict == NOISE


def test_worse_metric_reads_the_worse_sides_own_column() -> None:
    """FedORION's server model against FedMD's clients (FedORION sec. 4.1): the better side is read on
    ``server_acc/global``, the worse on ``global_acc``; a run of the worse side has a misleading
    ``server_acc/global`` column that must not be read."""
    runs = [run(DFML, s, 0.80 + 0.01 * s, metric="server_acc/global") for s in range(3)]
    for s in range(3):
        fedmd = run(FEDAVG, s, 0.70 + 0.012 * s)
        for row in fedmd.rows:
            row["server_acc/global"] = 0.99  # never read: the worse side is global_acc
        runs.append(fedmd)
    result = only(evaluate_claims(comparison(runs, claim(metric="server_acc/global", worse_metric="global_acc"))))
    assert [d for _, d in result.differences] == pytest.approx([0.10 - 0.002 * s for s in range(3)])
    assert result.verdict == HOLDS
    assert "server_acc/global vs global_acc, final" in claims_markdown([result])


def test_a_worse_metric_no_run_has_is_one_line() -> None:
    runs = [run(DFML, s, 0.8) for s in range(2)] + [run(FEDAVG, s, 0.7) for s in range(2)]
    with pytest.raises(ConfigError, match=r"claims\[1\]\.worse_metric: no run has a 'local_acc' column"):
        evaluate_claims(comparison(runs, claim(worse_metric="local_acc")))


# --- the verdict -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("better", "worse", "verdict"), [
    ([0.72, 0.75, 0.70], [0.70, 0.72, 0.675], HOLDS),
    ([0.70, 0.72, 0.675], [0.72, 0.75, 0.70], FAILS),
    ([0.75, 0.66, 0.71], [0.70, 0.70, 0.70], NOISE),
    ([0.701, 0.75, 0.80], [0.70, 0.70, 0.70], NOISE),  # better on 3/3 seeds, yet p = 0.11: not significant
    ([0.75], [0.70], TOO_FEW),
])
def test_the_verdict_is_a_one_sided_paired_t_test_at_5_percent(better: list[float], worse: list[float],
                                                                verdict: str) -> None:
    result = pair(better, worse)
    assert result.verdict == verdict
    assert result.mean == pytest.approx(statistics.fmean(b - w for b, w in zip(better, worse)))
    if result.n > 1:
        assert result.std == pytest.approx(statistics.stdev(b - w for b, w in zip(better, worse)))


# d = +1.5, +3, +4.5 points over seeds 0, 1, 2: t = 2·sqrt(3), p = 0.037 one-sided with 2 degrees of freedom
LIFTED = (0.615, 0.63, 0.645)


def two_claims() -> list[ClaimResult]:
    """DFML above FedAvg and DFML above FedProx, each by ``LIFTED`` over the same 0.6: raw p 0.037 each."""
    runs = [run(DFML, s, v) for s, v in enumerate(LIFTED)]
    runs += [run(FEDAVG, s, 0.6) for s in range(3)] + [run(FEDPROX, s, 0.6) for s in range(3)]
    return evaluate_claims(comparison(runs, claim(), claim(worse=FEDPROX)))


def test_two_claims_at_p_0037_each_are_within_seed_noise_after_holm() -> None:
    """Each claim alone holds (p = 0.037 < 0.05); tested together, Holm gives 2·0.037 = 0.074 to the smaller and
    the running max to the other, so neither holds."""
    fedavg, fedprox = two_claims()
    for result in (fedavg, fedprox):
        assert result.p == pytest.approx(0.5 * (1 - math.sqrt(12) / math.sqrt(14)), rel=1e-9)  # A&S 26.7.4, df 2
        assert result.p < 0.05 <= result.p_holm
        assert result.p_holm == pytest.approx(2 * result.p, rel=1e-12)
        assert result.verdict == NOISE
    alone = pair(list(LIFTED), [0.6, 0.6, 0.6])  # the same claim in a family of one
    assert alone.p_holm == alone.p and alone.verdict == HOLDS
    built_alone = replace(fedavg, p_holm=math.nan)  # no family given (evaluate_pair): the verdict reads p
    assert built_alone.p_verdict == fedavg.p and built_alone.verdict == HOLDS


def test_the_claims_table_shows_the_holm_adjusted_p_after_the_one_sided_p() -> None:
    results = two_claims()
    assert CLAIMS_HEADER[CLAIMS_HEADER.index("p (one-sided)") + 1] == "p (Holm)"
    markdown = claims_markdown(results)
    assert "| p (one-sided) | p (Holm) | verdict |" in markdown
    p, p_holm = f"{results[0].p:.3g}", f"{results[0].p_holm:.3g}"
    assert (p, p_holm) == ("0.0371", "0.0742")
    rows = [line for line in markdown.splitlines() if line.startswith("| DFML above FedAvg |")]
    assert rows == [f"| DFML above FedAvg | dfml beta=0.1 vs {worse} beta=0.1 | global_acc, final | +3.00 ± 1.50 pp "
                    f"| 3/3 | {p} | {p_holm} | {NOISE} | - |" for worse in ("fedavg", "fedprox")]
    assert "<th>p (Holm)</th>" in claims_html(results) and f"<td>{p_holm}</td>" in claims_html(results)
    assert "Holm" in RULE and "Bonferroni" in RULE


def test_final_is_the_last_evaluated_round_and_best_each_runs_best() -> None:
    """The runs' last row has no accuracy: final is round 3's; ``best`` compares the peaks (round 2)."""
    r = run(DFML, 0, 0.7)
    assert run_value(r, "global_acc", "final") == pytest.approx(0.7)
    assert run_value(r, "global_acc", "best") == pytest.approx(0.75)
    peaked = run(DFML, 1, 0.6)
    peaked.rows[1]["global_acc"] = 0.95  # a peak far above FedAvg's, then down again
    runs = [run(DFML, 0, 0.60), peaked, run(FEDAVG, 0, 0.62), run(FEDAVG, 1, 0.62)]
    final = only(evaluate_claims(comparison(runs, claim())))
    best = only(evaluate_claims(comparison(runs, claim(at="best"))))
    assert [d for _, d in final.differences] == pytest.approx([-0.02, -0.02])
    assert [d for _, d in best.differences] == pytest.approx([-0.02, 0.95 - 0.67])


def test_for_a_loss_lower_is_better() -> None:
    runs = [run(DFML, s, v, metric="train_loss") for s, v in enumerate((0.30, 0.32, 0.29))]
    runs += [run(FEDAVG, s, v, metric="train_loss") for s, v in enumerate((0.40, 0.41, 0.42))]
    result = only(evaluate_claims(comparison(runs, claim(), metric="train_loss")))
    assert [d for _, d in result.differences] == pytest.approx([0.10, 0.09, 0.13])
    assert result.verdict == HOLDS


def timed_run(config: str, seed: int, accuracies: list[float], seconds: list[float]) -> RunResult:
    rows = [{"round": float(r), "global_acc": a, "virtual_s": t}
            for r, (a, t) in enumerate(zip(accuracies, seconds), 1)]
    return RunResult(f"{Path(config).stem}-s{seed}", Path("."), {"config": config, "data.beta": 0.1}, seed, rows, True)


def test_time_to_target_compares_the_log_of_the_virtual_seconds_to_reach_it() -> None:
    """``at: to_target``: virtual_s at the first round at or above the target, d = ln(worse / better) per seed (the
    log speedup); the table shows exp(mean d); a seed whose run never reaches the target is left out and named."""
    fast = [timed_run(DFML, s, [0.5, 0.8, 0.9], [1.0, 2.0 * (s + 1), 50.0]) for s in range(3)]
    slow = [timed_run(FEDAVG, s, [0.5, 0.7, 0.85], [10.0, 20.0, 30.0 * (s + 1)]) for s in range(2)]
    slow.append(timed_run(FEDAVG, 2, [0.5, 0.6, 0.7], [10.0, 20.0, 30.0]))  # never reaches 0.8
    result = only(evaluate_claims(comparison(fast + slow, claim(at="to_target", target=0.8))))
    assert result.metric == "virtual_s" and result.kind.lower_is_better
    assert [seed for seed, _ in result.differences] == [0, 1]
    assert result.values == pytest.approx([math.log(30.0 / 2.0), math.log(60.0 / 4.0)], rel=1e-12)
    assert result.missing == ("seed 2 (fedavg beta=0.1: no global_acc >= 0.8)",)
    assert result.verdict == HOLDS  # both seeds 15x sooner: no spread, p = 0
    row = claims_markdown([result])
    assert "virtual_s to global_acc >= 0.8 (lower is better)" in row and "15x sooner" in row
    reversed_ = only(evaluate_claims(comparison(fast + slow, claim(FEDAVG, DFML, at="to_target", target=0.8))))
    assert reversed_.values == pytest.approx([-math.log(15.0)] * 2, rel=1e-12)


# --- left out --------------------------------------------------------------------------------------------------


def test_an_unfinished_run_is_left_out_and_named() -> None:
    """DFML seed 1 stopped early far below FedAvg: counted, it would make the claim noise."""
    runs = [run(DFML, 0, 0.80), run(DFML, 1, 0.10, complete=False), run(DFML, 2, 0.82), run(DFML, 3, 0.81)]
    runs += [run(FEDAVG, s, v) for s, v in enumerate((0.70, 0.71, 0.73, 0.715))]
    result = only(evaluate_claims(comparison(runs, claim())))
    assert [s for s, _ in result.differences] == [0, 2, 3] and result.verdict == HOLDS
    assert result.unfinished == ("dfml-b0.1-s1",)
    assert result.missing == ("seed 1 (dfml beta=0.1: unfinished run dfml-b0.1-s1)",)
    assert "[left out: seed 1 (dfml beta=0.1: unfinished run dfml-b0.1-s1)]" in claims_markdown([result])


# --- the paper file --------------------------------------------------------------------------------------------

GOOD = {"claim": "DFML above FedAvg (Table 6)", "better": {"config": DFML}, "worse": {"config": FEDAVG}}


def write_paper(folder: Path, *claims: dict[str, Any], **top: Any) -> Path:
    path = folder / "paper.yaml"
    path.write_text(yaml.safe_dump({"source": "DFML", "metric": "global_acc", "rows": [], **top,
                                    **({"claims": list(claims)} if claims else {})}))
    return path


def test_a_paper_file_without_claims_still_loads(tmp_path: Path) -> None:
    paper = load_paper(write_paper(tmp_path))
    assert paper.claims == () and paper.metric == "global_acc"


def test_a_claim_is_read_with_its_defaults(tmp_path: Path) -> None:
    full = {**GOOD, "worse": [{"config": FEDAVG}, {"config": FEDPROX}], "metric": "local_acc", "at": "best",
            "paper": [0.8, 0.7, 0.75], "source": "Table 6"}
    first, second = load_paper(write_paper(tmp_path, GOOD, full)).claims
    assert first == Claim(text="DFML above FedAvg (Table 6)", better={"config": DFML}, worse=({"config": FEDAVG},))
    assert (first.metric, first.at, first.paper) == (None, "final", ())
    assert second.worse == ({"config": FEDAVG}, {"config": FEDPROX}) and second.paper == (0.8, 0.7, 0.75)
    assert (second.metric, second.at, second.source) == ("local_acc", "best", "Table 6")


@pytest.mark.parametrize(("change", "message"), [
    ({"beter": {"config": DFML}}, "claims[2]: unknown key 'beter'; allowed: about, at, axis, better, claim, "
                                  "differs, metric, note, paper, source, target, worse, worse_metric"),
    ({"worse": {}}, "claims[2].worse[1]: expected at least 1 item(s), got {}"),
    ({"worse": [{"config": FEDAVG}, "fedprox"]}, "claims[2].worse[2]: expected a mapping, got 'fedprox'"),
    ({"worse": []}, "claims[2].worse: expected at least 1 item(s), got []"),
    ({"better": "dfml"}, "claims[2].better: expected a mapping, got 'dfml'"),
    ({"better": {"config": DFML, "seed": 0}}, "claims[2].better: must not match seed"),
    ({"at": "last"}, "claims[2].at: unknown value 'last'; allowed: final, best, to_target"),
    ({"at": "to_target"}, "claims[2].target: is given with at: to_target, and only then"),
    ({"target": 0.8}, "claims[2].target: is given with at: to_target, and only then"),
    ({"paper": [0.8]}, "claims[2].paper: must be a list of 2 numbers (better, then each worse), got [0.8]"),
    ({"paper": [73.66, 65.43]}, "claims[2].paper: must be fractions in [0, 1] for an accuracy"),
    ({"paper": [0.8, float("nan")]}, "claims[2].paper[2]: expected a finite number, got nan"),
    ({"claim": ""}, "claims[2].claim: expected non-empty text, got ''"),
    ({"metric": 3}, "claims[2].metric: expected text, got 3"),
    ({"worse_metric": ""}, "claims[2].worse_metric: expected non-empty text, got ''"),
    ({"worse_metric": "train_loss"}, "claims[2].worse_metric: 'train_loss' is not measured like 'global_acc'"),
    ({"about": "algorithm"}, "claims[2].about: expected a list, got 'algorithm'"),
    ({"about": []}, "claims[2].about: expected at least 1 item(s), got []"),
    ({"differs": {"rounds": ""}}, "claims[2].differs.rounds: expected non-empty text, got ''"),
    ({"differs": ["rounds"]}, "claims[2].differs: expected a mapping, got ['rounds']"),
])
def test_a_malformed_claim_is_one_line_naming_the_file_claim_and_key(tmp_path: Path, change: dict[str, Any],
                                                                     message: str) -> None:
    bad = {**GOOD, **change}
    with pytest.raises(ConfigError) as err:
        load_paper(write_paper(tmp_path, GOOD, bad))
    assert str(err.value).startswith(f"paper numbers {tmp_path / 'paper.yaml'}: ")
    assert message in str(err.value) and "\n" not in str(err.value)


def test_about_differs_and_choices_are_read(tmp_path: Path) -> None:
    claim = {**GOOD, "about": ["algorithm", "models.same_init"], "differs": {"rounds": "  the paper\n runs longer "}}
    choice = {"choice": "initialisation", "taken": "both", "why": "sec. 3.5 reads either way"}
    paper = load_paper(write_paper(tmp_path, claim, choices=[choice]))
    assert paper.claims[0].about == ("algorithm", "models.same_init")
    assert paper.claims[0].differs == {"rounds": "the paper runs longer"}
    assert [(c.choice, c.taken, c.why) for c in paper.choices] == [
        ("initialisation", "both", "sec. 3.5 reads either way")]


@pytest.mark.parametrize("choices", [{"choice": "x"}, [{"choice": "x", "taken": "y"}], [{"choice": "x", "taken": "y",
                                     "why": ""}], [{"choice": "x", "taken": "y", "why": "z", "note": "n"}], ["x"]])
def test_a_malformed_choice_is_one_line(tmp_path: Path, choices: Any) -> None:
    with pytest.raises(ConfigError) as err:
        load_paper(write_paper(tmp_path, GOOD, choices=choices))
    assert "choice" in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize(("missing", "message"), [
    ("better", r"claims\[1\]: needs key 'better'; required: better, claim, worse"),
    ("worse", r"claims\[1\]: needs key 'worse'; required: better, claim, worse"),
    ("claim", r"claims\[1\]: needs key 'claim'; required: better, claim, worse"),
])
def test_a_claim_without_better_worse_or_text_is_refused(tmp_path: Path, missing: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_paper(write_paper(tmp_path, {k: v for k, v in GOOD.items() if k != missing}))
    with pytest.raises(ConfigError, match="claims: expected a list, got"):
        load_paper(write_paper(tmp_path, claims=GOOD))


def test_a_claim_matching_no_run_or_no_pair_is_refused() -> None:
    runs = [run(DFML, 0, 0.8), run(FEDAVG, 0, 0.7, beta=0.5)]
    with pytest.raises(ConfigError, match=r"^paper numbers sweep/paper.yaml: claims\[1\]\.worse: .*fedprox.* matches"):
        evaluate_claims(comparison(runs, claim(worse=FEDPROX)))
    with pytest.raises(ConfigError, match=r"claims\[1\]\.better, worse: no configuration matching better"):
        evaluate_claims(comparison(runs, claim()))  # dfml ran at beta 0.1 only, fedavg at 0.5 only
    with pytest.raises(ConfigError, match=r"claims\[1\]\.metric: no run has a 'local_acc' column"):
        evaluate_claims(comparison(runs, claim(metric="local_acc")))


# --- compare end to end ----------------------------------------------------------------------------------------


def sweep_dir(root: Path, claims: list[dict[str, Any]], finals: dict[tuple[str, int], float],
              unfinished: tuple[str, ...] = ()) -> Path:
    """A sweep folder as ``lit-fl sweep`` leaves it: manifest, runs (3 rounds each), paper.yaml with ``claims``."""
    entries = []
    for i, ((config, seed), final) in enumerate(finals.items()):
        name = f"{i:03d}-{Path(config).stem}-s{seed}"
        folder = root / "runs" / name
        folder.mkdir(parents=True)
        with (folder / "metrics.csv").open("w", newline="") as handle:
            writer = csv.writer(handle)
            writer.writerow(["round", "global_acc", "comm_mb"])
            for r, acc in enumerate((final - 0.2, final - 0.1, final), 1):
                writer.writerow([r, acc, 10.0 * r])
        status = "interrupted" if name in unfinished else "completed"
        (folder / "summary.json").write_text(json.dumps({"status": status}))
        entries.append({"name": name, "params": {"config": config, "seed": seed}, "command": [], "status": status,
                        "run_dir": f"runs/{name}"})
    manifest = {"sweep": "toy", "method": "grid", "metric": {"name": "global_acc", "goal": "maximize"},
                "file": "toy.yaml", "overrides": [], "runs": entries}
    (root / "manifest.json").write_text(json.dumps(manifest))
    write_paper(root, *claims)
    return root


def test_compare_writes_the_claims_section_to_results_md_and_the_dashboard(tmp_path: Path) -> None:
    finals = {(DFML, 0): 0.85, (DFML, 1): 0.80, (DFML, 2): 0.90, (FEDAVG, 2): 0.88, (FEDAVG, 0): 0.83,
              (FEDAVG, 1): 0.78, (FEDPROX, 0): 0.86, (FEDPROX, 1): 0.75, (FEDPROX, 2): 0.92}
    claims = [{**GOOD, "paper": [0.7366, 0.6543]},
              {"claim": "DFML above FedProx", "better": {"config": DFML}, "worse": {"config": FEDPROX},
               "source": "Table 7"},
              {"claim": "FedProx above DFML", "better": {"config": FEDPROX}, "worse": {"config": DFML}}]
    root = sweep_dir(tmp_path / "toy", claims, finals, unfinished=("008-fedprox-s2",))
    result = run_cli("compare", root)
    assert result.rc == 0, result.err
    markdown = (root / "compare" / "results.md").read_text()
    assert markdown in result.out
    assert "## Claims" in markdown and RULE in markdown
    lines = [line for line in markdown.splitlines() if line.startswith("| DFML above")]
    # DFML - FedAvg = +2 points on every seed; the paper's numbers beside
    assert lines[0] == ("| DFML above FedAvg (Table 6) | dfml vs fedavg | global_acc, final | +2.00 ± 0.00 pp | 3/3 "
                        "| < 0.001 | < 0.001 | holds | 73.66% vs 65.43% |")
    # FedProx seed 2 stopped early: seeds 0, 1 give -1 and +5 points
    assert lines[1].startswith("| DFML above FedProx (Table 7) | dfml vs fedprox [left out: seed 2 (fedprox: "
                               "unfinished run 008-fedprox-s2)] | global_acc, final | +2.00 ± 4.24 pp | 1/2 |")
    assert lines[1].endswith(f"| {NOISE} | - |")
    dashboard = (root / "compare" / "dashboard.html").read_text()
    assert '<table id="claims">' in dashboard and "<td>holds</td>" in dashboard and "<h2>Claims</h2>" in dashboard


def test_compare_refuses_a_claim_matching_no_run_in_one_line_and_writes_nothing(tmp_path: Path) -> None:
    bad = {**GOOD, "worse": {"config": "experiments/fedprox.yaml"}}
    root = sweep_dir(tmp_path / "toy", [GOOD, bad], {(DFML, 0): 0.8, (FEDAVG, 0): 0.7})
    result = run_cli("compare", root)
    assert result.rc == 2
    assert result.err.strip() == (f"lit-fl: error: paper numbers {root / 'paper.yaml'}: claims[2].worse: "
                                  "{'config': 'experiments/fedprox.yaml'} matches no run of the sweep")
    assert not (root / "compare").exists()


def test_no_claims_no_section() -> None:
    assert claims_markdown([]) == "" and claims_html([]) == ""
