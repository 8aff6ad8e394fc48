"""Issue 36's acceptance record: every shipped ``experiments/mnist5k/*.yaml`` method's 3-round run writes the same
``metrics.csv`` (timings aside) and the same final state, tensor for tensor, as main did before the refactor
(991b717, recorded by ``tests/equivalence/record.py`` per CPU capability in ``tests/equivalence/reference.json.gz``).
A difference the refactor means to make is re-recorded and listed in its note, never tolerated here."""

from __future__ import annotations

from pathlib import Path

import pytest
from equivalence.record import CONFIGS, capability, first_difference, load_reference, run_config

REFERENCE = load_reference()


@pytest.mark.slow
@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.stem)
def test_three_rounds_equal_the_record(path: Path) -> None:
    records = REFERENCE.get(capability())
    if records is None:
        pytest.skip(f"no record for CPU capability {capability()} (recorded: {', '.join(REFERENCE)}); run "
                    f"ATEN_CPU_CAPABILITY={capability().lower()} python tests/equivalence/record.py on main before "
                    "issue 36's refactor (the commit that added tests/equivalence/)")
    if path.stem not in records:
        pytest.skip(f"{path.stem}: added after the record, nothing to compare with")
    difference = first_difference(path.stem, records[path.stem], run_config(path))
    assert difference is None, difference


def test_every_recorded_config_is_still_shipped() -> None:
    """A config renamed or removed by the refactor would otherwise leave its record silently unchecked."""
    shipped = {path.stem for path in CONFIGS}
    for name, records in REFERENCE.items():
        assert set(records) <= shipped, f"{name}: recorded but no longer shipped: {sorted(set(records) - shipped)}"
