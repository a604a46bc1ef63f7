"""ND <-> FRACTAL_NZ: exhaustive round trips, an independent index-loop reference, zero padding, the source's
storage shapes and the documentation's worked examples."""

import math

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import FP4_STORAGE_DTYPE, ElemFormat
from mc2emu.numerics.nz_format import (
    NzDtype,
    check_nz_weight_dims,
    nd_storage_shape,
    nd_to_nz,
    nd_to_nz_codes,
    nz_codes_to_nd,
    nz_padding_mask,
    nz_shape,
    nz_storage_shape,
    nz_to_nd,
)
from mc2emu.numerics.scale_layout import to_ascend_scale_b

K_RANGE = range(1, 41)
N_RANGE = range(1, 71)


def reference_nd_to_nz(codes: np.ndarray, c0: int) -> np.ndarray:
    """Element loops straight from the definition: ND (r, c) lands in column block c // c0, fractal r // 16,
    fractal row r % 16, C0 position c % c0; everything else stays 0."""
    rows, cols = codes.shape
    out = np.zeros((math.ceil(cols / c0), math.ceil(rows / 16), 16, c0), dtype=codes.dtype)
    for r in range(rows):
        for c in range(cols):
            out[c // c0, r // 16, r % 16, c % c0] = codes[r, c]
    return out


def reference_fp4_nd_to_nz(codes: np.ndarray) -> np.ndarray:
    """FP4: unpacked 4-bit codes (rows, cols) -> packed NZ bytes; element j of a C0 row sits in byte j // 2,
    low nibble for even j."""
    rows, cols = codes.shape
    out = np.zeros((math.ceil(cols / 64), math.ceil(rows / 16), 16, 32), dtype=np.uint8)
    for r in range(rows):
        for c in range(cols):
            j = c % 64
            out[c // 64, r // 16, r % 16, j // 2] |= int(codes[r, c]) << (4 * (j % 2))
    return out


def pack_rows(codes: np.ndarray) -> np.ndarray:
    """Independent FP4 packing of each row: byte i = code[2i] | code[2i+1] << 4."""
    return (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)


def test_round_trip_and_reference_every_shape_fp8_int8():
    """Every (k, n) in 1..40 x 1..70: e4m3, e5m2 and int8 against the loop reference, byte for byte."""
    rng = np.random.default_rng(0)
    for k in K_RANGE:
        for n in N_RANGE:
            codes = rng.integers(1, 256, (k, n), dtype=np.uint8)  # never 0: padding must be the only zeros
            ref = reference_nd_to_nz(codes, 32)
            for x, dt in (
                (codes.view(ml_dtypes.float8_e4m3fn), "e4m3"),
                (codes.view(ml_dtypes.float8_e5m2), ElemFormat.E5M2),
                (codes.view(np.int8), np.int8),
            ):
                nz = nd_to_nz(x, dt)
                assert nz.dtype == x.dtype
                assert nz.shape == nz_shape((k, n), dt) == (math.ceil(n / 32), math.ceil(k / 16), 16, 32)
                np.testing.assert_array_equal(nz.view(np.uint8), ref, err_msg=f"{dt} k={k} n={n}")
                back = nz_to_nd(nz, (k, n), dt)
                assert back.dtype == x.dtype
                np.testing.assert_array_equal(back.view(np.uint8), codes)


def test_round_trip_and_reference_every_shape_fp4():
    """Every k in 1..40 and even n in 2..70, e2m1 and e1m2 packed two per byte along n."""
    rng = np.random.default_rng(1)
    for k in K_RANGE:
        for n in range(2, 71, 2):
            codes = rng.integers(1, 16, (k, n), dtype=np.uint8)
            packed = pack_rows(codes)
            ref = reference_fp4_nd_to_nz(codes)
            for dt, x in (("e2m1", packed), ("e1m2", packed), (ElemFormat.E2M1, packed.view(FP4_STORAGE_DTYPE))):
                nz = nd_to_nz(x, dt)
                assert nz.dtype == x.dtype
                assert nz.shape == nz_storage_shape((k, n), dt) == (math.ceil(n / 64), math.ceil(k / 16), 16, 32)
                assert nz_shape((k, n), dt) == (math.ceil(n / 64), math.ceil(k / 16), 16, 64)
                np.testing.assert_array_equal(nz.view(np.uint8), ref, err_msg=f"{dt} k={k} n={n}")
                np.testing.assert_array_equal(nz_to_nd(nz, (k, n), dt).view(np.uint8), packed)


@pytest.mark.parametrize(
    ("dt", "shape"), [("e4m3", (17, 33)), ("int8", (40, 70)), ("e1m2", (5, 130)), ("bf16", (3, 9)), ("e5m2", (1, 1))]
)
def test_padding_items_are_zero_and_the_mask_counts_the_data(dt, shape):
    """Rows past `rows` and C0 positions past `cols` are zero (gen_data's np.zeros, the ND2NZ zero fill)."""
    fmt = NzDtype.parse(dt)
    storage = nd_storage_shape(shape, fmt)
    raw_dtype = np.uint16 if fmt.storage_itemsize == 2 else np.uint8
    x = np.full(storage, 0x5A5A if fmt.storage_itemsize == 2 else 0x5A, dtype=raw_dtype)
    nz = nd_to_nz(x, fmt)
    mask = nz_padding_mask(shape, fmt)
    assert mask.shape == nz.shape == nz_storage_shape(shape, fmt)
    assert int((~mask).sum()) == math.prod(storage)
    assert not nz[mask].any()
    assert (nz[~mask] == x.flat[0]).all()


def test_batch_dims_convert_each_matrix():
    """Leading dims (a GMM weight [g, k, n]) convert matrix by matrix: [g, n1, k1, 16, C0]."""
    rng = np.random.default_rng(2)
    x = rng.integers(0, 256, (3, 2, 17, 45), dtype=np.uint8).view(ml_dtypes.float8_e4m3fn)
    nz = nd_to_nz(x, "e4m3")
    assert nz.shape == (3, 2, 2, 2, 16, 32)
    for i in range(3):
        for j in range(2):
            np.testing.assert_array_equal(nz[i, j].view(np.uint8), nd_to_nz(x[i, j], "e4m3").view(np.uint8))
    np.testing.assert_array_equal(nz_to_nd(nz, x.shape, "e4m3").view(np.uint8), x.view(np.uint8))


def test_source_storage_shapes():
    # GMM 950 checker (libochao-huawei/ops-transformer@5778144076
    # gmm/grouped_matmul/op_api/grouped_matmul_950_checker.cpp:286-325) and the UT driver
    # (gmm/grouped_matmul/tests/ut/op_host/test_grouped_quant_arch35_tiling.cpp:120-128):
    # transB false (k, n) -> (ceil(n/C0), ceil(k/16), 16, C0); transB true (n, k) -> (ceil(k/C0), ceil(n/16), 16, C0).
    for k, n in [(1024, 512), (7177, 6751), (256, 128), (33, 65)]:
        assert nz_shape((k, n), "e4m3") == (math.ceil(n / 32), math.ceil(k / 16), 16, 32)
        assert nz_shape((n, k), "e4m3") == (math.ceil(k / 32), math.ceil(n / 16), 16, 32)
    # test_grouped_quant_arch35_tiling.csv:5 mxfp8_weight_nz_notrans (g 4, k 1024, n 512); :29 fp4e1m2 (g 2, 256, 128)
    assert nz_shape((4, 1024, 512), "e4m3") == (4, 16, 64, 16, 32)
    assert nz_shape((2, 256, 128), "e1m2") == (2, 2, 16, 16, 64)
    assert nz_storage_shape((2, 256, 128), "e1m2") == (2, 2, 16, 16, 32)
    # QMRS ST main.cpp (hicann 0f2296ba): B NZ {ceil(N/32), ceil(K/16), 16, 32} bytes; case qmrs row 3 (K 3072, N 3584)
    assert nz_storage_shape((3072, 3584), "e4m3") == (112, 192, 16, 32)
    # hicann/ops-nn@e5c3fa93 matmul/weight_quant_batch_matmul_v2/tests/st/arch35/
    # ttk_aclnn_weight_quant_batch_matmul_v2_basic_st.csv:20: int8 weight (640, 896) stored as (28, 40, 16, 32)
    assert nz_shape((640, 896), "int8") == (28, 40, 16, 32)


def test_documented_worked_example_fp16():
    """ATB TransdataOperation: ND dims {8, 100, 30} fp16 -> NZ dims {8, 2, 112, 16} ([batch, n1, m1m0, n0])."""
    x = np.arange(8 * 100 * 30, dtype=np.float32).astype(np.float16).reshape(8, 100, 30)
    nz = nd_to_nz(x, "float16")
    assert nz.shape == (8, 2, 7, 16, 16)
    m1m0 = nz.reshape(8, 2, 112, 16)
    # element (b, r, c) is at [b, c // 16, r, c % 16] of the 4-D view; r >= 100 and c >= 30 are zero
    b, r, c = 5, 99, 29
    assert m1m0[b, c // 16, r, c % 16] == x[b, r, c]
    assert not m1m0[:, :, 100:, :].any() and not m1m0[:, 1, :, 14:].any()
    np.testing.assert_array_equal(nz_to_nd(nz, x.shape, np.float16), x)


def test_values_survive_the_round_trip():
    vals = np.array([[0.0, -0.0, 448.0, -448.0, np.nan, 1.75]], dtype=np.float32)
    x = vals.astype(ml_dtypes.float8_e4m3fn)
    back = nz_to_nd(nd_to_nz(x, ml_dtypes.float8_e4m3fn), x.shape, "float8_e4m3fn")
    np.testing.assert_array_equal(back.view(np.uint8), x.view(np.uint8))


def test_dtype_names():
    assert NzDtype.parse(ElemFormat.E4M3) is NzDtype.E4M3
    assert NzDtype.parse("float8_e5m2") is NzDtype.E5M2
    assert NzDtype.parse(ml_dtypes.float4_e2m1fn) is NzDtype.E2M1
    assert NzDtype.parse(np.int8) is NzDtype.INT8
    assert NzDtype.parse("bf16") is NzDtype.BFLOAT16
    c0 = [NzDtype.parse(d).c0 for d in ("e4m3", "e5m2", "int8", "e2m1", "e1m2", "float16")]
    assert c0 == [32, 32, 32, 64, 64, 16]
    with pytest.raises(MxValueError, match="uint8 is ambiguous"):
        NzDtype.parse(np.uint8)
    with pytest.raises(MxValueError, match="not an NZ element type"):
        NzDtype.parse("int4")


def test_refusals_name_the_rule():
    with pytest.raises(MxValueError, match="2 to 6 dims"):
        nz_shape((7,), "e4m3")
    with pytest.raises(MxValueError, match="2 to 6 dims"):
        nd_to_nz(np.zeros((1,) * 7, dtype=np.int8), "int8")
    with pytest.raises(MxValueError, match="cols must be even"):
        nz_shape((4, 5), "e2m1")
    with pytest.raises(MxTypeError, match="does not hold e4m3"):
        nd_to_nz(np.zeros((2, 2), dtype=np.float32), "e4m3")
    with pytest.raises(MxTypeError, match="does not hold e4m3"):
        nd_to_nz(np.zeros((2, 2), dtype=ml_dtypes.float8_e5m2), "e4m3")
    with pytest.raises(MxValueError, match="NZ storage shape"):
        nz_to_nd(np.zeros((1, 1, 16, 32), dtype=np.uint8), (17, 3), "int8")
    with pytest.raises(MxValueError, match="at least 4 dims"):
        nz_to_nd(np.zeros((16, 32), dtype=np.uint8), (16, 32), "int8")


def test_nz_weight_refuses_n_or_k_of_one():
    # libochao-huawei/ops-transformer@5778144076 gmm/grouped_matmul/docs/aclnnGroupedMatmulWeightNz.md:436
    for k, n in [(1, 64), (64, 1), (1, 1)]:
        with pytest.raises(MxValueError, match=r"k > 1 and n > 1"):
            check_nz_weight_dims(k, n)
    check_nz_weight_dims(2, 2)


def test_nz_weight_scale_is_the_transb_false_layout():
    """The NZ path leaves scaleB ND in the transB-false layout (ceil(k/64), n, 2): the AG ubmem gen_data
    (recursion-ascend a093e954 …/all_gather_quant_matmul/ubmem/scripts/gen_data.py, `--nz`) writes it "as-is",
    where its DN path writes (n, ceil(k/64), 2); the QMRS ST main.cpp (hicann 0f2296ba) sizes it the same."""
    k, n = 200, 48
    rng = np.random.default_rng(3)
    blocks = rng.integers(120, 135, (math.ceil(k / 32), n), dtype=np.uint8)  # one E8M0 code per 32-K group
    nz_scale = to_ascend_scale_b(blocks.view(ml_dtypes.float8_e8m0fnu), trans=False).view(np.uint8)
    assert nz_scale.shape == (math.ceil(k / 64), n, 2)
    for g in range(blocks.shape[0]):
        np.testing.assert_array_equal(nz_scale[g // 2, :, g % 2], blocks[g])


def test_codes_view_packs_to_the_byte_form_and_round_trips():
    """nd_to_nz_codes (one code per item): FP4 packed along C0 equals nd_to_nz of the packed ND bytes; 8-bit
    equals nd_to_nz; nz_codes_to_nd inverts it (odd FP4 cols too: unpacked codes need no pairing)."""
    rng = np.random.default_rng(3)
    for k, n in ((1, 2), (17, 70), (40, 64), (33, 130)):
        fp4 = rng.integers(0, 16, size=(2, k, n), dtype=np.uint8)
        nz = nd_to_nz_codes(fp4, "e2m1")
        assert nz.shape == (2, math.ceil(n / 64), math.ceil(k / 16), 16, 64)
        np.testing.assert_array_equal(pack_rows(nz), nd_to_nz(pack_rows(fp4), "e2m1"))
        np.testing.assert_array_equal(nz_codes_to_nd(nz, (2, k, n), "e1m2"), fp4)
        fp8 = rng.integers(0, 256, size=(k, n), dtype=np.uint8)
        np.testing.assert_array_equal(nd_to_nz_codes(fp8, "e4m3"), nd_to_nz(fp8, "e4m3"))
        np.testing.assert_array_equal(nz_codes_to_nd(nd_to_nz_codes(fp8, "e5m2"), (k, n), "e5m2"), fp8)
    odd = rng.integers(0, 16, size=(5, 7), dtype=np.uint8)
    np.testing.assert_array_equal(nz_codes_to_nd(nd_to_nz_codes(odd, "e2m1"), (5, 7), "e2m1"), odd)
    with pytest.raises(MxValueError, match="NZ element shape"):
        nz_codes_to_nd(nd_to_nz_codes(odd, "e2m1"), (5, 70), "e2m1")
    with pytest.raises(MxTypeError, match="one e4m3 element"):
        nd_to_nz_codes(np.zeros((4, 4), np.float16), "e4m3")
