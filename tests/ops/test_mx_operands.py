"""The input rules the MX matmul entries share (mc2emu.ops.mx_operands): each broken rule named, with what
was given; the formats that parsed; shapes readable only when the ranks are right."""

import ml_dtypes
import numpy as np

from mc2emu.numerics import ElemFormat
from mc2emu.ops.mx_operands import mx_operand_violations

F8 = ml_dtypes.float8_e4m3fn
E8M0 = ml_dtypes.float8_e8m0fnu


def operands(x1=F8, s1=E8M0, x2=F8, s2=E8M0):
    return (np.zeros((4, 64), x1), np.zeros((4, 1, 2), s1), np.zeros((8, 64), x2), np.zeros((8, 1, 2), s2))


def test_valid_operands_break_no_rule():
    elems, errs, ranks_ok = mx_operand_violations(*operands(x2=ml_dtypes.float8_e5m2))
    assert (elems, errs, ranks_ok) == ([ElemFormat.E4M3, ElemFormat.E5M2], [], True)
    assert mx_operand_violations(*operands(s1=np.uint8))[1] == []      # E8M0 as its uint8 codes


def test_each_broken_rule_is_named_with_what_was_given():
    elems, errs, ranks_ok = mx_operand_violations(*operands(x1=np.float16, s2=np.float32), why="(FP8 only)")
    assert elems == [ElemFormat.E4M3] and ranks_ok
    assert errs == [("x1 dtype", "x1 must be float8_e4m3fn or float8_e5m2 (FP8 only), got float16"),
                    ("x2_scale dtype", "x2_scale must be float8_e8m0fnu (or its uint8 codes), got float32")]
    fp4 = ml_dtypes.float4_e2m1fn
    _, errs, _ = mx_operand_violations(*operands(x1=fp4))
    assert errs == [("x1 dtype", "x1 must be float8_e4m3fn or float8_e5m2, got float4_e2m1fn")]
    allowed = (ElemFormat.E4M3, ElemFormat.E5M2, ElemFormat.E2M1)
    elems, errs, _ = mx_operand_violations(*operands(x1=fp4), elems=allowed)
    assert errs == [] and elems == [ElemFormat.E2M1, ElemFormat.E4M3]


def test_wrong_ranks_stop_the_shape_rules():
    x1, s1, x2, s2 = operands()
    _, errs, ranks_ok = mx_operand_violations(x1[0], s1, x2, s2[0])
    assert not ranks_ok
    assert errs == [("shapes", "x1 and x2 must be 2-D, the scales 3-D; got (64,), (8, 64), (4, 1, 2), (1, 2)")]
