"""No input crashes the serial operator entries (`quant_batch_matmul_mx`, `grouped_matmul_mx`,
`weight_quant_matmul`): random shapes (0, 1, odd, large), formats, layouts, scale shapes, group lists,
keywords and wrong-dtype / non-contiguous arrays. Each call returns and meets its golden, or raises a
ConstraintError naming a rule (`property_cases.call_or_refusal`); tiny shapes keep a call at milliseconds."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from property_cases import (
    CALL_TIMEOUT_S,
    assert_meets_golden,
    call_or_refusal,
    elements,
    mangle,
    mangling,
    preserves_values,
    prop_settings,
    scales,
    typed,
)

from mc2emu.arch.errors import ConstraintError
from mc2emu.numerics import ElemFormat
from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE
from mc2emu.ops import (
    golden_grouped_matmul_mx,
    golden_quant_batch_matmul_mx,
    golden_weight_quant_matmul,
    grouped_matmul_mx,
    quant_batch_matmul_mx,
    weight_quant_matmul,
)
from mc2emu.runtime.hazards import HazardError

FORMATS = list(ElemFormat)
small = st.sampled_from([0, 1, 2, 3, 15, 16, 17, 33])
small_k = st.sampled_from([0, 1, 2, 31, 32, 63, 64, 65, 96, 128, 130, 192])
block_dims = st.sampled_from([None] * 6 + [1, 3, 32, 0, -1, 33, 2.0, True])
out_dtypes = st.sampled_from(["bfloat16", "float16", "float32", "int8", "bogus"])
# The source's multi-batch atomic path never calls SetAtomicNone (SPEC §5, seed 004): reported, output right.
QBMM_SOURCE_HAZARDS = {"ATOMIC_LEFT_SET"}
# Revision 106b970c's AddBatchOffset does not advance the scales (fixed in cc21c0d6): reported, and the output is
# the source's (batch 0's scales), not the golden's.
# SetAtomicAdd<float> over a bf16 / fp16 C (the source's compile-time atomic type): float words added over 16-bit
# data, reported; neither sum.
QBMM_SOURCE_WRONG_NUMBERS = {"SCALE_BATCH_OFFSET_MISSING", "ATOMIC_DTYPE_MISMATCH"}


def pairs(k: int) -> int:
    return -(-k // MXFP_DIVISOR_SIZE)


# --- quant_batch_matmul_mx ------------------------------------------------------------------------------------
@st.composite
def qbmm_calls(draw):
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    m, n, k = draw(small), draw(small), draw(small_k)
    fa = draw(st.sampled_from(FORMATS))
    fb = fa if draw(st.booleans()) else draw(st.sampled_from(FORMATS))
    ta, tb = draw(st.booleans()), draw(st.booleans())
    batch_a = tuple(draw(st.lists(st.sampled_from([1, 2]), max_size=2)))
    batch_b = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), max_size=2)))
    a = elements(rng, (*batch_a, *((k, m) if ta else (m, k))), fa)
    b = elements(rng, (*batch_b, *((n, k) if tb else (k, n))), fb)
    sa_shape = (*batch_a, pairs(k), m, 2) if ta else (*batch_a, m, pairs(k), 2)
    sb_shape = (*batch_b, n, pairs(k), 2) if tb else (*batch_b, pairs(k), n, 2)
    if draw(st.integers(0, 5)) == 0:  # a wrong scale shape
        sa_shape = draw(st.sampled_from([sa_shape[:-1], (*sa_shape[:-1], 1), (m + 1, pairs(k), 2), (m, k, 2)]))
    sa, sb = scales(rng, sa_shape), scales(rng, sb_shape)
    a_in, a_fmt = typed(a, fa, draw(st.booleans()))
    b_in, b_fmt = typed(b, fb, draw(st.booleans()))
    how = {p: draw(mangling()) if draw(st.integers(0, 3)) == 0 else "same" for p in ("x1", "x1_scale", "x2")}
    kw = dict(trans_a=ta, trans_b=tb, x1_format=a_fmt, x2_format=b_fmt)
    bias_kind = draw(st.sampled_from([None, None, "n", "1n", "bn", "wrong", "int"]))
    bias = None
    if bias_kind is not None:
        shape = {"n": (n,), "1n": (1, n), "bn": (2, 1, n), "wrong": (n + 1,), "int": (n,)}[bias_kind]
        bias = rng.choice(np.array([0.0, 1.0, -2.5], dtype=np.float32), size=shape)
        if bias_kind == "int":
            bias = bias.astype(np.int32)
    call_kw = dict(kw, bias=bias, out_dtype=draw(out_dtypes), block_dim=draw(block_dims),
                   atomic=draw(st.sampled_from([False, False, True])),
                   revision=draw(st.sampled_from(["106b970c", "cc21c0d6", "nope"])))
    return (mangle(a_in, how["x1"]), mangle(sa, how["x1_scale"]), mangle(b_in, how["x2"]), sb, call_kw,
            all(preserves_values(h) for h in how.values()), (a_in, sa, b_in, sb))


def _qbmm_check(case) -> None:
    x1, s1, x2, s2, kw, faithful, originals = case
    try:
        out, err = call_or_refusal(quant_batch_matmul_mx, x1, s1, x2, s2, timeout=CALL_TIMEOUT_S, **kw)
    except HazardError as exc:
        names = {h.hazard.value for h in exc.hazards}
        assert names <= QBMM_SOURCE_HAZARDS | QBMM_SOURCE_WRONG_NUMBERS, exc
        if "SCALE_BATCH_OFFSET_MISSING" in names:
            assert kw["revision"] == "106b970c", exc
        if "ATOMIC_DTYPE_MISMATCH" in names:
            assert kw["atomic"] and kw["out_dtype"] != "float32", exc
        if names & QBMM_SOURCE_WRONG_NUMBERS:
            return
        out, err = exc.output, None
    if err is not None:
        return
    assert faithful, "a wrong-dtype operand ran"
    gkw = {k: kw[k] for k in ("trans_a", "trans_b", "x1_format", "x2_format", "bias", "out_dtype")}
    golden = golden_quant_batch_matmul_mx(*originals, **gkw)
    if kw["atomic"]:  # accumulated onto zeros: the same numbers
        golden = golden.astype(out.dtype)
    assert_meets_golden(out, golden)


@prop_settings(60)
@given(qbmm_calls())
def test_quant_batch_matmul_mx_runs_or_refuses(case) -> None:
    _qbmm_check(case)


# --- grouped_matmul_mx ----------------------------------------------------------------------------------------
@st.composite
def gmm_calls(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    split_k = draw(st.booleans())
    g = draw(st.sampled_from([0, 1, 2, 3]))
    sizes = draw(st.lists(st.sampled_from([0, 0, 1, 3, 16, 33, 64, 128]), min_size=g, max_size=g))
    glt = draw(st.sampled_from(["cumsum", "count", "sparse", "bogus"]))
    m, n = draw(small), draw(small)
    k = draw(small_k)
    if split_k:
        k = draw(st.sampled_from([0, 64, 128, 192, sum(sizes), sum(sizes) + 64]))
    elif draw(st.booleans()):
        m = sum(sizes)
    fx = draw(st.sampled_from(FORMATS))
    fw = fx if draw(st.booleans()) else draw(st.sampled_from(FORMATS))
    ta = split_k if draw(st.integers(0, 5)) else not split_k
    tb = draw(st.booleans())
    x = elements(rng, (k, m) if ta else (m, k), fx)
    if split_k:
        kp = k // MXFP_DIVISOR_SIZE + g
        w = elements(rng, (n, k) if tb else (k, n), fw)
        sx, sw = scales(rng, (kp, m, 2)), scales(rng, (n, kp, 2) if tb else (kp, n, 2))
    else:
        w = elements(rng, (g, n, k) if tb else (g, k, n), fw)
        sx = scales(rng, (m, pairs(k), 2))
        sw = scales(rng, (g, n, pairs(k), 2) if tb else (g, pairs(k), n, 2))
    if draw(st.integers(0, 6)) == 0:
        sw = scales(rng, (*sw.shape[:-1], 1))
    if glt == "cumsum":
        gl = np.cumsum(np.asarray(sizes, dtype=np.int64))
    elif glt == "sparse":
        gl = np.asarray([[draw(st.integers(-1, g)), s] for s in sizes], dtype=np.int64).reshape(g, 2)
    else:
        gl = np.asarray(sizes, dtype=np.int64)
    gl_how = draw(st.sampled_from(["same", "same", "same", "float", "int32", "2d", "neg"]))
    if gl_how == "float":
        gl = gl.astype(np.float32)
    elif gl_how == "int32":
        gl = gl.astype(np.int32)
    elif gl_how == "2d" and glt != "sparse":
        gl = gl.reshape(-1, 1)
    elif gl_how == "neg" and gl.size:
        gl = gl.copy()
        gl.flat[0] = -1
    x_in, x_fmt = typed(x, fx, draw(st.booleans()))
    w_in, w_fmt = typed(w, fw, draw(st.booleans()))
    how = draw(mangling()) if draw(st.integers(0, 3)) == 0 else "same"
    bias = None
    if draw(st.integers(0, 4)) == 0:
        bias = np.ones((g, n), dtype=draw(st.sampled_from([np.float32, np.float16])))
    kw = dict(group_type="split_k" if split_k else draw(st.sampled_from(["split_m", "split_m", "split_n"])),
              group_list_type=glt, trans_a=ta, trans_b=tb, out_dtype=draw(out_dtypes), bias=bias,
              block_dim=draw(block_dims), x_format=x_fmt, weight_format=w_fmt,
              variant=draw(st.sampled_from(["cgmct", "blaze", "blaze_sample", "catlass"])))
    return mangle(x_in, how), sx, w_in, sw, gl, kw, preserves_values(how), (x_in, sx, w_in, sw, gl)


def _gmm_check(case) -> None:
    x, sx, w, sw, gl, kw, faithful, originals = case
    out, err = call_or_refusal(grouped_matmul_mx, x, sx, w, sw, gl, timeout=CALL_TIMEOUT_S, **kw)
    if err is not None:
        return
    assert faithful, "a wrong-dtype operand ran"
    if kw["group_type"] == "split_k" and 0 in out.shape[1:]:
        # M or N 0: the framework returns the empty y [g, M, N] before any tiling or check (TQ:1107)
        assert out.shape[0] == np.shape(gl)[0] and out.size == 0
        return
    golden = golden_grouped_matmul_mx(*originals, group_type=kw["group_type"], group_list_type=kw["group_list_type"],
                                      trans_b=kw["trans_b"], bias=kw["bias"], out_dtype=kw["out_dtype"],
                                      x_format=kw["x_format"], weight_format=kw["weight_format"])
    assert_meets_golden(out, golden)


@prop_settings(80)
@given(gmm_calls())
def test_grouped_matmul_mx_runs_or_refuses(case) -> None:
    _gmm_check(case)


# --- weight_quant_matmul --------------------------------------------------------------------------------------
WQ_X = {"bfloat16": ml_dtypes.bfloat16, "float16": np.float16, "float32": np.float32}
WQ_W = {"int8": np.int8, "e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "uint8": np.uint8,
        "int16": np.int16}


@st.composite
def wqmm_calls(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    m, n = draw(small), draw(st.sampled_from([0, 1, 15, 16, 32, 48, 33]))
    k = draw(st.sampled_from([0, 1, 15, 16, 32, 48, 64, 96]))
    tb = draw(st.booleans())
    xd = WQ_X[draw(st.sampled_from(["bfloat16", "bfloat16", "float16", "float32"]))]
    wd = WQ_W[draw(st.sampled_from(["int8", "int8", "e4m3", "e5m2", "uint8", "int16"]))]
    x = rng.choice(np.array([0.0, 1.0, -0.5, 2.0], dtype=np.float32), size=(m, k)).astype(xd)
    w = rng.choice(np.array([0.0, 1.0, -2.0, 3.0], dtype=np.float32), size=(n, k) if tb else (k, n)).astype(wd)
    sd = xd if draw(st.integers(0, 5)) else np.float32
    scale = rng.choice(np.array([0.5, 1.0, 2.0], dtype=np.float32), size=(n,)).astype(sd)
    offset = None
    if draw(st.booleans()):
        offset = rng.choice(np.array([0.0, 1.0, -1.0], dtype=np.float32),
                            size=draw(st.sampled_from([(n,), (n,), (n + 1,)]))).astype(xd)
    bias = None
    if draw(st.booleans()):
        bias = rng.choice(np.array([0.0, 0.5], dtype=np.float32), size=(n,)).astype(
            draw(st.sampled_from([np.float32, np.float32, np.float16])))
    how = draw(mangling()) if draw(st.integers(0, 3)) == 0 else "same"
    x_in = mangle(x, how) if how in ("same", "strided", "fortran") else x.astype(np.float64)
    kw = dict(trans_b=tb, bias=bias, out_dtype=draw(st.sampled_from([None, None, "float32", "bfloat16", "int8"])),
              mode=draw(st.sampled_from(["full", "full", "a_only_mmad", "dequant_only", "bogus"])),
              block_dim=draw(block_dims))
    return x_in, w, scale, offset, kw, preserves_values(how), x


def _wqmm_check(case) -> None:
    x_in, w, scale, offset, kw, faithful, x = case
    out, err = call_or_refusal(weight_quant_matmul, x_in, w, scale, offset, timeout=CALL_TIMEOUT_S, **kw)
    if err is not None:
        return
    assert faithful, "a wrong-dtype x ran"
    if kw["mode"] == "dequant_only":
        from mc2emu.ops import golden_weight_dequant
        golden = golden_weight_dequant(w, scale, offset, trans_b=kw["trans_b"])
        assert out.shape == golden.shape and out.dtype == golden.dtype
        np.testing.assert_array_equal(out.view(np.uint16), golden.view(np.uint16))
        return
    golden = golden_weight_quant_matmul(x, w, scale, offset, bias=kw["bias"], trans_b=kw["trans_b"],
                                        out_dtype=kw["out_dtype"])
    assert_meets_golden(out, golden)


@prop_settings(60)
@given(wqmm_calls())
def test_weight_quant_matmul_runs_or_refuses(case) -> None:
    _wqmm_check(case)


def test_the_contract_catches_a_builtin_error() -> None:
    """The harness itself: a builtin exception is not swallowed as a refusal."""
    def boom() -> None:
        raise ZeroDivisionError("x")
    with pytest.raises(ZeroDivisionError):
        call_or_refusal(boom)
    out, err = call_or_refusal(lambda: (_ for _ in ()).throw(ConstraintError("rule R", "why")))
    assert out is None and err is not None and err.rule == "rule R"


# --- the crash classes Hypothesis found, kept as plain regressions ----------------------------------------------
def _refused(fn, *args, **kw) -> ConstraintError:
    with pytest.raises(ConstraintError) as ei:
        fn(*args, timeout=CALL_TIMEOUT_S, **kw)
    return ei.value


def test_gmm_split_k_with_an_empty_group_list_is_refused() -> None:
    """Was an IndexError inside the kernel (CoreError on AIC0): split-K, g = 0, K 64."""
    rng = np.random.default_rng(0)
    x, w = elements(rng, (64, 17), ElemFormat.E5M2), elements(rng, (64, 1), ElemFormat.E4M3)
    err = _refused(grouped_matmul_mx, x, scales(rng, (1, 17, 2)), w, scales(rng, (1, 1, 2)),
                   np.zeros((0, 2), np.int64), group_type="split_k", group_list_type="sparse", trans_a=True,
                   x_format="e5m2", weight_format="e4m3")
    assert err.rule == "group_list: split-K g >= 1"


def test_gmm_scale_with_a_unit_dimension_is_refused() -> None:
    """Was a GmError (a read past the scale's allocation): the tiling's MX scale check skips a dimension of 1,
    so weight_scale (1, 1, 16, 1) for K 32 passed."""
    rng = np.random.default_rng(0)
    x, w = elements(rng, (64, 32), ElemFormat.E2M1), elements(rng, (1, 32, 16), ElemFormat.E2M1)
    err = _refused(grouped_matmul_mx, x, scales(rng, (64, 1, 2)), w, scales(rng, (1, 1, 16, 1)), np.array([64]),
                   x_format="e2m1", weight_format="e2m1")
    assert err.rule == "weight_scale.shape (MX layout)"


@pytest.mark.parametrize(("m", "n", "k", "trans_b"), [(33, 16, 15, True), (16, 112, 8192, False)])
def test_wqmm_tilings_whose_buffers_overlap_are_refused(m, n, k, trans_b) -> None:
    """Were wrong numbers (33 504 ULP; NaN rows): transB with k < 16 gives kL1 = k, not whole L1 fractals; a
    large K puts a UB half past its bound. Both were LAYOUT_OVERLAP warnings only."""
    x = np.ones((m, k), ml_dtypes.bfloat16)
    w = np.ones((n, k) if trans_b else (k, n), np.int8)
    err = _refused(weight_quant_matmul, x, w, np.ones(n, ml_dtypes.bfloat16), trans_b=trans_b)
    assert err.rule.startswith("tiling layout: ")


@pytest.mark.parametrize("name", ["all_to_all_quant_matmul", "all_gather_quant_matmul",
                                  "quant_matmul_reduce_scatter"])
def test_collective_entries_refuse_a_list_operand(name) -> None:
    """Was an AttributeError ('list' object has no attribute 'shape') in the entries' validation; here on
    MPI.COMM_SELF (refused before any launch)."""
    from mpi4py import MPI

    import mc2emu.ops as ops
    rng = np.random.default_rng(0)
    x1 = elements(rng, (16, 64), ElemFormat.E4M3).view(ml_dtypes.float8_e4m3fn)
    x2 = elements(rng, (16, 64), ElemFormat.E4M3).view(ml_dtypes.float8_e4m3fn)
    err = _refused(getattr(ops, name), x1, scales(rng, (16, 1, 2)).tolist(), x2, scales(rng, (16, 1, 2)),
                   comm=MPI.COMM_SELF)
    assert err.rule in ("x1_scale dtype", "operands are numpy arrays")
