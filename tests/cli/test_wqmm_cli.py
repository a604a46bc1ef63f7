"""The weight_quant_matmul CLI entry: its acceptance rule and its modes (serial, no ranks)."""

from __future__ import annotations

import ml_dtypes
import numpy as np

from mc2emu.cli.operators.weight_quant_matmul import SPEC, WqmmMode, compare, empty_tail_tiling

BF16 = np.dtype(ml_dtypes.bfloat16)


def test_compare_allows_cancelled_outputs_not_errors_at_scale():
    ref = np.array([[64.0, 0.001, -3.0]], dtype=BF16)
    near_zero_off = np.array([[64.0, 0.1, -3.0]], dtype=BF16)  # within one ULP of |64| (0.5)
    assert compare(near_zero_off, ref).ok
    two_ulps_at_max = ref.copy()
    two_ulps_at_max.view(np.uint16)[0, 0] += 2
    res = compare(two_ulps_at_max, ref)
    assert not res.ok and res.max_ulp == 2
    assert not compare(ref.astype(np.float16), ref).ok  # dtype mismatch


def test_modes_cover_every_weight_dtype_and_isolation_mode():
    modes = SPEC.modes
    assert {m.weight.value for m in modes} == {"int8", "float8_e4m3fn", "float8_e5m2"}
    assert {m.isolate.value for m in modes} == {"full", "a_only_mmad", "dequant_only"}
    assert {m.trans_b for m in modes} == {False, True}
    assert SPEC.expectation(WqmmMode(empty_tail=True)).hazard_names == {"UNCONSUMED_FLAG"}
    assert empty_tail_tiling(1024) == {"baseN": 32, "nBaseTailSplitCnt": 2, "nTailMain": 64}
