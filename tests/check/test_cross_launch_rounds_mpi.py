"""The design-spec reduce-scatter kernel (quant_matmul_reduce_scatter impl "rounds") launched twice back to back
on the raw API (one `Device` + one `CommWorld` per rank, the host's parameters as
ops/quant_matmul_reduce_scatter_host.py builds them, one data window and one TeamBarrier for both launches).

Round t's rows are reduced in iteration t + 1, before that iteration's CrossDevice, and the last round after the
loop with no barrier after it. With T >= 2 rounds every put of launch 1 is ordered after the peers' reads of
launch 0 (round 0's rows behind the CrossDevice of round 1; later rounds behind launch 1's own CrossDevice of
round 0): no cross-launch report. With T = 1 round 0 is the last round and launch 1 puts it before any
CrossDevice: WRITE_AFTER_READ_ACROSS_LAUNCH against the final ReduceSum of launch 0. An unrecorded host barrier
between the launches keeps the race from happening here; the checker judges the kernel alone.
"""

import numpy as np
import pytest

from mc2emu.apace.block.qmm_mx_block_mmad_fragment import QmmMxBlockMmadFragment
from mc2emu.apace.block_epilogue_all_to_all import BF16
from mc2emu.apace.qmm_mx_kernel_rs_frag import RS_WINDOW_LEN
from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import (
    RsKernelVariant,
    RsRoundsArgs,
    quant_matmul_reduce_scatter_rounds,
)
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn
from mc2emu.check.cross_launch import CrossLaunchChecker
from mc2emu.comm.shmem import Shmem
from mc2emu.comm.team_barrier import TeamBarrier
from mc2emu.comm.world import CommWorld
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.ops.quant_matmul_reduce_scatter_golden import gen_qmrs_st_inputs, golden_quant_matmul_reduce_scatter
from mc2emu.runtime import Device
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import make_rs_comm_tiling, rs_round_tiling

K, N = 128, 48
LAUNCHES = 2
CROSS_LAUNCH = {"WRITE_AFTER_READ_ACROSS_LAUNCH", "STALE_READ", "STALE_FLAG", "LOST_SIGNAL", "LEFT_AT_LOOP_END"}
# rows per rank segment, head_m_size -> T
CASES = {"one_round": (32, None), "two_rounds": (48, 32)}


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def rounds_loop(comm, seg, head, *, host_barrier=True, perturb=None):
    R, rank = comm.Get_size(), comm.Get_rank()
    m, elem, out = R * seg, ElemFormat.E4M3, OutDtype.BF16
    used = R + 2
    ct = make_rs_comm_tiling(m, R, head, N)
    tilings = tuple(rs_round_tiling(R * ct.tile_m(t), N, K, elem, elem, DAV_3510, used) for t in range(ct.commTurn))
    cBytesPerM = N * BF16.itemsize
    dev = Device(rank, timeout=30.0, perturb=perturb)
    cw = CommWorld(dev, comm)
    xl = CrossLaunchChecker(dev, comm)
    try:
        gm = dev.gm
        staging = gm.alloc(m * cBytesPerM, "staging")
        win = cw.window(R * ct.mSeg * cBytesPerM, "qmrs_data")
        team = TeamBarrier(cw, jobs=1, name="qmrs_team_barrier")
        shmem = Shmem(cw)
        Mmad = QmmMxBlockMmadFragment.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False), elem, NDExtLayoutPtn,
                                               elem, DNExtLayoutPtn, out)
        Scheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn, DNExtLayoutPtn,
                                                              elem, window_len=RS_WINDOW_LEN)
        inputs = [gen_qmrs_st_inputs(m, K, N, rank, seed_base=1000 * i + 42) for i in range(LAUNCHES)]
        ys = []
        for i, inp in enumerate(inputs):
            a, as_, b, bs = (gm.alloc(0, f"{name}{i}", data=np.ascontiguousarray(inp[name]).view(np.uint8))
                             for name in ("x1", "x1_scale", "x2", "x2_scale"))
            y = gm.alloc(ct.mSeg * cBytesPerM, f"y{i}")
            ys.append(y)
            args = RsRoundsArgs(rank, R, ct, tilings, K, N, scale_k_len(K), a, as_, b, bs, staging, y, win.addr(0),
                                shmem, team, RsKernelVariant.SOURCE, None)
            dev.launch(quant_matmul_reduce_scatter_rounds, used, "MIX_AIC_1_1", args, Mmad, Scheduler)
            if host_barrier:
                cw.barrier()      # not recorded: the checker still judges the kernel alone
        cw.barrier()
        xl.finish()
        got = [np.array(dev.gm.view(y, out.dtype, (ct.mSeg, N))) for y in ys]
        golden = []
        for inp in inputs:
            al = {key: comm.allgather(v) for key, v in inp.items()}
            golden.append(golden_quant_matmul_reduce_scatter(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], rank))
        return ct.commTurn, got, golden, dev.hazards.take()
    finally:
        xl.close()
        cw.close()


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", list(CASES))
def test_rounds_back_to_back_is_safe_from_two_rounds_and_races_at_one(case):
    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    turns, got, golden, reports = rounds_loop(comm, *CASES[case])
    assert turns == (1 if case == "one_round" else 2)
    for y, g in zip(got, golden, strict=True):
        assert np.array_equal(y.view(np.uint16), np.asarray(g).view(np.uint16))
    names = sorted({h.hazard.value for h in reports} & CROSS_LAUNCH)
    if turns >= 2:
        assert names == [], [str(h) for h in reports]
        return
    assert names == ["WRITE_AFTER_READ_ACROSS_LAUNCH"], [str(h) for h in reports]
    war = [h for h in reports if h.hazard.value == "WRITE_AFTER_READ_ACROSS_LAUNCH"]
    assert all((h.details["launch"], h.details["put_launch"]) == (0, 1) and h.details["window"] == "qmrs_data"
               for h in war)
    assert {h.details["put_rank"] for h in war} == set(range(R)) - {rank}


# Through the Python API on a Communicator (2 launches, no host barrier): x1 has M rows on every rank, y M / R
# (the CLI's --m is M / R). head_m_size 16, block_dim R + 3 (5 at R = 2): M = 16 R is one round (mSeg 16 =
# headMSize: the reported configuration at R = 2, M = 32), M = 32 R two (clean).
API_CASES = {"M16R_one_round": (16, 1), "M32R_two_rounds": (32, 2)}


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("data", [True, False], ids=["full", "protocol_only"])
@pytest.mark.parametrize("case", list(API_CASES))
def test_api_loop_reports_the_one_round_race_and_not_two_rounds(case, data):
    from mc2emu import Communicator
    from mc2emu.ops import quant_matmul_reduce_scatter

    comm = world()
    R, rank = comm.Get_size(), comm.Get_rank()
    rows, turns = API_CASES[case]
    m = rows * R
    ct = make_rs_comm_tiling(m, R, 16, N)
    assert (ct.mSeg, ct.commTurn) == (rows, turns)
    inp = gen_qmrs_st_inputs(m, K, N, rank)
    with Communicator(comm, buffer_size=1 << 22, timeout=60.0, data=data) as xc:
        ys = [quant_matmul_reduce_scatter(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], impl="rounds",
                                          head_m_size=16, block_dim=R + 3, comm=xc, data=data)
              for _ in range(LAUNCHES)]
        reports = xc.sync()
    names = sorted({h.hazard.value for h in reports} & CROSS_LAUNCH)
    if data:
        al = {key: comm.allgather(v) for key, v in inp.items()}
        g = np.asarray(golden_quant_matmul_reduce_scatter(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], rank))
        # the last launch's window is never overwritten; at T = 1 launch 0's could be (the race)
        for y in ys if turns >= 2 else ys[-1:]:
            assert np.array_equal(np.asarray(y).view(np.uint16), g.view(np.uint16))
    if turns >= 2:
        assert names == [], [str(h) for h in reports]
        return
    assert names == ["WRITE_AFTER_READ_ACROSS_LAUNCH"], [str(h) for h in reports]
    war = [h for h in reports if h.hazard.value == "WRITE_AFTER_READ_ACROSS_LAUNCH"]
    assert all((h.details["launch"], h.details["put_launch"]) == (0, 1) for h in war)
    assert {h.details["put_rank"] for h in war} == set(range(R)) - {rank}
    # the compute cores' final ReduceSum reads cover every peer slot's round-0 rows (slot j at j * chunkBytes)
    chunk = ct.mSeg * N * BF16.itemsize
    covered = set()
    for h in war:
        covered |= set(range(h.details["lo"], h.details["hi"]))
    slots = [set(range(j * chunk, (j + 1) * chunk)) for j in range(R) if j != rank]
    assert covered <= set().union(*slots) and all(covered & slot for slot in slots)   # every peer slot, no other
    if R == 2:   # its one peer slot exactly (at 4 ranks part of a slot went unnamed in one run: not pinned)
        assert covered == slots[0]
