"""all_to_all_quant_matmul held against the public source (issue 13): the host's head tile, the limits,
window poison, the happens-before coverage of hcomm, the Finalize race and the state the source leaves
alone. Source: ops-transformer `mc2/common/op_kernel/apace` (libochao-huawei/ops-transformer, commit
bb298b1c5 for the CommPolicy version emulated, 5778144 for the later one)."""

import contextlib

import ml_dtypes
import numpy as np
import pytest

from mc2emu.numerics import bf16_ulp_distance, golden_mx_matmul
from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gathered_operand, gen_st_inputs, golden_a2a
from mc2emu.runtime import ConstraintError, DeadlockError, EventRecorder, HazardError, PerturbPolicy, Severity
from mc2emu.runtime.events import AtomicMode, HazardReported
from mc2emu.runtime.faults import Fault, FaultPlan

TIMEOUT = 30.0
ORI_M, N = 150, 200


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    kw.setdefault("timeout", TIMEOUT)
    return all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


def assert_all_ranks(comm, ok, what):
    flags = comm.allgather(bool(ok))
    assert all(flags), f"{what}: failed on ranks {[r for r, f in enumerate(flags) if not f]}"


# -- item 1: the hcomm head tile comes from the launched core count ------------------------------------
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("impl", ["hcomm", "udma"])
def test_head_tile_from_the_launched_core_count(impl):
    """CANN ST main.cpp: headMSize = CeilDiv(usedCoreNum, CeilDiv(n, baseN)) * baseM. 600 rows, one N
    tile, baseM 256: 2 launched cores give a 512-row head tile and an 88-row tail (commTurn 2), where 64
    cores would give one 600-row tile."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 600, 128, 64)
    block_dim = max(2, size) if impl == "udma" else 2
    c, info = run(inp, impl=impl, wait_order="in_order", block_dim=block_dim, return_stats=True)
    base_m, base_n, _ = info.base
    head = -(-info.block_dim // -(-64 // base_n)) * base_m
    ct = info.comm_tiling
    assert ct.splitAxisTileSize == head
    assert (ct.splitAxisTileCnt, ct.splitAxisTailSize, ct.splitAxisTailCnt) == (600 // head, 600 % head,
                                                                                1 if 600 % head else 0)
    if impl == "hcomm":
        assert (info.block_dim, base_m, base_n, ct.splitAxisTileSize, ct.commTurn) == (2, 256, 64, 512, 2)
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
    ulp = bf16_ulp_distance(c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
    assert_all_ranks(comm, ulp <= 1, f"{impl}: {ulp} ULP")


# -- item 5: BIAS_DOUBLE_ADD only where the REMOTE pass adds atomically (localMatmul 1) -------------------
@pytest.mark.mpi(min_size=2)
def test_hcomm_local_matmul_2_adds_bias_once():
    """localMatmul 2: isAtomicAdd_ = (REMOTE && localMatmul == 1) is false, so the REMOTE pass plain-writes
    over the LOCAL pass's C: bias once. AICPU: the REMOTE pass's Waits return -1 (beyond Commit) and C is
    the terms of ranks 0..R-2 plus the bias; no BIAS_DOUBLE_ADD."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 128, 64)
    bias = np.linspace(-4.0, 4.0, 64, dtype=np.float32)
    with pytest.raises(HazardError) as info:
        run(inp, impl="hcomm", local_matmul=2, hccl_server="aicpu", wait_order="in_order", block_dim=1,
            bias=bias)
    names = info.value.names()
    assert "HCCL_WAIT_BEYOND_COMMIT" in names and "BIAS_DOUBLE_ADD" not in names, names
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
    a, sa = gathered_operand(x1s, x1ss, r, 64)
    keep, ka, pairs = size - 1, 128, 2
    part = golden_mx_matmul(a[:, : keep * ka], sa[:, : keep * pairs], inp["x2"][:, : keep * ka],
                            inp["x2_scale"][:, : keep * pairs], "e4m3", "float32", trans_b=True)
    want = (part + bias).astype(ml_dtypes.bfloat16)
    ulp = bf16_ulp_distance(info.value.output, want)
    assert_all_ranks(comm, ulp <= 1, f"C = sum_(s <= R-2) term_s + bias once: {ulp} ULP")


# -- item 7: the flag limit is not hcomm's; HCCL repeats are uint8 ---------------------------------------
@pytest.mark.mpi(min_size=2)
def test_hcomm_runs_more_than_16_rounds():
    """hcomm waits on HCCL handles, not flag ids: 17 head tiles of 16 rows are one AlltoAll of repeat 17."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 17 * 16, 128, 64)
    c, stats = run(inp, impl="hcomm", wait_order="in_order", head_tile_size=16, block_dim=2, return_stats=True)
    assert stats.comm_tiling.commTurn == 17
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
    ulp = bf16_ulp_distance(c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
    assert_all_ranks(comm, ulp <= 1, f"{ulp} ULP")


@pytest.mark.mpi(min_size=2)
def test_hcomm_refuses_more_than_255_repeats():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 256 * 16, 64, 16)
    with pytest.raises(ConstraintError) as info:
        run(inp, impl="hcomm", wait_order="in_order", head_tile_size=16, block_dim=1)
    assert info.value.rule == "A2A-4 (hcomm) HCCL repeat <= 255"


# -- item 6: the HCCL session owner does not depend on thread timing -------------------------------------
@pytest.mark.mpi(min_size=2)
def test_aic_only_kernel_launched_mixed_reports_the_same_whatever_the_timing():
    """Launched MIX_AIC_1_1, the hcomm kernel's AIVs prepare too. The session belongs to the AICs whatever
    core Prepares first: every HCCL_WRONG_CORE_TYPE names an AIV, and the reports are the same on every
    run (here under three perturbation seeds)."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 128, 64)
    seen = []
    for seed in (1, 2, 3):
        rec = EventRecorder()
        with contextlib.suppress(HazardError):
            run(inp, impl="hcomm", wait_order="in_order", block_dim=2, timeout=10.0,
                faults=FaultPlan(Fault.AIV_JOINS_AIC_KERNEL, rank=r), observers=[rec],
                perturb=PerturbPolicy(seed, max_delay_s=2e-3))
        reports = sorted((e.hazard.value, e.core) for e in rec.of(HazardReported))
        wrong = [core for name, core in reports if name == "HCCL_WRONG_CORE_TYPE"]
        assert wrong and all(core.startswith("AIV") for core in wrong), reports
        seen.append(reports)
    assert seen[0] == seen[1] == seen[2], seen
    comm.Barrier()


# -- item 8: the Finalize race is filed where it can occur, and its hang is diagnosed --------------------
def _finalize_reports(rec):
    return [e for e in rec.of(HazardReported) if e.hazard.value == "HCCL_FINALIZE_WHILE_WAITING"]


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("server, block_dim", [("ccu", 4), ("aicpu", 1)])
def test_no_finalize_race_warning_where_it_cannot_occur(server, block_dim):
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, ORI_M, 128, N)
    rec = EventRecorder()
    _, stats = run(inp, impl="hcomm", hccl_server=server, wait_order="in_order", block_dim=block_dim,
                   observers=[rec], return_stats=True)
    assert stats.block_dim == block_dim
    assert _finalize_reports(rec) == []


@pytest.mark.mpi(min_size=2)
def test_finalize_race_with_several_aics_is_a_diagnosed_hazard():
    """AICPU, 4 AICs: block 0's Finalize<true> is not ordered after the other AICs' Waits. The warning is
    filed; when an AIC still owes a Wait at that Finalize, the outcome is a DeadlockError naming it and
    the finalized session (never an undiagnosed hang), else C is right."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, ORI_M, 128, N)
    rec = EventRecorder()
    outcome, text = "ok", ""
    try:
        c = run(inp, impl="hcomm", hccl_server="aicpu", wait_order="in_order", block_dim=4, observers=[rec],
                timeout=3.0)
    except DeadlockError as exc:
        outcome, text = "deadlock", "" if exc.declared_elsewhere else str(exc)
    except HazardError as exc:
        # Block 0's Finalize found AICs still owing Waits (filed as an error naming them) but they got through.
        outcome, text = "hazard", str(exc)
        assert "HCCL_FINALIZE_WHILE_WAITING" in exc.names(), exc.names()
        assert any(f"AIC{i}" in h.message for h in exc.hazards for i in (1, 2, 3)
                   if h.hazard.value == "HCCL_FINALIZE_WHILE_WAITING" and h.severity.value == "error"), text
    warn = [e for e in _finalize_reports(rec) if e.severity is Severity.WARNING]
    assert len(warn) == 1 and warn[0].core == "AIC0", _finalize_reports(rec)
    outcomes = comm.allgather(outcome)
    if "deadlock" in outcomes:
        texts = [t for t in comm.allgather(text) if t]
        assert texts, outcomes
        assert any("was finalized by the working block" in t and "HCCL session" in t for t in texts), texts
        assert any(f"AIC{i}" in t for t in texts for i in (1, 2, 3)), texts
        comm.Barrier()
    else:
        assert set(outcomes) <= {"ok", "hazard"}, outcomes
        x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
        ulp = 0 if outcome == "hazard" else bf16_ulp_distance(
            c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
        assert_all_ranks(comm, ulp <= 1, f"{ulp} ULP")


# -- item 3: every hcomm read before the Wait that orders it, with the byte range ------------------------
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("n, block_dim", [(200, 1), (512, 2)])
def test_hcomm_reads_before_their_wait_name_the_range_task_and_wait(n, block_dim):
    """150 rows, head tiles of 64 (repeats 0, 1 of the head handle) and a 22-row tail; one M block spans all
    three. Mask order: its dep is the tail, so the core Waits the tail handle only (proving tail repeat 0)
    and never the scale handle (waited at tile 0 only) before its mmads: the scaleA rows and both head
    repeats are read unordered. With 2 AICs (two N blocks) AIC1 is a CCU non-working core: its Wait proves
    what the working block's first Wait proved, so it is reported the same way."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    ori_m, ka, head = 150, 128, 64
    inp = gen_st_inputs(r, size, ori_m, ka, n)
    with pytest.raises(HazardError) as info:
        run(inp, impl="hcomm", wait_order="mask", head_tile_size=head, block_dim=block_dim)
    scale_rows = ori_m * 4                               # scaleKLen = 4 bytes per row for Ka = 128
    scale_part = -(-size * scale_rows // 512) * 512
    put_range = {0: lambda s, rep: (s * scale_rows, (s + 1) * scale_rows),
                 1: lambda s, rep: (scale_part + s * ori_m * ka + rep * head * ka,
                                    scale_part + s * ori_m * ka + (rep + 1) * head * ka)}
    rbw = [h for h in info.value.hazards if h.hazard.value == "READ_BEFORE_WAIT"]
    cores = [f"AIC{i}" for i in range(block_dim)]
    for core in cores:
        got = sorted((h.details["handle"], h.details["repeat"]) for h in rbw if h.core == core)
        assert got == [(0, 0), (1, 0), (1, 1)], (core, got)
    for h in rbw:
        d = h.details
        plo, phi = put_range[d["handle"]](d["put_rank"], d["repeat"])
        assert d["window"] == "hcomm_workspace" and d["put_rank"] != r and d["put_core"] == "HCCL-server"
        assert plo <= d["lo"] < d["hi"] <= phi, (d, plo, phi)
        assert f"bytes [{d['lo']}, {d['hi']})" in h.message and f"handle {d['handle']} repeat {d['repeat']}" \
            in h.message
        assert (f"{d['repeat'] + 1}-th Wait on handle {d['handle']}" in h.message) == (h.core == "AIC0")


@pytest.mark.mpi(min_size=2)
def test_hcomm_in_order_reads_are_all_ordered():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 150, 128, 512)
    c = run(inp, impl="hcomm", wait_order="in_order", head_tile_size=64, block_dim=2)   # raises on any hazard
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
    ulp = bf16_ulp_distance(c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
    assert_all_ranks(comm, ulp <= 1, f"{ulp} ULP")


# -- item 9: an AIV running the AIC-only kernel keeps what Init leaves unset ----------------------------
@pytest.mark.mpi(min_size=2)
def test_aivs_of_a_mixed_launch_never_set_the_atomic_mode():
    """localMatmul 1, launched MIX_AIC_1_1 by the fault: Init returns first on an AIV, so its isAtomicAdd_
    stays false and it never calls SetAtomicAdd (the AICs' REMOTE pass does)."""
    comm = world()
    r = comm.Get_rank()
    inp = gen_st_inputs(r, comm.Get_size(), 64, 128, 64)
    rec = EventRecorder()
    with contextlib.suppress(HazardError):
        run(inp, impl="hcomm", local_matmul=1, wait_order="in_order", block_dim=2, timeout=10.0,
            faults=FaultPlan(Fault.AIV_JOINS_AIC_KERNEL, rank=r), observers=[rec])
    atomic = {(e.core, e.dtype) for e in rec.of(AtomicMode)}
    assert {core for core, _ in atomic if core.startswith("AIV")} == set(), atomic
    assert any(core == "AIC0" and value is not None for core, value in atomic), atomic
    assert "AIV_RUNS_AIC_KERNEL" in {e.hazard.value for e in rec.of(HazardReported)}
    comm.Barrier()


# -- item 4: the UDMA launch that differs from the tiling is visible; the source's launch is available ---
@pytest.mark.mpi(min_size=2)
def test_udma_launch_raised_to_r_blocks_is_noted_and_the_source_launch_refused():
    """16 x 16 output: one tile, usedCoreNum 1 < R (the SWAT tiling uses every AIC unless a single tile is
    split). Without block_dim the host launches R blocks (AIV block r serves peer r) and says so;
    launch='source' launches usedCoreNum as the ST host does: constraint 5."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 16, 64, 16)
    c, info = run(inp, impl="udma", return_stats=True)
    assert (info.tiling_cores, info.block_dim) == (1, size)
    assert f"launched {size} blocks where the tiling's usedCoreNum is 1" in info.note
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
    ulp = bf16_ulp_distance(c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
    assert_all_ranks(comm, ulp <= 1, f"{ulp} ULP")
    with pytest.raises(ConstraintError) as refused:
        run(inp, impl="udma", launch="source")
    assert refused.value.rule.startswith("A2A-5") and f"{size} ranks but 1 AIV blocks" in str(refused.value)
    # the CLI's entry passes --launch through and hands the note to the table (tests/cli read the table)
    from mc2emu.cli.operators.all_to_all import A2AMode, A2AOptions, execute
    from mc2emu.cli.scenarios import Case, ExecContext, Shape
    from mc2emu.ops.all_to_all_quant_matmul_op import Impl, LaunchMode

    case = Case("all_to_all_quant_matmul", A2AMode(Impl.UDMA), Shape(16, 64, 16), None, 0, timeout=TIMEOUT)
    ctx = ExecContext(rank=r, size=size, comm=comm, timeout=TIMEOUT)
    np.testing.assert_array_equal(execute(case, inp, ctx).view(np.uint16), c.view(np.uint16))
    assert ctx.notes == [info.note]
    ctx = ExecContext(rank=r, size=size, comm=comm, timeout=TIMEOUT, options=A2AOptions(launch=LaunchMode.SOURCE))
    with pytest.raises(ConstraintError, match="A2A-5"):
        execute(case, inp, ctx)
    assert ctx.notes == []
