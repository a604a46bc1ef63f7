"""Every operator's CLI comparison: the shared part (no golden, another shape, the max abs error with NaN
never hidden) and that each operator's own rule passes its golden and fails a planted error."""

import ml_dtypes
import numpy as np
import pytest

from mc2emu.cli.operators import OPERATOR_MODULES, load_spec
from mc2emu.cli.scenarios import comparison_refused
from mc2emu.numerics.compare import max_abs_error

SPECS = {spec.name: spec for spec in map(load_spec, OPERATOR_MODULES) if spec.name != "selfcheck"}


def test_refusals_name_what_is_missing():
    assert comparison_refused(np.zeros(3), None).note == "no golden"
    refused = comparison_refused(np.zeros((2, 3)), np.zeros((3, 2)))
    assert not refused.ok and refused.note == "output shape (2, 3), golden (3, 2)"
    assert comparison_refused(np.zeros((2, 3)), np.ones((2, 3))) is None


def test_max_abs_error_never_hides_a_nan():
    ref = np.array([1.0, 2.0, np.nan], dtype=np.float32)
    assert max_abs_error(np.array([1.5, 2.0, np.nan], dtype=np.float32), ref) == 0.5
    assert np.isnan(max_abs_error(np.array([np.nan, 2.0, np.nan], dtype=np.float32), ref))
    assert np.isnan(max_abs_error(np.array([1.0, 2.0, 3.0], dtype=np.float32), ref))
    assert max_abs_error(np.zeros((0, 4)), np.zeros((0, 4))) == 0.0


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_rule_passes_its_golden_and_fails_a_planted_error(name):
    compare = SPECS[name].compare
    rng = np.random.default_rng(7)
    ref = rng.uniform(1, 4, size=(16, 8)).astype(ml_dtypes.bfloat16)
    same = compare(ref.copy(), ref)
    assert same.ok and same.max_abs == 0.0 and same.max_ulp in (0, None), (name, same)
    planted = ref.copy()
    planted[3, 5] = planted[3, 5] * 2
    bad = compare(planted, ref)
    assert not bad.ok and bad.max_abs == pytest.approx(float(ref[3, 5]), rel=1e-2), (name, bad)
    nan = ref.copy()
    nan[0, 0] = np.nan
    assert not compare(nan, ref).ok and np.isnan(compare(nan, ref).max_abs), name
    assert not compare(ref[:, :4], ref).ok, name
    assert compare(ref, None).note == "no golden", name
