"""grouped_matmul_mx with a FRACTAL_NZ weight (weight_format="NZ"): the CGMCT kernel's NZ branch
(grouped_matmul_apt.cpp layout::Nz / layout::Zn, CopyInB1WeightNz, the NZ group / tile offsets and L2 hint, at
libochao-huawei/ops-transformer 5778144) gives the ND weight's bits; FLOAT4_E1M2 (NZ only) against the golden
on the ND weight; the source's NZ refusals, each by its rule."""

from __future__ import annotations

import numpy as np
import pytest
from gmm_cases import split_k_case, split_m_case

from mc2emu.numerics import ag_compare, ulp_distance
from mc2emu.numerics.nz_format import nd_to_nz_codes, nz_codes_to_nd
from mc2emu.ops import golden_grouped_matmul_mx, grouped_matmul_mx
from mc2emu.runtime import ConstraintError
from mc2emu.runtime.events import GmRead, L2Hint

E4M3_NAN = 0x7F  # an E4M3 NaN code: planted in the NZ padding, which the copy reads but no MMAD uses


def nz_of(c, elem: str = "e4m3") -> np.ndarray:
    """The case's ND weight [g, K, N] / [g, N, K] as NZ element codes [g, ., ., 16, C0]."""
    return nd_to_nz_codes(c.weight, elem)


def run_nz(c, w_nz, **kw):
    return grouped_matmul_mx(c.x, c.x_scale, w_nz, c.weight_scale, c.group_list, weight_format="NZ",
                             **{**c.kw, **kw})


def bits(y: np.ndarray) -> np.ndarray:
    return y.view(np.uint16)


@pytest.mark.parametrize(("sizes", "n", "k", "trans_b", "fp4", "glt"), [
    ([25, 25, 25, 25], 700, 4096, False, False, "count"),    # N tail 700 = 21 C0 blocks + 28, A outer
    ([0, 300, 0, 37, 1], 300, 1000, True, False, "count"),   # transB, K tail (1000 = 31 C0 blocks + 8), empty groups
    ([70, 230], 64, 2048, False, False, "cumsum"),           # kBL1 > kAL1: B outer, several B chunks
    ([10, 20, 0, 15], 130, 250, False, True, "cumsum"),      # FP4: C0 64, K 250 (rows to 256), N 130 (to 192)
    ([33, 0, 40], 98, 384, True, True, "count"),             # FP4 transB: N 98 (to 112 rows), K 384 in C0 blocks
    ([(0, 17), (1, 0), (2, 40)], 96, 512, False, False, "sparse"),  # sparse list, an empty entry
])
def test_nz_weight_gives_the_nd_weights_bits(sizes, n, k, trans_b, fp4, glt):
    c = split_m_case(sizes, n, k, trans_b=trans_b, fp4=fp4, group_list_type=glt,
                     groups=3 if glt == "sparse" else None, seed=5)
    y_nd = grouped_matmul_mx(*c.args(), **c.kw)
    y_nz = run_nz(c, nz_of(c, "e2m1" if fp4 else "e4m3"))
    np.testing.assert_array_equal(bits(y_nz), bits(y_nd))


def _weight_reads(shapes: list) -> object:
    return lambda ev: isinstance(ev, GmRead) and ev.buffer == "weight" and shapes.append((ev.shape, ev.strides))


def _weight_hints(modes: list) -> object:
    return lambda ev: isinstance(ev, L2Hint) and ev.tensor == "weight" and modes.append(ev.mode)


def test_nz_padding_is_read_but_never_used():
    """N 70, K 100 (fp8, C0 32), one core (no tail split): the tile's copy reads 3 whole C0 blocks of
    Align16(100) = 112 rows x 32 B, 112 * 32 B apart (with the format cast's zero tails); NaN codes planted in
    those tails change nothing."""
    c = split_m_case([48], 70, 100, seed=2)
    w_nz = nz_of(c)
    shapes = []
    y = run_nz(c, w_nz, block_dim=1, observers=[_weight_reads(shapes)])
    assert shapes == [((3, 112, 32), (112 * 32, 32, 1))]
    real = nd_to_nz_codes(np.ones((100, 70), np.uint8), "e4m3")[None] == 1  # True on ND data, False on padding
    poisoned = w_nz.view(np.uint8).copy()
    poisoned[~real] = E4M3_NAN
    y_pad = run_nz(c, poisoned.view(w_nz.dtype), block_dim=1)
    np.testing.assert_array_equal(bits(y_pad), bits(y))
    np.testing.assert_array_equal(nz_codes_to_nd(poisoned[0], (100, 70), "e4m3"), c.weight[0].view(np.uint8))


def test_nz_transb_copy_reads_c0_blocks_of_k():
    """transB, N 40, K 200, one core: ceil(200/32) = 7 blocks of Align16(40) = 48 rows x 32 B, Align16(N) * 32 B
    apart."""
    c = split_m_case([16], 40, 200, trans_b=True, seed=4)
    shapes = []
    run_nz(c, nz_of(c), block_dim=1, observers=[_weight_reads(shapes)])
    assert shapes == [((7, 48, 32), (48 * 32, 32, 1))]


def test_e1m2_runs_with_an_nz_weight_against_the_golden():
    """FLOAT4_E1M2 needs an NZ weight (AnalyzeDtype): x E2M1 x weight E1M2 (the UT row fp4e1m2_weight_nz_success's
    dtypes), ragged groups; the golden takes the ND weight."""
    c = split_m_case([20, 0, 31, 13], 192, 512, fp4=True, seed=9)
    w = c.weight.view(np.uint8)  # the same 4-bit codes read as E1M2
    ref = golden_grouped_matmul_mx(c.x, c.x_scale, w, c.weight_scale, c.group_list, weight_format="e1m2",
                                   group_list_type=c.kw["group_list_type"])
    y = run_nz(c, nd_to_nz_codes(w, "e1m2"), weight_dtype="e1m2")
    assert y.dtype == ref.dtype and ag_compare(y, ref), ulp_distance(y, ref)
    with pytest.raises(ConstraintError, match="FLOAT4_E1M2 needs an NZ weight"):
        grouped_matmul_mx(c.x, c.x_scale, w, c.weight_scale, c.group_list, weight_format="e1m2", **c.kw)


def test_nz_l2_hint_needs_only_one_m_tile():
    """NZ weight: B and x2Scale DISABLE whenever one M tile covers the group (kernel_qgmm_mx.h
    SetL2CacheDisableIfNeeded, formatB != ND); the ND weight also needs N and baseN multiples of 256. One core:
    the last group of the list gets no hint when its tiles are split."""
    c = split_m_case([40], 300, 256, seed=6)
    modes: dict[str, list[str]] = {"nd": [], "nz": []}
    grouped_matmul_mx(*c.args(), **c.kw, block_dim=1, observers=[_weight_hints(modes["nd"])])
    run_nz(c, nz_of(c), block_dim=1, observers=[_weight_hints(modes["nz"])])
    assert set(modes["nd"]) == {"CACHE_MODE_NORMAL"} and set(modes["nz"]) == {"CACHE_MODE_DISABLE"}


def test_nz_refusals_name_the_source_rule():
    c = split_m_case([16, 16], 64, 128, seed=1)
    w_nz = nz_of(c)
    with pytest.raises(ConstraintError, match="CheckWeightNzTransposedDims"):
        run_nz(c, np.ascontiguousarray(w_nz[:, :, :-1]))          # one K fractal short
    with pytest.raises(ConstraintError, match="CheckWeightNzLastDim"):
        run_nz(c, w_nz.reshape(2, 2, 16, 16, 16))  # C0 16 for an 8-bit weight
    with pytest.raises(ConstraintError, match=r"weight\.ndim"):
        run_nz(c, c.weight)                                        # an ND array named NZ
    with pytest.raises(ConstraintError, match="variant cgmct"):
        run_nz(c, w_nz, variant="blaze")
    e5 = c.weight.astype(np.float32).astype("float8_e5m2")
    with pytest.raises(ConstraintError, match="CheckDtypeForWeightNz"):
        run_nz(c, nd_to_nz_codes(e5.view(np.uint8), "e5m2").view(e5.dtype), x_format=None)
    one = split_m_case([16], 1, 128, seed=1)
    with pytest.raises(ConstraintError, match="NZ needs N > 1 and K > 1"):
        run_nz(one, nz_of(one))
    sk = split_k_case([64, 64], 32, 64)
    with pytest.raises(ConstraintError, match="split-K needs an ND weight"):
        grouped_matmul_mx(*sk.args()[:2], nd_to_nz_codes(sk.weight, "e4m3"), *sk.args()[3:], weight_format="NZ",
                          **sk.kw)
    with pytest.raises(ConstraintError, match="weight_format / weight_dtype"):
        grouped_matmul_mx(*c.args(), weight_format="e4m3", weight_dtype="e5m2", **c.kw)
