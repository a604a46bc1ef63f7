"""quant_matmul_reduce_scatter at every world size, against the golden bit for bit: the design-spec kernel
(impl "rounds") with one round and with several rounds plus a tail round, a ragged N (rows not whole 32-byte
blocks), signed inputs with cancellation across ranks (the FP32 order over ranks matters: goldens that sum in
another order, or without the bf16 staging, differ), bitwise reproducibility under seeded perturbation,
refusals on every rank, and the reproduced hazards with what each report names."""

from collections import defaultdict

import numpy as np
import pytest

from mc2emu.numerics import ElemFormat
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.ops.quant_matmul_reduce_scatter_golden import (
    gen_qmrs_signed_inputs,
    gen_qmrs_st_inputs,
    golden_qmrs_partial,
    golden_quant_matmul_reduce_scatter,
    golden_reduce_scatter,
)
from mc2emu.ops.quant_matmul_reduce_scatter_op import quant_matmul_reduce_scatter
from mc2emu.predict import PredictRecorder, gather_records
from mc2emu.predict.ordering import event_order
from mc2emu.runtime import ConstraintError, HazardError, PerturbPolicy
from mc2emu.runtime.events import Fixpipe, FlagConsume, FlagSet, GmAccess, L2Hint, Mmad

TIMEOUT = 60.0


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    kw.setdefault("timeout", TIMEOUT)
    kw.setdefault("block_dim", world().Get_size() + 2)
    return quant_matmul_reduce_scatter(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


def gathered(comm, inp):
    return {key: comm.allgather(v) for key, v in inp.items()}


def golden(comm, inp, **kw):
    al = gathered(comm, inp)
    return golden_quant_matmul_reduce_scatter(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], comm.Get_rank(), **kw)


def bits(a):
    return np.asarray(a).view(np.uint16)


def assert_all_ranks(comm, ok, what):
    flags = comm.allgather(bool(ok))
    assert all(flags), f"{what}: failed on ranks {[r for r, f in enumerate(flags) if not f]}"


# (rows per rank segment, K, N, head_m_size) -> T
CASES = {
    "one_round": (32, 128, 48, None),              # mSeg 32 <= head: T = 1
    "rounds_and_tail_ragged_n": (48, 128, 40, 32),  # T = 2: one 32-row round + a 16-row tail; N * 2 = 80 B rows
    "three_rounds": (48, 256, 64, 16),              # T = 3, K of two scale pairs
}


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "three_rounds" else c
                                  for c in CASES])
def test_rounds_kernel_matches_the_golden_bitwise(case):
    comm = world()
    R = comm.Get_size()
    seg, k, n, head = CASES[case]
    inp = gen_qmrs_st_inputs(R * seg, k, n, comm.Get_rank())
    y, stats = run(inp, head_m_size=head, return_stats=True, ragged_n=n % 16 != 0)
    assert y.shape == (seg, n)
    g = golden(comm, inp)
    bad = int((bits(y) != bits(g)).sum())
    assert_all_ranks(comm, bad == 0, f"{case}: {bad} elements differ from the golden")
    ct = stats.comm_tiling
    expect_t = {"one_round": 1, "rounds_and_tail_ragged_n": 2, "three_rounds": 3}[case]
    assert ct.commTurn == expect_t and ct.mSeg == seg
    if case == "rounds_and_tail_ragged_n":
        assert (ct.headMSize, ct.headCnt, ct.tailMSize, ct.tailCnt) == (32, 1, 16, 1)


def round_overlap(order, R, block_dim, T):
    """Per rank, from the happens-before relation of the recorded run: the AIC MMADs of each round, split at the
    round's flagA Set (flag 0) of their AIC, the flagB Sets (flag 1) ending each round, and the reduce cores'
    GM accesses (the first block_dim - R AIVs), each attributed to round (flagB Waits before it) - 1. Returns
    (problems, {round t: (MMADs of t + 1 before its reductions, MMADs of t + 1 concurrent with them)})."""
    cores = defaultdict(list)
    for pos, r in enumerate(order.records):
        cores[(r.rank, r.core)].append((pos, r))
    problems, pairs = [], defaultdict(lambda: [0, 0])
    for rank in range(R):
        mmads = defaultdict(lambda: ([], []))      # round -> (before flagA, after flagA)
        flag_b = defaultdict(list)
        for i in range(block_dim):
            t, after_a = 0, 0
            for pos, r in cores[(rank, f"AIC{i}")]:
                if isinstance(r, FlagSet) and r.fid == 0:
                    after_a = 1
                elif isinstance(r, FlagSet) and r.fid == 1:
                    flag_b[t].append(order.node_of[pos])
                    t, after_a = t + 1, 0
                elif isinstance(r, Mmad):
                    mmads[t][after_a].append(order.node_of[pos])
        reductions = defaultdict(list)
        for i in range(block_dim - R):
            waited_b = 0
            for pos, r in cores[(rank, f"AIV{i}")]:
                if isinstance(r, FlagConsume) and r.fid == 1:
                    waited_b += 1
                elif isinstance(r, GmAccess) and pos in order.node_of:
                    reductions[waited_b - 1].append(order.node_of[pos])
        if sorted(reductions) != list(range(T)) or sorted(flag_b) != list(range(T)):
            problems.append(f"rank {rank}: reductions of rounds {sorted(reductions)}, flagB of {sorted(flag_b)}")
            continue
        for t in range(T):
            for e in reductions[t]:
                if not all(order.before(s, e) for s in flag_b[t]):
                    problems.append(f"rank {rank}: a round-{t} reduction is not after every flagB({t}) Set")
                if t + 1 == T:
                    continue
                early, late = mmads[t + 1]
                later = [u for tt in range(t + 2, T) for u in mmads[tt][0] + mmads[tt][1]]
                if not all(order.before(u, e) for u in early):
                    problems.append(f"rank {rank}: a round-{t + 1} MMAD before flagA({t + 1}) does not precede a "
                                    f"round-{t} reduction")
                if not all(order.concurrent(u, e) for u in late + later):
                    problems.append(f"rank {rank}: a round-{t} reduction is ordered with a MMAD it should overlap "
                                    f"(round {t + 1} after its flagA, or a later round)")
                pairs[t][0] += len(early)
                pairs[t][1] += sum(order.concurrent(u, e) for u in late)
    return problems[:4], {t: tuple(v) for t, v in sorted(pairs.items())}


@pytest.mark.mpi(min_size=2)
def test_rounds_reduction_overlaps_the_next_rounds_matmul_by_happens_before():
    """Issue 18 item 6, asserted on the synchronization instead of on timing. From the recorded events and their
    happens-before edges (`mc2emu.predict.ordering`: program order, flag rounds, SyncAll, TeamBarrier, puts and
    quiets of every rank), with T = 3 rounds: the reduction of round t (run in AIV iteration t + 1, after the
    SyncAll that follows CrossCoreWaitFlag(flagA of round t + 1)) comes after every flagB Set of round t and after
    the MMADs of round t + 1 that precede flagA on their AIC (the remote fragments), and is concurrent with the
    MMADs of round t + 1 after flagA (the own fragment, localLast) and with every MMAD of the rounds after: the AIC
    never waits for the AIVs, so nothing orders them and the device may overlap them. A kernel that serialized
    the rounds (flagA only at the end of a round, or the AIC waiting for a reduction) fails here."""
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    seg, head, n, block_dim = 96, 32, 48, R + 2    # baseM 32 at R = 2, 4, 8: the own fragment has its own tiles
    inp = gen_qmrs_st_inputs(R * seg, 128, n, rank)
    rec = PredictRecorder()
    y, stats = run(inp, head_m_size=head, block_dim=block_dim, observers=(rec,), return_stats=True)
    T = stats.comm_tiling.commTurn
    assert T == 3
    got = gather_records(comm, rec, root=0)
    verdict = round_overlap(event_order(got), R, block_dim, T) if rank == 0 else None
    problems, pairs = comm.bcast(verdict, root=0)
    assert problems == []
    assert sorted(pairs) == [0, 1], pairs
    assert all(before > 0 and concurrent > 0 for before, concurrent in pairs.values()), pairs
    assert_all_ranks(comm, np.array_equal(bits(y), bits(golden(comm, inp))), "y with the recorder attached")


@pytest.mark.mpi(min_size=2)
def test_signed_cancellation_follows_the_ascending_fp32_order():
    """Even ranks carry 2^20 scales, odd ranks 2^0: the FP32 sum over ranks drops low bits. The kernel equals
    the golden that rounds each C_j to bf16 and sums ranks 0, 1, ..., R - 1; the golden of unrounded FP32
    partials differs (every R), and so does the reversed order (R >= 3), so this test can fail."""
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    seg, k, n = 32, 128, 48
    inp = gen_qmrs_signed_inputs(R * seg, k, n, rank)
    y = run(inp, head_m_size=16)
    al = gathered(comm, inp)
    g = golden_quant_matmul_reduce_scatter(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], rank)
    assert_all_ranks(comm, np.array_equal(bits(y), bits(g)), "ascending golden")
    f32 = [golden_qmrs_partial(al["x1"][j], al["x1_scale"][j], al["x2"][j], al["x2_scale"][j], out_dtype="float32")
           for j in range(R)]
    unrounded = golden_reduce_scatter(f32, rank)
    differs = comm.allgather(int((bits(unrounded) != bits(y)).sum()))
    assert sum(differs) > 0, "the unrounded-partials golden should differ from the kernel somewhere"
    if R >= 3:
        rev = golden_quant_matmul_reduce_scatter(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], rank,
                                                 order=list(range(R - 1, -1, -1)))
        differs = comm.allgather(int((bits(rev) != bits(y)).sum()))
        assert sum(differs) > 0, "the reversed-order golden should differ from the kernel somewhere"


@pytest.mark.mpi(min_size=2)
def test_bitwise_identical_across_perturbation_seeds():
    comm = world()
    R = comm.Get_size()
    inp = gen_qmrs_signed_inputs(R * 32, 128, 48, comm.Get_rank())
    ref = run(inp, head_m_size=16)
    for seed in (7,):
        out = run(inp, head_m_size=16, perturb=PerturbPolicy(seed, max_delay_s=1e-3))
        assert_all_ranks(comm, np.array_equal(bits(out), bits(ref)), f"perturbation seed {seed}")


def wrong_bias_goldens(bias_all, n_block):
    """Goldens a wrong bias path would match: none, twice, another rank's, or every N block given the bias
    columns of the first block (a slice at column 0)."""
    R = len(bias_all)
    col0 = [np.resize(b[:n_block], b.shape) for b in bias_all]
    return {"no bias": None, "doubled bias": [2 * b for b in bias_all],
            "the next rank's bias": [bias_all[(j + 1) % R] for j in range(R)], "bias columns of block 0": col0}


@pytest.mark.mpi(min_size=2)
def test_rounds_bias_is_added_once_per_rank_before_the_bf16_staging():
    """impl="rounds" with a float32 (N,) bias per rank (seed 000 §4.7 推论 2: bias inside each rank's local
    matmul): QmmMxBlockMmadFragment (Init isBias) loads the (1, curN) slice at the tile's nPos into the bias
    table and the first MMAD of the tile starts from it, so C_j = bf16(deq(A_j) deq(B_j) + bias_j) in staging
    and y_r sums R biases. Two rounds (T = 2) of R * 16 rows; N = 304 gives two N blocks.
    Integer biases of C's magnitude keep the FP32 sums exact and change the bf16 roundings, so a missing,
    doubled, rank-swapped or column-shifted bias gives another y (checked against those goldens too)."""
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    seg, n = 32, 304
    inp = gen_qmrs_st_inputs(R * seg, 128, n, rank)
    bias = np.random.default_rng(11 + rank).integers(-4096, 4096, n).astype(np.float32)
    y, stats = run(inp, head_m_size=16, bias=bias, return_stats=True)
    assert stats.comm_tiling.commTurn == 2
    n_block = stats.round_tilings[0].baseN
    assert n_block < n, "two N blocks"
    bias_all = comm.allgather(bias)
    g = golden(comm, inp, bias_all=bias_all)
    assert_all_ranks(comm, np.array_equal(bits(y), bits(g)), "rounds with bias")
    for what, other in wrong_bias_goldens(bias_all, n_block).items():
        wrong = golden(comm, inp, bias_all=other)
        differs = comm.allgather(not np.array_equal(bits(wrong), bits(g)))
        assert any(differs), f"the {what} golden should differ from the kernel's y somewhere"


@pytest.mark.mpi(min_size=2)
def test_rounds_bias_over_the_l1_budget_is_refused_on_every_rank():
    """development.md §3.1 #6: one round of 256 x 256 blocks with K = 8192 fills L1 without a bias; with one the
    host refuses (rule RS-9) before launching. Zero inputs: nothing runs."""
    import ml_dtypes

    comm = world()
    R = comm.Get_size()
    m, k, n, block_dim = 256 * CeilDiv(R + 1, 2), 8192, 512, R + 1   # >= block_dim tiles: no AdjustBasicBlock
    inp = {"x1": np.zeros((m, k), ml_dtypes.float8_e4m3fn), "x2": np.zeros((n, k), ml_dtypes.float8_e4m3fn),
           "x1_scale": np.ones((m, k // 64, 2), ml_dtypes.float8_e8m0fnu),
           "x2_scale": np.ones((n, k // 64, 2), ml_dtypes.float8_e8m0fnu)}
    with pytest.raises(ConstraintError) as info:
        run(inp, head_m_size=m // R, block_dim=block_dim, bias=np.zeros(n, np.float32))
    assert info.value.rule == "RS-9 bias L1/BT budget"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize(("shape", "kwargs", "rule"), [
    ((1, 128, 32), {}, "QMRS-1 M % R == 0"),                           # M = R * 16 + 1
    ((16, 192, 32), {}, "QMRS-3 ceil(K/64) even"),
    ((16, 192, 32), {"split": "k"}, "QMRS-TP ceil(k/R/64) even"),
    ((256, 128, 32), {"head_m_size": 16}, "RS-4 T <= 15"),             # mSeg 256 / 16 = 16 rounds
    ((48, 128, 32), {"head_m_size": 24}, "RS-2 head_m_size % 16 == 0"),
    ((16, 128, 32), {"bias": np.zeros(32, np.float64)}, "bias"),
    ((16, 128, 32), {"out_dtype": "float16"}, "out_dtype"),
    ((16, 128, 32), {"impl": "nope"}, "impl"),
    ((16, 128, 40), {}, "RS-12 N % 16 == 0"),                          # development.md §3.1 #2
    ((16, 128, 40), {"head_m_size": 16}, "RS-12 N % 16 == 0"),
    ((16, 128, 32), {"weight_format": "NZ"}, "QMRS-NZ weight_format NZ: per_block only"),
    ((16, 128, 32), {"weight_format": "FRACTAL_Z"}, "weight_format"),
])
def test_bad_input_is_refused_on_every_rank(shape, kwargs, rule):
    comm = world()
    R = comm.Get_size()
    seg, k, n = shape
    m = R * 16 + 1 if seg == 1 else R * seg
    inp = gen_qmrs_st_inputs(m, k, n, comm.Get_rank())
    with pytest.raises(ConstraintError) as info:
        run(inp, **kwargs)
    assert info.value.rule == rule


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize(("cores", "rule"), [(0, "RS-7 usedCoreNum - R >= 1"), (-1, "RS-10 usedCoreNum >= R")])
def test_too_few_cores_is_refused_not_raised(cores, rule):
    """development.md §3.1 #9 (a reduce core at least) and #3 (one comm core per rank, else the TeamBarrier
    rendezvous hangs): refused naming the rule; the host no longer raises block_dim to R + 1."""
    comm = world()
    R = comm.Get_size()
    inp = gen_qmrs_st_inputs(R * 16, 128, 32, comm.Get_rank())
    with pytest.raises(ConstraintError) as info:
        run(inp, block_dim=R + cores)
    assert info.value.rule == rule
    assert "development.md §3.1" in str(info.value)


# (seg, n): the shapes at K 128 (K does not enter the round search): M 1024 N 1024 R 2 (2 rounds of
# 256), M 2048 N 4096 R 4 (8 rounds of 64), M 4000 N 256 R 4 (one round of 1000 rows); the example values of
# development.md §5.6 (512, or 128 from R 4) refused all three (RS-6, RS-6, RS-3).
SEARCHED = {(512, 1024): (256, 2), (512, 4096): (64, 8), (1000, 256): (1000, 1)}


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize(("seg", "n"), list(SEARCHED))
def test_default_head_m_size_is_searched_and_runs(seg, n):
    comm = world()
    R = comm.Get_size()
    head, T = SEARCHED[(seg, n)]
    inp = gen_qmrs_st_inputs(R * seg, 128, n, comm.Get_rank())
    if R * T > 32:       # 8 rounds of 64 rows need R <= 4; past it no T fits (RS-5 with RS-6)
        with pytest.raises(ConstraintError) as info:
            run(inp)
        assert info.value.rule.startswith("RS-11 no rounds tiling") and "RS-6" in info.value.rule
        return
    y, stats = run(inp, return_stats=True)
    ct = stats.comm_tiling
    assert (ct.headMSize, ct.commTurn, ct.tailCnt) == (head, T, 0)
    assert_all_ranks(comm, np.array_equal(bits(y), bits(golden(comm, inp))), f"seg {seg} n {n}: bit-exact")


@pytest.mark.mpi(min_size=2)
def test_a_shape_no_tiling_fits_is_refused_naming_every_rule():
    """M 4096 N 2048 at R 2: tileM <= 128 for the 512 KiB chunk rule, so T >= 16 > 15 (RS-4 and RS-6 bind;
    at R >= 4, R * T <= 32 binds too)."""
    comm = world()
    R = comm.Get_size()
    inp = gen_qmrs_st_inputs(R * 2048, 128, 2048, comm.Get_rank())
    with pytest.raises(ConstraintError) as info:
        run(inp)
    rules = ["RS-4 T <= 15", "RS-6 tileM * N * 2 <= 512 KiB"]
    if R >= 4:
        rules.insert(1, "RS-5 R * T <= 32")
    assert info.value.rule == f"RS-11 no rounds tiling ({', '.join(rules)})"


@pytest.mark.mpi(min_size=2)
def test_reduction_segments_n_past_the_ub_budget():
    """development.md §5.4: 18 B an element, 248 KiB of UB less 288 B of slack: 14 092 elements, so N = 24 576
    runs in two column segments of at most 14 080 (redUbM 1; <= 32 when segmented) instead of a UB
    CapacityError. 10 rows a rank segment: one round of 10 x 24 576 x 2 <= 512 KiB."""
    from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import REDUCE_UB_SLACK, ReduceUbTiling

    comm = world()
    R = comm.Get_size()
    seg, n = 10, 24576
    assert ReduceUbTiling(5, n, 248 * 1024 - REDUCE_UB_SLACK) == (1, 14080)
    inp = gen_qmrs_st_inputs(R * seg, 128, n, comm.Get_rank())
    y = run(inp)
    assert_all_ranks(comm, np.array_equal(bits(y), bits(golden(comm, inp))), "segmented reduction: bit-exact")


@pytest.mark.mpi(min_size=2)
def test_templated_wait_reads_unfinished_staging_and_is_reported():
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    seg, n = 32, 48
    inp = gen_qmrs_st_inputs(R * seg, 128, n, rank)
    with pytest.raises(HazardError) as info:
        run(inp, head_m_size=16, kernel_variant="templated_wait")
    reps = [h for h in info.value.hazards if h.hazard.value == "READ_BEFORE_WAIT"]
    # every comm core but the one serving the own rank reads early, once per round (T = 2)
    assert len(reps) == (R - 1) * 2
    block_dim = R + 2
    for h in reps:
        d = h.details
        target = d["target"]
        assert h.core == f"AIV{block_dim - 1 - target}" and target != rank
        assert d["flag"] == 0 and d["buffer"] == "staging"
        row0 = target * seg + d["round"] * 16
        assert d["range"] == (row0 * n * 2, (row0 + 16) * n * 2)


@pytest.mark.mpi(min_size=2)
def test_rounded_tail_copy_overruns_the_neighbour_and_is_reported():
    """Three reduce cores share a 16-row round: 6, 5, 5 rows of 80 bytes. 480 B is whole 32-byte blocks,
    400 B is not: the last two cores' copies overrun by 16 bytes (the next core's row, or past y's end). The
    source's DataCopyPad (exact bytes) gives the golden with the same shapes. N 40 is what the design spec's
    check #2 (N % 16, RS-12) refuses for this reason: both runs opt out with ragged_n."""
    comm = world()
    R = comm.Get_size()
    seg, n = 32, 40
    inp = gen_qmrs_st_inputs(R * seg, 128, n, comm.Get_rank())
    y = run(inp, head_m_size=16, block_dim=R + 3, ragged_n=True)
    assert_all_ranks(comm, np.array_equal(bits(y), bits(golden(comm, inp))), "exact-byte copies")
    with pytest.raises(HazardError) as info:
        run(inp, head_m_size=16, block_dim=R + 3, kernel_variant="tail_copy_rounded", ragged_n=True)
    reps = [h for h in info.value.hazards if h.hazard.value == "TAIL_COPY_OVERRUN"]
    assert sorted(h.core for h in reps) == ["AIV1", "AIV1", "AIV2", "AIV2"]   # two rounds each
    for h in reps:
        assert h.details["overrun"] == 16 and h.details["buffer"] == "y"
        lo, hi = h.details["range"]
        assert hi - lo == 416
        start = {"AIV1": 6, "AIV2": 11}[h.core] + 16 * h.details["round"]
        assert lo == start * n * 2


# -- impl "per_block": the shipped kernel --------------------------------------------------------------------------
PB_CASES = {
    "st_one_n_tile": ("st", 32, 128, 48),
    "st_ragged_two_n_tiles": ("st", 16, 128, 300),     # baseN 256: blocks of 256 + 44 columns, rows put one by one
    "signed_cancellation": ("signed", 32, 128, 48),
}


def pb_block_dim(R):
    return R // 2 + 1      # 2 * block_dim AIVs >= R: AIV v runs the status handshake with rank v


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", [pytest.param(c, marks=pytest.mark.slow) if c == "signed_cancellation" else c
                                  for c in PB_CASES])
def test_per_block_matches_the_golden_and_reports_the_leftover_flag_9(case):
    """The single-batch path returns before the final CrossCoreWaitFlag(9): each AIC that ran a block ends with
    one unconsumed flag-9 round (the only hazard); y is the golden bit for bit. The final_wait variant (the
    multi-batch path's wait) runs clean and gives the same y."""
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    kind, seg, k, n = PB_CASES[case]
    gen = gen_qmrs_st_inputs if kind == "st" else gen_qmrs_signed_inputs
    inp = gen(R * seg, k, n, rank)
    with pytest.raises(HazardError) as info:
        run(inp, impl="per_block", block_dim=pb_block_dim(R), return_stats=True)
    y = info.value.output
    g = golden(comm, inp)
    assert_all_ranks(comm, np.array_equal(bits(y), bits(g)), f"{case}: per_block y")
    reps = info.value.hazards
    assert {h.hazard.value for h in reps} == {"UNCONSUMED_FLAG"}
    ran = info.value.stats.tiles
    assert all("flag id 9 holds 1 unconsumed" in h.message and h.core.startswith("AIC") for h in reps)
    assert len(reps) == min(pb_block_dim(R), ran)
    clean = run(inp, impl="per_block", block_dim=pb_block_dim(R), kernel_variant="final_wait")
    assert_all_ranks(comm, np.array_equal(bits(clean), bits(g)), f"{case}: final_wait y")


@pytest.mark.mpi(min_size=2)
def test_per_block_acc_times_zero_keeps_stale_nan_and_is_reported():
    """With UB holding NaN from an earlier kernel, `sum * 0.0f` does not clear it: the AIVs whose UB the epilogue
    and the status words did not overwrite put NaN into their y rows; each report names the row and the count,
    and exactly that many elements of that y row are NaN."""
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    seg, n = 16, 48
    inp = gen_qmrs_st_inputs(R * seg, 128, n, rank)
    with pytest.raises(HazardError) as info:
        run(inp, impl="per_block", block_dim=pb_block_dim(R), kernel_variant="ub_stale_nan")
    y = info.value.output.astype(np.float32)
    reps = [h for h in info.value.hazards if h.hazard.value == "MUL_ZERO_KEEPS_NAN"]
    rows = {h.details["row"] for h in reps}
    for h in reps:
        assert int(np.isnan(y[h.details["row"]]).sum()) == h.details["count"] > 0
    clean_rows = [r for r in range(seg) if r not in rows]
    assert not np.isnan(y[clean_rows]).any()
    assert sum(comm.allgather(len(reps))) > 0, "some AIV ran no epilogue sub-tile and kept the stale NaN"


@pytest.mark.mpi(min_size=3)
def test_per_block_needs_an_aiv_per_peer():
    comm = world()
    R = comm.Get_size()
    inp = gen_qmrs_st_inputs(R * 16, 128, 32, comm.Get_rank())
    with pytest.raises(ConstraintError) as info:
        run(inp, impl="per_block", block_dim=1)
    assert info.value.rule == "PB-1 2 * block_dim >= R"


@pytest.mark.mpi(min_size=2)
def test_k_split_reading_sums_the_partial_products():
    """split="k" (tensor parallel): rank r holds the K columns [r * Kl, (r + 1) * Kl) of one logical A and the
    matching rows of one logical B. y_r is the reduce-scatter of the bf16 partials (bit-exact golden) and
    within the CANN A2A ST tolerance (rtol = atol = 1e-2) of the one-matmul value of the logical problem."""
    from mc2emu.ops.quant_matmul_reduce_scatter_golden import golden_qmrs_tp_reference

    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    seg, kl, n = 16, 128, 48
    full = gen_qmrs_st_inputs(R * seg, R * kl, n, 0)          # the same logical problem on every rank
    pairs = kl // 64
    inp = {"x1": np.ascontiguousarray(full["x1"][:, rank * kl:(rank + 1) * kl]),
           "x1_scale": np.ascontiguousarray(full["x1_scale"][:, rank * pairs:(rank + 1) * pairs]),
           "x2": np.ascontiguousarray(full["x2"][:, rank * kl:(rank + 1) * kl]),
           "x2_scale": np.ascontiguousarray(full["x2_scale"][:, rank * pairs:(rank + 1) * pairs])}
    y = run(inp, split="k")
    assert_all_ranks(comm, np.array_equal(bits(y), bits(golden(comm, inp))), "K-split golden")
    al = gathered(comm, inp)
    ref = golden_qmrs_tp_reference(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], rank)
    ok = np.allclose(y.astype(np.float32), ref.astype(np.float32), rtol=1e-2, atol=1e-2)
    assert_all_ranks(comm, ok, "K-split vs the logical one-matmul value")


@pytest.mark.mpi(min_size=2)
def test_per_block_bias_is_added_once_per_rank_before_the_bf16_staging():
    """impl="per_block" with a float32 (N,) bias per rank: the shipped GemmUniversal loads the (1, baseN) slice
    at the block's nPos into L0C (isBias 1), so C_j = bf16(deq(A_j) deq(B_j) + bias_j) and y_r sums R biases.
    Integer biases of C's magnitude keep every FP32 sum exact; N = 300 gives two N blocks (nPos 0 and 256), so
    a bias slice taken at the wrong column shows, as a missing or doubled bias does."""
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    inp = gen_qmrs_st_inputs(R * 16, 128, 300, rank)
    bias = np.random.default_rng(7 + rank).integers(-4096, 4096, 300).astype(np.float32)
    y = run(inp, impl="per_block", block_dim=pb_block_dim(R), kernel_variant="final_wait", bias=bias)
    bias_all = comm.allgather(bias)
    g = golden(comm, inp, bias_all=bias_all)
    assert_all_ranks(comm, np.array_equal(bits(y), bits(g)), "per_block with bias")
    for what, other in (("no bias", None), ("doubled bias", [2 * b for b in bias_all])):
        wrong = golden(comm, inp, bias_all=other)
        assert_all_ranks(comm, not np.array_equal(bits(wrong), bits(g)), f"the {what} golden differs")
    with pytest.raises(ConstraintError) as info:
        run(inp, impl="per_block", block_dim=pb_block_dim(R), bias=bias[:-1])
    assert info.value.rule == "bias" and "(300,)" in str(info.value)


@pytest.mark.mpi(min_size=2)
def test_l2_hints_use_the_tiles_own_n_extent():
    """development.md §5.8 keeps the AllGather kernel's SetL2Cache, which the AG kernel calls with the tile's
    own extents: scaleB streams (DISABLE) iff the tile covers all of the round's M and both N * 2 and
    curNtile * 2 are 128-byte aligned. N 704 at 32 rows a segment: baseN 80 (160 B) with a 64-column tile
    (128 B) that covers the 64-row round at R 2, where the tiling's baseN would keep NORMAL."""
    from mc2emu.runtime import EventRecorder

    comm = world()
    R = comm.Get_size()
    seg, n = 32, 704
    inp = gen_qmrs_st_inputs(R * seg, 128, n, comm.Get_rank())
    rec = EventRecorder()
    _, stats = run(inp, head_m_size=seg, block_dim=R + 8, observers=(rec,), return_stats=True)
    M = R * seg
    base_n = stats.round_tilings[0].baseN
    pending, tiles, distinguishing = {}, 0, 0
    for e in rec.events:
        if isinstance(e, L2Hint) and e.core.startswith("AIC"):
            pending.setdefault(e.core, []).append(e)
        elif isinstance(e, Fixpipe):
            cur_m, cur_n = e.m, e.n
            hints = {h.tensor: h.mode for h in pending.pop(e.core, [])}
            full = cur_m >= M
            stream = full and (n * 2) % 128 == 0 and (cur_n * 2) % 128 == 0
            assert hints["scaleB"] == ("CACHE_MODE_DISABLE" if stream else "CACHE_MODE_NORMAL"), (e.core, cur_n)
            distinguishing += full and ((cur_n * 2) % 128 == 0) != ((base_n * 2) % 128 == 0)
            tiles += 1
    assert tiles == stats.tiles and not pending
    if R == 2:
        assert distinguishing > 0, "no tile whose own N extent and baseN disagree on the alignment"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize(("gen", "seg", "k", "n"), [(gen_qmrs_st_inputs, 32, 256, 72),
                                                    (gen_qmrs_signed_inputs, 64, 640, 300)])
def test_per_block_reads_an_nz_weight_with_the_launchers_tiling(gen, seg, k, n):
    """weight_format="NZ": B (K, N) in FRACTAL_NZ (`nd_to_nz`), scaleB (ceil(K/64), N, 2), as the ST launcher
    (ubmem main.cpp 0f2296ba3e / b993c14f LayoutB = nz_layout_ptn) passes them; the host tiles it with
    SetMaxBaseM(min(256, floor16(M / R))) and transB false, block_dim = usedCoreNum. N 72 and 300 leave a
    ragged C0 group (pad columns the copy reads and drops). y equals the golden of the ND weight, bit for bit,
    on the ST recipe (varied scaleB: its layout matters) and on signed data (the per-baseK rounding steps
    differ from the ND tiling's)."""
    from mc2emu.numerics.nz_format import nd_to_nz
    from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import per_block_tiling

    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    inp = gen(R * seg, k, n, rank)
    b_nz = nd_to_nz(np.ascontiguousarray(inp["x2"].T), inp["x2"].dtype)
    s_nz = np.ascontiguousarray(inp["x2_scale"].transpose(1, 0, 2))
    y, stats = quant_matmul_reduce_scatter(inp["x1"], inp["x1_scale"], b_nz, s_nz, impl="per_block",
                                           weight_format="NZ", kernel_variant="final_wait", timeout=TIMEOUT,
                                           return_stats=True)
    tiling = stats.round_tilings[0]
    E = ElemFormat.E4M3
    assert tiling == per_block_tiling(R * seg, n, k, R, E, E, True)
    assert tiling != per_block_tiling(R * seg, n, k, R, E, E, False)
    assert tiling.baseM <= max(16, seg // 16 * 16) and stats.block_dim == tiling.usedCoreNum
    assert_all_ranks(comm, np.array_equal(bits(y), bits(golden(comm, inp))), "NZ weight y")
