"""Config rules written once (:mod:`lit_fl.constraints`): the range of a numeric key is its type on the signature,
checked when the object is built (from a config or from Python) with the one line every key gets; no hand-written
range check of a config key is left in the package."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
from conftest import run_cli, tiny_config, write_config
from hypothesis import given
from hypothesis import strategies as st

from lit_fl.constraints import Bounds, Fraction, PositiveInt, UnitInterval, bounds_of
from lit_fl.errors import ConfigError

PACKAGE = Path(__file__).resolve().parents[1] / "lit_fl"


@pytest.mark.parametrize(("bounds", "text", "inside", "outside"), [
    (Bounds(1), ">= 1", [1, 7], [0, -3]),
    (Bounds(0, low_open=True), "> 0", [1e-9, 3.0], [0.0, -1.0, math.nan]),
    (Bounds(0, 1), "in [0, 1]", [0.0, 1.0, 0.5], [-0.1, 1.01, math.nan]),
    (Bounds(0, 1, low_open=True), "in (0, 1]", [1.0, 0.01], [0.0, 2.0]),
    (Bounds(0, 1, high_open=True), "in [0, 1)", [0.0, 0.99], [1.0]),
])
def test_a_range_says_what_it_allows_and_refuses_what_lies_outside(bounds: Bounds, text: str, inside: list,
                                                                    outside: list) -> None:
    assert bounds.describe() == text == repr(bounds)
    for value in inside:
        bounds.check("k", value)
    for value in outside:
        with pytest.raises(ConfigError, match=rf"^k must be {re.escape(text)}, got {re.escape(str(value))}$"):
            bounds.check("k", value)
    bounds.check("k", None)  # an unset optional key


@given(st.floats(allow_nan=True, allow_infinity=True))
def test_unit_interval_holds_exactly_on_zero_to_one(value: float) -> None:
    assert bounds_of(UnitInterval).holds(value) == (0.0 <= value <= 1.0)


def test_optional_constrained_types_are_found() -> None:
    assert bounds_of(PositiveInt | None) == Bounds(1) and bounds_of(Fraction).low_open and bounds_of(int) is None


@pytest.mark.parametrize(("build", "message"), [
    ("DFML(temperature=0)", "algorithm.temperature must be > 0, got 0"),
    ("DFML(alpha_max=1.5)", "algorithm.alpha_max must be in [0, 1], got 1.5"),
    ("FedORION(client_fraction=0)", "algorithm.client_fraction must be in (0, 1], got 0"),
    ("FedORION(server_lr=0)", "algorithm.server_lr must be > 0, got 0"),
    ("Local(lr_decay=1.5)", "algorithm.lr_decay must be in (0, 1], got 1.5"),
    ("DecentralizedFedProx(mu=float('nan'))", "algorithm.mu must be >= 0, got nan"),
    ("UAPDFL(eps=1.0)", "algorithm.eps must be in (0, 1), got 1.0"),
    ("PeriodicCodist(decay_rounds=0)", "algorithm.decay_rounds must be >= 1 (or null for a constant rate), got 0"),
    ("DFML(momentum=1.0)", "algorithm.momentum must be in [0, 1), got 1.0"),
])
def test_a_method_built_from_python_checks_its_typed_ranges(build: str, message: str) -> None:
    import lit_fl.algorithms as algorithms

    with pytest.raises(ConfigError) as info:
        eval(build, vars(algorithms))  # noqa: S307 - the test's own expressions
    assert str(info.value) == message


@pytest.mark.parametrize(("flag", "message"), [
    (("--algorithm.init_args.sender_fraction", "0"), "algorithm.sender_fraction must be in (0, 1], got 0.0"),
    (("--data.val_fraction", "1"), "data.val_fraction must be in [0, 1), got 1.0"),
    (("--faults.drop_prob", "2"), "faults.drop_prob must be in [0, 1], got 2.0"),
    (("--trainer.devices", "0"), "trainer.devices must be >= 1, got 0"),
    (("--rounds", "0"), "rounds must be >= 1, got 0"),
])
def test_the_command_line_gives_the_same_line(tmp_path: Path, flag: tuple[str, str], message: str) -> None:
    cfg = write_config(tmp_path / "c.yaml", tiny_config(rounds=1))
    result = run_cli("fit", "--config", cfg, "--run_dir", tmp_path / "runs", *flag)
    assert result.rc == 2 and result.err.strip() == f"lit-fl: error: {message}"
    assert not (tmp_path / "runs").exists()


#: range checks that are not a config key's rule: arguments of internal functions and steps (bugs keep their
#: traceback), a key whose value is a number OR a list, and a value that depends on another key
NOT_KEY_RULES = {
    "cli_errors.py", "data/partition.py", "data/batches.py", "steps/distillation.py", "steps/deep_mutual_learning.py",
    "steps/aux_proximal_training.py", "steps/noise_distillation.py", "steps/noise.py",
    "commands/compare.py:--target",
    "algorithms/criticalfl.py:min_peers",
    "steps/target_distillation.py", "steps/not_true_distillation.py",
    "algorithms/dsfl.py:the", "algorithms/fdmeta_logits.py:aggregate_logits",
    "system/traces.py",  # the values inside a trace file, not config keys
}


def test_no_hand_written_range_check_of_a_config_key_is_left() -> None:
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "constraints.py":
            continue
        for line in path.read_text().splitlines():
            if re.search(r"must be (>|<|in [\[(])", line) and ("Error(" in line or line.strip().startswith('f"')):
                key = re.search(r'"([\w.\-]+)', line)
                tag = f"{rel}:{key.group(1).split('.')[-1] if key else ''}"
                if rel not in NOT_KEY_RULES and tag not in NOT_KEY_RULES:
                    found.append(f"{tag}: {line.strip()}")
    assert not found, "\n".join(found)
