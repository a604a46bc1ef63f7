"""all_to_all_quant_matmul with several communication tiles (commTurn >= 3 and a tail tile), every valid
impl x localMatmul x wait order, C checked against the golden and against an exact second implementation
of the kernel's accumulation order; bias checked with values that make a missing, doubled or misplaced bias
visible.

Shape: oriM 200 rows in head tiles of 48 -> 4 head tiles + a tail of 8 rows (commTurn 5); baseM 64 gives
4 M tiles whose dependency tiles are 1, 2, 3 and the tail 4, so wait order, dependency tile, drain and put
offsets all matter for C.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics import bf16_ulp_distance
from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs, golden_a2a
from mc2emu.runtime import HazardError

TIMEOUT = 30.0
ORI_M, KA, N, HEAD = 200, 128, 96, 48
VALID = [("udma", 0, "mask"), ("udma", 0, "in_order"), ("udma", 1, "mask"), ("udma", 1, "in_order"),
         ("udma", 2, "mask"), ("udma", 2, "in_order"), ("hcomm", 0, "in_order"), ("hcomm", 1, "in_order")]
E4M3_ONE, E4M3_MINUS_ONE = 0x38, 0xB8   # +1.0 / -1.0
E8M0_ONE = 127
BIG_EXP = 12                            # 2^12 on A times 2^12 on B: a term of 2^24 (float32 ULP 2 above it)


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def assert_all_ranks(comm, ok, what):
    flags = comm.allgather(bool(ok))
    assert all(flags), f"{what}: failed on ranks {[r for r, f in enumerate(flags) if not f]}"


def run(inp, **kw):
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("block_dim", max(4, world().Get_size()))
    return all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], head_tile_size=HEAD,
                                   **kw)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("impl, local_matmul, wait_order", VALID)
def test_multi_tile_matches_the_golden(impl, local_matmul, wait_order):
    """Bound: <= 1 bf16 ULP, 2 with localMatmul 1. ST data are positive (elements in [1, 8], scales
    {1, 2, 4}), so the kernel's K-ordered float32 sum and the golden's single float32 matmul both lie within
    K * 2^-24 <= 2^-14 (K = R * 128 <= 1024) of the exact sum, relatively, far below half a bf16 ULP (2^-9
    relative at least): rounded to bf16 they land on the same or adjacent grid points. localMatmul 1 rounds
    the LOCAL term T and the remote sum C - T to bf16 before the atomic add (each error <= half an ULP of C,
    both parts being positive and <= C), so before the final rounding C is within 1 ULP of exact: <= 2 ULP
    from the golden. Any wrong row, rank or tile moves C by whole terms (hundreds of ULP)."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, ORI_M, KA, N, seed=11)
    c, stats = run(inp, impl=impl, local_matmul=local_matmul, wait_order=wait_order, return_stats=True)
    ct = stats.comm_tiling
    assert ct.commTurn >= 3 and ct.splitAxisTailCnt == 1 and ct.splitAxisTailSize > 0, ct
    assert stats.base[0] < ORI_M, "one M tile would make every dependency tile the last one"
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
    gold = golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3")
    ulp = bf16_ulp_distance(c, gold)
    assert_all_ranks(comm, ulp <= (2 if local_matmul == 1 else 1), f"{impl} lm={local_matmul} {wait_order}: {ulp} ULP")


# -- exact data: the accumulation order is visible -------------------------------------------------------------
def exact_inputs(rank: int, size: int, terms: list[tuple[int, int]], row_gain: bool = False) -> dict:
    """Inputs whose C is a sum of one product per rank: rank s contributes sign_s * 2^(2 e_s) to every element
    of C (A_s[:, 0] = 2^e_s through the scale, B_j[:, s*Ka] = sign_s * 2^e_s). With `row_gain`, row i of A_s
    holds 1 + (i % 8) / 8 instead of 1 (exact in E4M3), so a row from the wrong tile or rank shows."""
    pairs = KA // 64
    x1 = np.zeros((size * ORI_M, KA), np.uint8)
    x1_scale = np.full((size * ORI_M, pairs, 2), E8M0_ONE, np.uint8)
    if row_gain:
        gains = (1 + (np.arange(size * ORI_M) % 8) / 8).astype(np.float32)
        x1[:, 0] = gains.astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
    else:
        x1[:, 0] = E4M3_ONE
    x1_scale[:, 0, 0] = E8M0_ONE + terms[rank][0]
    x2 = np.zeros((N, size * KA), np.uint8)
    x2_scale = np.full((N, size * pairs, 2), E8M0_ONE, np.uint8)
    for s, (e, sign) in enumerate(terms):
        x2[:, s * KA] = E4M3_ONE if sign > 0 else E4M3_MINUS_ONE
        x2_scale[:, s * pairs, 0] = E8M0_ONE + e
    return {"x1": x1.view(ml_dtypes.float8_e4m3fn), "x1_scale": x1_scale.view(ml_dtypes.float8_e8m0fnu),
            "x2": x2.view(ml_dtypes.float8_e4m3fn), "x2_scale": x2_scale.view(ml_dtypes.float8_e8m0fnu)}


def fold(values: list[float]) -> np.float32:
    acc = np.float32(values[0])
    for v in values[1:]:
        acc = np.float32(acc + np.float32(v))
    return acc


def expected_c(rank: int, size: int, terms: list[float], local_matmul: int, bias: np.ndarray | None = None,
               bias_times: int = 1) -> np.ndarray:
    """The kernel's accumulation order, written out (SPEC §6): REMOTE folds ranks 0..R-1 in float32;
    DEFERRED_SYNC (localMatmul 2) folds the own rank first, then the others ascending; localMatmul 1 writes
    bf16(own term) in the LOCAL pass, then atomically adds the float32 fold of the other ranks, converted to
    bf16 by the fixpipe first (SPEC §2: GM_new = RNE_T(float(GM_old) + float(value)), value of type T).
    Bias enters L0C first, at splitKIdx 0 of every pass that loads it."""
    b = np.zeros(N, np.float32) if bias is None else bias.astype(np.float32)
    out = np.empty(N, np.float32)
    for n in range(N):
        bn = [b[n]] if bias is not None else []
        if local_matmul == 0:
            v = fold(bn + terms)
        elif local_matmul == 2:
            v = fold([*bn, terms[rank], *(t for s, t in enumerate(terms) if s != rank)])
        else:
            local = np.float32(ml_dtypes.bfloat16(fold([*bn, terms[rank]])))
            bn2 = bn if bias_times == 2 else []
            remote = fold(bn2 + [t for s, t in enumerate(terms) if s != rank])
            # the fixpipe converts to CType before the atomic write: GM = bf16(f32(GM) + f32(bf16(remote)))
            v = np.float32(local + np.float32(ml_dtypes.bfloat16(remote)))
        out[n] = v
    return np.broadcast_to(out.astype(ml_dtypes.bfloat16), (ORI_M, N))


def order_terms(size: int) -> list[tuple[int, int]]:
    """+2^24 on rank 0, -2^24 on rank R-1, +1 on the ranks between: float32 folds ascending give 0 (each +1
    is lost against 2^24: 2^24 + 1 rounds to even), descending give R - 2; every other order differs too."""
    terms = [(0, 1)] * size
    terms[0] = (BIG_EXP, 1)
    terms[-1] = (BIG_EXP, -1)
    return terms


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("impl, local_matmul, wait_order", VALID)
def test_accumulation_order_is_the_kernels(impl, local_matmul, wait_order):
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    terms = order_terms(size)
    c = run(exact_inputs(r, size, terms), impl=impl, local_matmul=local_matmul, wait_order=wait_order)
    want = expected_c(r, size, [float(s * 2.0 ** (2 * e)) for e, s in terms], local_matmul)
    ok = np.array_equal(c.view(np.uint16), want.view(np.uint16))
    got = sorted(set(c.astype(np.float32).ravel().tolist()))[:4]
    assert_all_ranks(comm, ok, f"{impl} lm={local_matmul}: C values {got}, want {float(want[0, 0])}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("impl, local_matmul, wait_order", [("udma", 0, "mask"), ("udma", 2, "in_order"),
                                                            ("hcomm", 0, "in_order")])
def test_rows_come_from_their_tile_and_rank(impl, local_matmul, wait_order):
    """Row i of C gets, from every rank s, (1 + (i % 8) / 8) * 2^s: a row put at another tile's offset, or
    a rank's block read for another, changes C exactly (float32 output: every sum here is exact)."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    terms = [(s % 3, 1) for s in range(size)]   # 2^(2 e) in {1, 4, 16}
    c = run(exact_inputs(r, size, terms, row_gain=True), impl=impl, local_matmul=local_matmul,
            wait_order=wait_order, out_dtype="float32")
    gains = (1 + (np.arange(ORI_M) % 8) / 8)[:, None]
    want = gains * sum(2.0 ** (2 * e) for e, _ in terms)
    assert_all_ranks(comm, np.array_equal(c, np.broadcast_to(want, c.shape)), f"{impl} lm={local_matmul}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("local_matmul", [0, 1])
def test_hcomm_bias_exactly_once_or_twice(local_matmul):
    """Bias comparable to C (C = R from all-ones terms; bias -4..3 per column, distinct neighbours): C must
    equal R + bias exactly with localMatmul 0 and R + 2 bias with localMatmul 1 (the source's BIAS_DOUBLE_ADD,
    reported). A missing, doubled, tripled or column-shifted bias changes every element."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    terms = [(0, 1)] * size
    bias = ((np.arange(N) * 3) % 8 - 4).astype(np.float32)
    inp = exact_inputs(r, size, terms)
    if local_matmul == 1:
        with pytest.raises(HazardError) as info:
            run(inp, impl="hcomm", local_matmul=1, wait_order="in_order", bias=bias)
        assert info.value.names() == {"BIAS_DOUBLE_ADD"}
        c = info.value.output
    else:
        c = run(inp, impl="hcomm", local_matmul=0, wait_order="in_order", bias=bias)
    times = 2 if local_matmul == 1 else 1
    want = expected_c(r, size, [1.0] * size, local_matmul, bias=bias, bias_times=times)
    np.testing.assert_array_equal(want.astype(np.float32)[0], size + times * bias)   # the reference itself
    assert_all_ranks(comm, np.array_equal(c.view(np.uint16), want.view(np.uint16)),
                     f"lm={local_matmul}: C - R = {sorted(set((c.astype(np.float32) - size)[0].tolist()))[:6]}")
