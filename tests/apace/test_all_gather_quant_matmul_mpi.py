"""all_gather_quant_matmul at every world size: reduced CANN AG ST cases (one full tile + a ragged tail, two
tiles without a tail, two tiles + a tail, a single tile) with the ST input recipe and its verify rule, both
wait orders; bitwise reproducibility across runs and seeded timing perturbation; constraint refusals on
every rank; the kernel's reproduced hazards with what each report names."""

import numpy as np
import pytest

from mc2emu.ops import all_gather_quant_matmul, gen_ag_st_inputs, golden_all_gather_quant_matmul
from mc2emu.ops.all_gather_quant_matmul_golden import ag_st_verify
from mc2emu.runtime import ConstraintError, HazardError, PerturbPolicy
from mc2emu.tiling.all_gather_quant_matmul_tiling import make_ag_comm_tiling

TIMEOUT = 60.0
# Launch 8 blocks: >= R at every world size (AIV block r serves peer r), and with these shapes
# ceil(totalLogicalM / 256) * ceil(n / 256) >= 8, so AdjustBasicBlock keeps baseM 256 (which divides the
# 512-row tiles) as it does for the CANN cases at 32 cores: no block straddles two regions.
BLOCK_DIM = 8
# (m, k, n): the character of the CANN cases m in {2048, 2061, ..., 8205} at k 4096, n 2560 / 6144.
ST_CASES = {
    "full_tile_ragged_tail": (525, 256, 512),    # 2061 = 4 * 512 + 13: tiles + a 13-row tail (padded to 16)
    "two_tiles_no_tail": (1024, 128, 256),       # 2048 / 4096: whole tiles only
    "two_tiles_tail": (1037, 128, 512),          # 4109: several tiles + tail
}
WAIT_ORDERS = ("mask", "in_order")


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("block_dim", BLOCK_DIM)
    return all_gather_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


def golden(comm, inp):
    return golden_all_gather_quant_matmul(comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"]), inp["x2"],
                                          inp["x2_scale"])


def assert_all_ranks(comm, ok, what):
    flags = comm.allgather(bool(ok))
    assert all(flags), f"{what}: failed on ranks {[r for r, f in enumerate(flags) if not f]}"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("wait_order", WAIT_ORDERS)
@pytest.mark.parametrize("case", list(ST_CASES))
def test_st_cases_pass_the_st_verify_rule(case, wait_order):
    comm = world()
    m, k, n = ST_CASES[case]
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    c, launch = run(inp, wait_order=wait_order, return_stats=True)
    g = golden(comm, inp)
    assert c.shape == (comm.Get_size() * m, n)
    ok, ulp_max, _ = ag_st_verify(c, g)
    assert_all_ranks(comm, ok, f"{case} {wait_order}: max bf16 ULP distance {ulp_max}")
    ct = launch.comm_tiling
    assert (ct.tileM, ct.tailM) == (min(512, m), m % min(512, m))
    assert launch.tiles > 0 and launch.base[0] == 256


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("wait_order", ["mask"])
def test_few_cores_walk_several_main_rounds(wait_order):
    """As few AICs as ranks: one core computes tiles of several MAIN rounds, so its fragment addresses move
    with UpdateMainRoundAddrs (with many cores each core may only ever build its first round's fragment)."""
    comm = world()
    m, k, n = 1037, 128, 64   # the two_tiles_tail rows (512-row MAIN rounds + tail), a narrow N
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    c = run(inp, wait_order=wait_order, block_dim=comm.Get_size())
    ok, ulp_max, _ = ag_st_verify(c, golden(comm, inp))
    assert_all_ranks(comm, ok, f"block_dim {comm.Get_size()} {wait_order}: max bf16 ULP distance {ulp_max}")


@pytest.mark.mpi(min_size=2)
def test_rows_are_rank_major_and_the_own_rows_come_from_local_a():
    """C[r*m:(r+1)*m] depends on rank r's x1 only: zero one rank's A and exactly its rows of C become 0."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    m, k, n = 525, 128, 512
    inp = gen_ag_st_inputs(m, k, n, r)
    zero_rank = size - 1
    if r == zero_rank:
        inp["x1"] = np.zeros_like(inp["x1"])
    c = run(inp, wait_order="in_order").astype(np.float32)
    rows_zero = [bool(np.all(c[s * m:(s + 1) * m] == 0)) for s in range(size)]
    assert_all_ranks(comm, rows_zero == [s == zero_rank for s in range(size)], f"zero rows {rows_zero}")


@pytest.mark.mpi(min_size=2)
def test_bitwise_identical_across_runs_and_perturbation_seeds():
    comm = world()
    m, k, n = ST_CASES["full_tile_ragged_tail"]
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    ref = run(inp, wait_order="mask")
    again = run(inp, wait_order="mask")
    assert_all_ranks(comm, np.array_equal(again.view(np.uint16), ref.view(np.uint16)), "second run")
    for seed, order in ((1, "mask"), (2, "in_order")):
        out = run(inp, wait_order=order, perturb=PerturbPolicy(seed, max_delay_s=1e-3))
        assert_all_ranks(comm, np.array_equal(out.view(np.uint16), ref.view(np.uint16)), f"perturb seed {seed}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kwargs, shape, rule", [
    ({}, (64, 192, 64), "AG-2 ceil(K/64) even"),           # ceil(192 / 64) = 3
    ({}, (64, 80, 64), "AG-1 K % 32 == 0"),
    ({"bias": True}, (64, 128, 64), "bias"),
    ({"protocol": "slot_ring", "wait_order": "mask"}, (64, 128, 64), "AG-6 slot_ring waits in order"),
    ({"wait_order": "random"}, (64, 128, 64), "wait_order"),
])
def test_constraint_violations_are_refused_on_every_rank(kwargs, shape, rule):
    comm = world()
    m, k, n = shape
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    if kwargs.get("bias") is True:
        kwargs = dict(kwargs, bias=np.zeros(n, np.float32))
    with pytest.raises(ConstraintError) as info:
        run(inp, **kwargs)
    assert info.value.rule == rule


@pytest.mark.mpi(min_size=2)
def test_a_bad_input_on_one_rank_fails_every_rank():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_ag_st_inputs(64, 128, 64, r)
    if r == size - 1:
        inp["x2_scale"] = inp["x2_scale"][:, :1]
    with pytest.raises(ConstraintError, match="x2_scale"):
        run(inp)


def _hazard_error(inp, **kw):
    with pytest.raises(HazardError) as info:
        run(inp, **kw)
    return info.value


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("wait_order", WAIT_ORDERS)
def test_skipped_flag0_wait_leaves_flag_0_unconsumed_on_every_aic(wait_order):
    comm = world()
    m, k, n = ST_CASES["two_tiles_no_tail"]
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    err = _hazard_error(inp, wait_order=wait_order, kernel_variant="skip_flag0_wait")
    reps = [h for h in err.hazards if h.hazard.value == "UNCONSUMED_FLAG"]
    assert {h.hazard.value for h in err.hazards} == {"UNCONSUMED_FLAG"}
    # flag 0 is Set once per AIV before its loop: each of the BLOCK_DIM AICs holds one unconsumed round
    assert sorted(h.core for h in reps) == sorted(f"AIC{i}" for i in range(BLOCK_DIM))
    assert all("flag id 0 holds 1" in h.message for h in reps)
    # the data are still right (HEAD rows are local): only the pairing breaks
    ok, _, _ = ag_st_verify(err.output, golden(comm, inp))
    assert_all_ranks(comm, ok, "skip_flag0_wait output")


@pytest.mark.mpi(min_size=2)
def test_update_addr_list_before_the_wait_is_reported_with_round_and_flag():
    comm = world()
    m, k, n = ST_CASES["two_tiles_no_tail"]
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    err = _hazard_error(inp, wait_order="in_order", kernel_variant="update_addr_before_wait")
    assert {h.hazard.value for h in err.hazards} == {"ADDR_LIST_UPDATED_EARLY"}
    for h in err.hazards:
        assert h.details["flag"] == h.details["round"] + 1
        assert h.details["flag"] not in h.details["waited"]
        assert h.core.startswith("AIC")
    # both MAIN rounds (tileCnt 2) are reached before their waits by some core
    assert_all_ranks(comm, {h.details["round"] for h in err.hazards} == {0, 1}, "rounds named")


@pytest.mark.mpi(min_size=2)
def test_the_source_order_updates_addresses_only_after_the_wait():
    """The same call as above with the source kernel: no report (the check is not a blanket alarm)."""
    comm = world()
    m, k, n = ST_CASES["two_tiles_no_tail"]
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    c = run(inp, wait_order="in_order")
    ok, _, _ = ag_st_verify(c, golden(comm, inp))
    assert_all_ranks(comm, ok, "source order")


@pytest.mark.mpi(min_size=2)
def test_a_block_straddling_two_regions_is_reported_and_its_rows_are_lost():
    """n 256 at 32 cores: AdjustBasicBlock picks baseM 80 (R 2) / 48..80, which does not divide the 512-row
    HEAD: the block starting in HEAD reads past its one fragment (reported), and the rows it covers beyond
    HEAD are never computed."""
    comm = world()
    m, k, n = 525, 128, 256
    inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
    err = _hazard_error(inp, block_dim=None, wait_order="in_order")
    reps = [h for h in err.hazards if h.hazard.value == "FRAGMENT_OUT_OF_RANGE"]
    assert reps and {h.hazard.value for h in err.hazards} == {"FRAGMENT_OUT_OF_RANGE"}
    assert any("headFragA_" in h.message for h in reps)
    assert all(h.details["fragment"] >= h.details["fragmentCnt"] for h in reps)
    ok, _, _ = ag_st_verify(err.output, golden(comm, inp))
    assert_all_ranks(comm, not ok, "straddled rows must differ from the golden")


def test_st_case_table_keeps_the_cann_character():
    """The reduced cases have the tile structure of CANN cases (serial check of the host rule)."""
    tails = {name: make_ag_comm_tiling(m, k) for name, (m, k, _) in ST_CASES.items()}
    assert (tails["full_tile_ragged_tail"].tileCnt, tails["full_tile_ragged_tail"].tailM) == (1, 13)
    assert tails["full_tile_ragged_tail"].paddedTailM == 16
    assert (tails["two_tiles_no_tail"].tileCnt, tails["two_tiles_no_tail"].tailCnt) == (2, 0)
    assert (tails["two_tiles_tail"].tileCnt, tails["two_tiles_tail"].tailM) == (2, 13)


# (m, k, n) -> L2 hints that must be among those recorded (every tile is checked against the AG rule of
# SetL2Cache: SPEC §5 "AG", the source gating B by the full-M test too). With block_dim = R these give M blocks
# covering all of logical M (baseM = R * 16 at every R; at 2080 columns tail tiles may split along M).
L2_CASES = {
    (16, 128, 2048): {"B": {"CACHE_MODE_DISABLE"}, "scaleB": {"CACHE_MODE_DISABLE"}},
    (16, 96, 2048): {"B": {"CACHE_MODE_NORMAL"}, "scaleB": {"CACHE_MODE_DISABLE"}},    # K 96: not 128-B aligned
    (16, 128, 2080): {"B": {"CACHE_MODE_DISABLE"}, "scaleB": {"CACHE_MODE_NORMAL"}},   # N * 2 = 4160: not aligned
}
CACHE_LINE_MASK = 0x7F   # kCacheLineAlignMask of the kernel (FP8)


@pytest.mark.mpi(min_size=2)
def test_l2_hints_are_recorded_per_tile_by_the_ag_rule():
    """Every AIC tile records two L2_HINT events (B, scaleB) before its mmad, decided with the tile's own
    extents (the FIXPIPE that follows names them): B streams (DISABLE) iff the tile covers all of logical M and
    K is 128-byte aligned; scaleB iff it covers all of M and N * 2 and curN * 2 are 128-byte aligned. A tile
    covering all of logical M also spans HEAD and MAIN (R >= 2): in this kernel the DISABLE hints fire only on
    a block that crosses a region boundary, which the FragmentSliceCopy reports (FRAGMENT_OUT_OF_RANGE)."""
    from mc2emu.runtime import EventRecorder
    from mc2emu.runtime.events import Fixpipe, L2Hint

    comm = world()
    size = comm.Get_size()
    for (m, k, n), want in L2_CASES.items():
        rec = EventRecorder()
        inp = gen_ag_st_inputs(m, k, n, comm.Get_rank())
        try:
            _, stats = run(inp, wait_order="in_order", block_dim=size, observers=(rec,), return_stats=True)
            names = set()
        except HazardError as exc:
            names, stats = set(exc.names()), exc.stats
        M = stats.comm_tiling.total_logical_m(size)
        seen = {"B": set(), "scaleB": set()}
        tiles = 0
        pending = {}
        for e in rec.events:
            if isinstance(e, L2Hint):
                pending.setdefault(e.core, []).append(e)
            elif isinstance(e, Fixpipe):
                cur_m, cur_n = e.m, e.n
                hints = {h.tensor: h.mode for h in pending.pop(e.core, [])}
                assert set(hints) == {"B", "scaleB"}, (e.core, hints)
                full = cur_m >= M
                b_stream = full and (k & CACHE_LINE_MASK) == 0
                s_stream = full and (n * 2 & CACHE_LINE_MASK) == 0 and (cur_n * 2 & CACHE_LINE_MASK) == 0
                assert hints["B"] == ("CACHE_MODE_DISABLE" if b_stream else "CACHE_MODE_NORMAL"), (e.core, cur_m, M)
                assert hints["scaleB"] == ("CACHE_MODE_DISABLE" if s_stream else "CACHE_MODE_NORMAL"), (e.core, cur_n)
                for name, mode in hints.items():
                    seen[name].add(mode)
                tiles += 1
        assert tiles == stats.tiles and not pending, (tiles, pending)
        assert_all_ranks(comm, all(want[t] <= seen[t] for t in want), f"{(m, k, n)}: hints {seen}, expected {want}")
        # a tile covering all of logical M spans HEAD and MAIN: the crossing is reported
        assert_all_ranks(comm, names == {"FRAGMENT_OUT_OF_RANGE"}, f"{(m, k, n)}: {names}")
