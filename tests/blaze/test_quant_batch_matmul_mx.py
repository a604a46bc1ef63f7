"""mc2emu.ops.quant_batch_matmul_mx_op end to end (tiling -> AIC_ONLY launch -> C) against its CANN golden."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from blaze_cases import st_operands

from mc2emu.blaze import QbmmMxRevision
from mc2emu.numerics import ag_compare, bf16_ulp_distance, encode_elements
from mc2emu.ops import golden_quant_batch_matmul_mx, quant_batch_matmul_mx
from mc2emu.runtime import ConstraintError, HazardError

BF16 = np.dtype(ml_dtypes.bfloat16)


def call(ops, **kw):
    return quant_batch_matmul_mx(ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, trans_a=ops.trans_a,
                                 trans_b=ops.trans_b, x1_format=ops.fa, x2_format=ops.fb, **kw)


def gold(ops, **kw):
    return golden_quant_batch_matmul_mx(ops.x1, ops.x1_scale, ops.x2, ops.x2_scale, trans_a=ops.trans_a,
                                        trans_b=ops.trans_b, x1_format=ops.fa, x2_format=ops.fb, **kw)


@pytest.mark.parametrize(("m", "n", "k", "trans_a", "trans_b"), [
    (37, 301, 3584, False, True),
    (300, 45, 640, False, False),
    (96, 130, 70, True, True),
    (1, 16, 64, False, False),
])
def test_st_data_matches_golden(m, n, k, trans_a, trans_b):
    ops = st_operands(m, n, k, trans_a=trans_a, trans_b=trans_b)
    c = call(ops)
    assert c.dtype == BF16 and c.shape == (m, n)
    assert ag_compare(c, gold(ops)), bf16_ulp_distance(c, gold(ops))


def test_result_is_independent_of_block_dim():
    """Tail splits, merged edges and core counts change who computes a tile, never its K order."""
    ops = st_operands(200, 330, 384, trans_b=True)
    ref = call(ops, block_dim=32)
    for bd in (1, 2, 3, 7, 13, 24):
        np.testing.assert_array_equal(call(ops, block_dim=bd).view(np.uint16), ref.view(np.uint16))
    assert ag_compare(ref, gold(ops))


@pytest.mark.parametrize(("fa", "fb"), [("e5m2", "e5m2"), ("e4m3", "e5m2"), ("e2m1", "e2m1"), ("e1m2", "e1m2")])
def test_formats(fa, fb):
    ops = st_operands(40, 64, 256, fa, fb, trans_b=True)
    assert ag_compare(call(ops), gold(ops))


@pytest.mark.parametrize("out_dtype", ["float16", "float32"])
def test_bias_and_output_types(out_dtype):
    ops = st_operands(33, 48, 192)
    bias = np.random.default_rng(2).uniform(-10, 10, 48).astype(np.float32)
    c = call(ops, bias=bias, out_dtype=out_dtype)
    g = gold(ops, bias=bias, out_dtype=out_dtype)
    assert c.dtype == np.dtype(out_dtype)
    np.testing.assert_allclose(c.astype(np.float64), g.astype(np.float64), rtol=2e-3 if out_dtype == "float16"
                               else 1e-6)


def batched(batch_a, batch_b, m, n, k, seed=0, same_scales=False):
    """ST-style batched operands: x1 (batch_a..., m, k), x2 (batch_b..., k, n) with their own scales."""
    rng = np.random.default_rng(seed)

    def elems(shape):
        return encode_elements(rng.uniform(1, 8, shape).astype(np.float32), "e4m3").view(ml_dtypes.float8_e4m3fn)

    def scales(shape):
        if same_scales:
            one = (rng.integers(0, 2, shape[-3:]) + 127).astype(np.uint8)
            return np.broadcast_to(one, shape).copy().view(ml_dtypes.float8_e8m0fnu)
        return (rng.integers(0, 2, shape) + 127).astype(np.uint8).view(ml_dtypes.float8_e8m0fnu)

    pairs = -(-k // 64)
    x1, x2 = elems((*batch_a, m, k)), elems((*batch_b, k, n))
    s1, s2 = scales((*batch_a, m, pairs, 2)), scales((*batch_b, pairs, n, 2))
    return x1, s1, x2, s2


@pytest.mark.parametrize(("batch_a", "batch_b"), [((3,), (3,)), ((2, 1), (1, 3)), ((4,), ()), ((2, 1, 2), (2, 2, 1)),
                                                  ((1, 2, 1, 2), (2, 1, 2, 1))])
def test_batch_broadcast_later_revision(batch_a, batch_b):
    x1, s1, x2, s2 = batched(batch_a, batch_b, 24, 40, 128)
    c = quant_batch_matmul_mx(x1, s1, x2, s2, revision=QbmmMxRevision.CC21C0D6, block_dim=8)
    g = golden_quant_batch_matmul_mx(x1, s1, x2, s2)
    assert c.shape == g.shape == (*np.broadcast_shapes(batch_a, batch_b), 24, 40)
    assert ag_compare(c, g)


def test_default_revision_reads_batch_zero_scales():
    """R106B970C does not advance the scale addresses per batch (reproduced): with per-batch scales C equals
    the golden computed with batch 0's scales everywhere; with batch-uniform scales it matches outright."""
    x1, s1, x2, s2 = batched((3,), (3,), 20, 36, 128, seed=1)
    with pytest.raises(HazardError) as err:
        quant_batch_matmul_mx(x1, s1, x2, s2, block_dim=5)
    assert err.value.names() == {"SCALE_BATCH_OFFSET_MISSING"}
    c = err.value.output
    g0 = golden_quant_batch_matmul_mx(x1, np.broadcast_to(s1[:1], s1.shape), x2, np.broadcast_to(s2[:1], s2.shape))
    assert ag_compare(c, g0)
    assert not ag_compare(c, golden_quant_batch_matmul_mx(x1, s1, x2, s2))
    x1, s1, x2, s2 = batched((3,), (3,), 20, 36, 128, seed=1, same_scales=True)
    assert ag_compare(quant_batch_matmul_mx(x1, s1, x2, s2, block_dim=5), golden_quant_batch_matmul_mx(x1, s1, x2, s2))


def test_three_dim_bias():
    """Bias comparable to C (|bias| up to the size of C, a different sign pattern per batch), so a dropped,
    doubled or batch-swapped bias moves C by far more than the compare rule's 1 bf16 ULP; the test checks
    its own sensitivity on the golden."""
    x1, s1, x2, s2 = batched((2,), (2,), 16, 32, 64, same_scales=True)
    plain = golden_quant_batch_matmul_mx(x1, s1, x2, s2).astype(np.float32)
    rng = np.random.default_rng(4)
    bias = (rng.uniform(0.25, 1.0, (2, 1, 32)) * rng.choice([-1, 1], (2, 1, 32)) * np.abs(plain).max()).astype(
        np.float32)
    c = quant_batch_matmul_mx(x1, s1, x2, s2, bias=bias, block_dim=4)
    assert ag_compare(c, golden_quant_batch_matmul_mx(x1, s1, x2, s2, bias=bias))
    for wrong in (None, 2 * bias, bias[::-1].copy(), np.broadcast_to(bias[:1], bias.shape).copy()):
        assert not ag_compare(c, golden_quant_batch_matmul_mx(x1, s1, x2, s2, bias=wrong))


def test_atomic_single_batch_accumulates_onto_c_init_in_float():
    """SetAtomicAdd<float> (the source's, whatever CType) over a float32 C: each write-out adds in float."""
    ops = st_operands(32, 64, 128)
    c0 = np.random.default_rng(9).uniform(-64, 64, (32, 64)).astype(np.float32)
    c = call(ops, atomic=True, c_init=c0, out_dtype="float32")
    np.testing.assert_allclose(c, c0 + gold(ops, out_dtype="float32"), rtol=1e-6)
    assert not np.allclose(c, gold(ops, out_dtype="float32"), rtol=1e-6)     # c_init was added


def test_atomic_float_over_a_bf16_c_is_reported_and_adds_float_words():
    """QBMM's SetAtomicAdd<float> with a bf16 C: the fixpipe writes bf16, the atomic unit adds float words
    over those bytes (two bf16 elements per word): ATOMIC_DTYPE_MISMATCH on every AIC that wrote, naming
    the rank, the core, C's byte range and both types; C is the float-word sum, neither bf16 sum."""
    ops = st_operands(32, 64, 128)
    c0 = np.random.default_rng(9).uniform(-64, 64, (32, 64)).astype(BF16)
    plain = call(ops, block_dim=2)                                    # what the fixpipe writes
    assert ag_compare(plain, gold(ops))
    with pytest.raises(HazardError) as err:
        call(ops, atomic=True, c_init=c0, block_dim=2)
    assert err.value.names() == {"ATOMIC_DTYPE_MISMATCH"}
    cores = {r.core for r in err.value.hazards}
    assert cores and all(c.startswith("AIC") for c in cores)
    for rep in err.value.hazards:
        assert rep.rank == 0
        assert "SetAtomicAdd<float> while the write-out to 'y' bytes [0x" in rep.message
        assert "is bfloat16_t: the atomic unit adds float words over bfloat16_t data" in rep.message
        assert 0 <= rep.details["lo"] < rep.details["hi"] <= c0.nbytes
        assert (rep.details["atomic"], rep.details["written"]) == ("float32", "bfloat16")
    words = (c0.view(np.float32).astype(np.float32) + plain.view(np.float32)).astype(np.float32)
    np.testing.assert_array_equal(err.value.output.view(np.uint16), words.view(np.uint16))
    bf16_sum = (c0.astype(np.float32) + plain.astype(np.float32)).astype(BF16)
    assert not ag_compare(err.value.output, bf16_sum)


def test_atomic_multi_batch_leaks_the_atomic_mode_in_the_default_revision():
    x1, s1, x2, s2 = batched((2,), (2,), 16, 32, 64, same_scales=True)
    want = golden_quant_batch_matmul_mx(x1, s1, x2, s2, out_dtype="float32")
    with pytest.raises(HazardError) as err:
        quant_batch_matmul_mx(x1, s1, x2, s2, atomic=True, block_dim=4, out_dtype="float32")
    assert err.value.names() == {"ATOMIC_LEFT_SET"}
    np.testing.assert_allclose(err.value.output, want, rtol=1e-6)  # the numbers are right
    c = quant_batch_matmul_mx(x1, s1, x2, s2, atomic=True, block_dim=4, revision=QbmmMxRevision.CC21C0D6,
                              out_dtype="float32")
    np.testing.assert_allclose(c, want, rtol=1e-6)
    c = quant_batch_matmul_mx(x1, s1, x2, s2, atomic=True, block_dim=4, check=False, out_dtype="float32")
    np.testing.assert_allclose(c, want, rtol=1e-6)     # reports off: result only


@pytest.mark.parametrize(("kwargs", "rule"), [
    ({"x2": "k_mismatch"}, "x1.k == x2.k"),
    ({"x1_scale": "bad_shape"}, "x1_scale.shape"),
    ({"x1": "float32"}, "x1.dtype"),
    ({"bias": "bad_shape"}, "bias.shape"),
    ({"out_dtype": "int8"}, "out_dtype"),
    ({"x1": "batch"}, "batch broadcast"),
    ({"x1": "fp4_odd_k"}, "can_implement"),
])
def test_bad_inputs_name_the_rule(kwargs, rule):
    ops = st_operands(16, 32, 64)
    args = {"x1": ops.x1, "x1_scale": ops.x1_scale, "x2": ops.x2, "x2_scale": ops.x2_scale}
    extra = {}
    (what, how), = kwargs.items()
    if how == "k_mismatch":
        args["x2"] = st_operands(16, 32, 128).x2
    elif how == "bad_shape" and what == "x1_scale":
        args["x1_scale"] = ops.x1_scale[:8]
    elif how == "float32":
        args["x1"] = ops.x1.astype(np.float32)
    elif how == "bad_shape":
        extra["bias"] = np.zeros(31, np.float32)
    elif how == "int8":
        extra["out_dtype"] = "int8"
    elif how == "batch":
        x1, s1, x2, s2 = batched((2,), (3,), 16, 32, 64)
        args = {"x1": x1, "x1_scale": s1, "x2": x2, "x2_scale": s2}
    elif how == "fp4_odd_k":
        f4 = st_operands(16, 32, 62, "e2m1")
        odd = np.zeros((16, 61), ml_dtypes.float4_e2m1fn)
        args = {"x1": odd, "x1_scale": f4.x1_scale, "x2": np.zeros((61, 32), ml_dtypes.float4_e2m1fn),
                "x2_scale": f4.x2_scale}
    with pytest.raises(ConstraintError, match=rule):
        quant_batch_matmul_mx(args["x1"], args["x1_scale"], args["x2"], args["x2_scale"], **extra)
