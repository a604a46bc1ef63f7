"""BlockSchedulerQuantBatchMatmulV3 (block_scheduler_qbmm.h) and the kernel's tile loop: every element of C
computed exactly once, for every block_dim, tail split, merged edge tiles and batch count.

The kernel control flow (UpdateTailTile condition, empty-piece return, batch loops, UpdateNextBatchBlockRound
Params) is exercised through the real GemmUniversalQbmmMx with a recording BlockMmad and a threadless core
context, so no GEMM runs and no thread starts."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from mc2emu.blaze import (
    A_FULL_LOAD_MODE,
    NONE_FULL_LOAD_MODE,
    BlockCoord,
    BlockSchedulerQbmmParams,
    BlockSchedulerQuantBatchMatmulV3,
    DNExtLayoutPtn,
    L1Params,
    MatmulWithScaleMx,
    NDExtLayoutPtn,
    Params,
    ProblemShape,
    QbmmMxParams,
    QbmmMxRevision,
    QBMMTiling,
)
from mc2emu.blaze.gemm.kernel.kernel_qbmm_mx import GemmUniversalQbmmMx
from mc2emu.numerics import ElemFormat
from mc2emu.runtime import Device
from mc2emu.runtime.hazards import HazardLog
from mc2emu.tiling import QuantMatmulTilingSwat

C_ITEM = 2  # bf16 C


class FakeCore:
    """The slice of CoreContext the scheduler and the kernel's control flow use (no threads)."""

    ASCEND_IS_AIV = False
    ASCEND_IS_AIC = True

    def __init__(self, idx: int, num: int, device: Any, ration: int = 1) -> None:
        self.idx, self.num, self.ration = idx, num, ration
        self.device = device
        self.label = f"AIC{idx}"
        self.atomic_dtype = None

    def GetBlockIdx(self) -> int:
        return self.idx

    def GetBlockNum(self) -> int:
        return self.num

    def GetTaskRation(self) -> int:
        return self.ration

    def SetAtomicAdd(self, dtype: Any) -> None:
        self.atomic_dtype = dtype

    def SetAtomicNone(self) -> None:
        self.atomic_dtype = None

    def emit(self, *args: Any, **kw: Any) -> None:
        pass


@dataclass
class Recorder:
    """A BlockMmad stand-in that records (batch, mPos, nPos, m, n) per call."""

    m: int
    n: int
    calls: list = field(default_factory=list)

    def Init(self, *args: Any) -> None:
        pass

    def __call__(self, gmA, gmB, gmScaleA, gmScaleB, gmBias, gmC, singleShape, splitKIdx=0) -> None:
        batch = gmC.addr.offset // (self.m * self.n * C_ITEM)
        self.calls.append((batch, *gmC.origin, singleShape[0], singleShape[1]))


@dataclass
class FakeBlockMmadType:
    transA: bool
    transB: bool
    rec: Recorder
    AType: ElemFormat = ElemFormat.E4M3
    BType: ElemFormat = ElemFormat.E4M3
    CType: Any = np.float16
    BiasType: Any = np.float32
    weightNz: bool = False

    def __post_init__(self) -> None:
        self.DispatchPolicy = MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False)
        self.LayoutA = DNExtLayoutPtn if self.transA else NDExtLayoutPtn
        self.LayoutB = DNExtLayoutPtn if self.transB else NDExtLayoutPtn
        self.LayoutC = NDExtLayoutPtn
        self.CType, self.BiasType = np.dtype(self.CType), np.dtype(self.BiasType)

    def __call__(self, ctx: Any) -> Recorder:
        return self.rec


def run_schedule(m: int, n: int, sch: BlockSchedulerQbmmParams, block_dim: int, *, trans_a=False, trans_b=False,
                 batch=1, fmt=ElemFormat.E4M3, full_load=NONE_FULL_LOAD_MODE) -> tuple[np.ndarray, list, HazardLog]:
    """Drive the real kernel on every core; returns the per-element call count (batch, m, n)."""
    dev = Device(check=True)
    addr = dev.gm.alloc(1, "x")  # no data is read: the BlockMmad only records
    log = HazardLog(0)
    count = np.zeros((batch, m, n), dtype=np.int32)
    calls_all = []
    bigaddr = dev.gm.alloc(batch * m * n * C_ITEM, "C")
    for core in range(block_dim):
        rec = Recorder(m, n)
        T = FakeBlockMmadType(trans_a, trans_b, rec, fmt, fmt)
        ctx = FakeCore(core, block_dim, type("D", (), {"hazards": log, "platform": dev.platform})())
        Sched = BlockSchedulerQuantBatchMatmulV3.template(full_load, T.LayoutA, T.LayoutB, fmt)
        kernel = GemmUniversalQbmmMx(ctx, T, Sched, QbmmMxRevision.CC21C0D6)
        params = QbmmMxParams(ProblemShape(m, n, 64, batch), Params(addr, addr, bigaddr, None, addr, addr),
                              L1Params(64, 64, 2), sch,
                              QBMMTiling(batchA1=batch, batchB1=batch, batchC1=batch, baseM=sch.baseM,
                                         baseN=sch.baseN, baseK=64))
        kernel(params)
        for b, mp, np_, tm, tn in rec.calls:
            count[b, mp:mp + tm, np_:np_ + tn] += 1
        calls_all.append(rec.calls)
    return count, calls_all, log


def tiling_params(m: int, n: int, block_dim: int, trans_a: bool, trans_b: bool, k: int = 256,
                  fmt=ElemFormat.E4M3) -> BlockSchedulerQbmmParams:
    t = QuantMatmulTilingSwat(aic_num=block_dim).GetTilingData(m, n, k, trans_a, trans_b, fmt)
    return BlockSchedulerQbmmParams(t.baseM, t.baseN, t.mTailTile, t.nTailTile, t.mBaseTailSplitCnt,
                                    t.nBaseTailSplitCnt, t.mTailMain, t.nTailMain)


BLOCK_DIMS = [1, 2, 3, 5, 8, 13, 16, 31, 32]


@pytest.mark.parametrize("block_dim", BLOCK_DIMS)
@pytest.mark.parametrize(("trans_a", "trans_b"), [(False, False), (False, True), (True, True)])
def test_every_element_exactly_once_with_host_tiling(block_dim, trans_a, trans_b):
    """Shapes from 1 x 1 to 6 x 6 tiles, with the SWAT tiling's own tail split and merged edges."""
    for mt, nt in itertools.product(range(1, 7), range(1, 7)):
        m, n = mt * 48 - 5, nt * 40 - 3  # odd sizes: every tile count has a ragged last tile
        sch = tiling_params(m, n, block_dim, trans_a, trans_b, k=512)
        count, _, log = run_schedule(m, n, sch, block_dim, trans_a=trans_a, trans_b=trans_b)
        assert np.all(count == 1), (m, n, block_dim, sch, np.unique(count, return_counts=True))
        assert not log.peek()


@pytest.mark.parametrize("block_dim", [1, 3, 6, 8, 13, 32])
def test_every_element_exactly_once_with_forced_tail_splits(block_dim):
    base = 64
    for mt, nt, mTail, nTail in itertools.product(range(1, 6), range(1, 6), (1, 2, 3, 4), (1, 2, 3)):
        m, n = mt * base - 7, nt * base - 9
        sch = BlockSchedulerQbmmParams(base, base, mTail, nTail)
        count, _, _ = run_schedule(m, n, sch, block_dim)
        assert np.all(count == 1), (m, n, block_dim, mTail, nTail)


@pytest.mark.parametrize("block_dim", [1, 2, 5, 8, 32])
def test_merged_edge_tiles(block_dim):
    """mBaseTailSplitCnt / nBaseTailSplitCnt merged tails of mTailMain / nTailMain rows (transB for N)."""
    m, n = 4 * 128 + 40, 5 * 128 + 24
    sch = BlockSchedulerQbmmParams(128, 128, 1, 1, mBaseTailSplitCnt=3, nBaseTailSplitCnt=2, mTailMain=112,
                                   nTailMain=80)
    count, calls, _ = run_schedule(m, n, sch, block_dim, trans_b=True)
    assert np.all(count == 1)
    shapes = {(c[3], c[4]) for core in calls for c in core}
    assert {s[0] for s in shapes} == {128, 112, m - 2 * 128 - 2 * 112}  # normal, merged main, merged last
    assert {s[1] for s in shapes} == {128, 80, n - 4 * 128 - 80}


@pytest.mark.parametrize("block_dim", [1, 3, 7, 8, 16, 32])
@pytest.mark.parametrize("batch", [2, 3, 5])
def test_every_element_of_every_batch_once(block_dim, batch):
    for mt, nt in itertools.product(range(1, 5), range(1, 5)):
        m, n = mt * 64 - 3, nt * 64 - 1
        sch = tiling_params(m, n, block_dim, False, True)
        count, _, _ = run_schedule(m, n, sch, block_dim, trans_b=True, batch=batch)
        assert np.all(count == 1), (m, n, block_dim, batch, sch)


def test_window_order_and_serpentine():
    """mCnt 6, nCnt 3, WINDOW_LEN 4 -> one window of 6 rows (4 + tail 2 merge into the last window), N walked
    M-fastest; with mCnt 9: window 0 rows 0-3, window 1 rows 4-8 with N reversed."""
    dev = Device()
    order = []
    for core in range(27):
        bs = BlockSchedulerQuantBatchMatmulV3((9 * 16, 3 * 16, 64, 1), BlockSchedulerQbmmParams(16, 16),
                                              FakeCore(core, 27, dev))
        c = BlockCoord()
        assert bs.GetTileIdx(c)
        order.append((c.m, c.n))
        assert not bs.GetTileIdx(c)
    assert order[:12] == [(m, n) for n in range(3) for m in range(4)]
    assert order[12:] == [(m, n) for n in (2, 1, 0) for m in range(4, 9)]


def test_window_len_is_a_parameter():
    dev = Device()
    Sched = BlockSchedulerQuantBatchMatmulV3.template(window_len=2)
    by_logical = {}
    for core in range(4):
        bs = Sched((4 * 16, 2 * 16, 64, 1), BlockSchedulerQbmmParams(16, 16), FakeCore(core, 4, dev))
        for rnd, c in enumerate(bs.tiles()):
            by_logical[core + rnd * 4] = (c.m, c.n)  # core c takes logical tiles c, c + blockNum, ...
    order = [by_logical[i] for i in range(8)]
    assert order == [(0, 0), (1, 0), (0, 1), (1, 1), (2, 1), (3, 1), (2, 0), (3, 0)]


def test_tail_pieces_can_be_empty_and_the_kernel_returns():
    """A 5-row tile split 4 ways: pieces of ceil(5 / 4) = 2 rows at 0, 2, 4 and an empty one ({0, 0})."""
    dev = Device()
    sch = BlockSchedulerQbmmParams(16, 64, mTailTile=4, nTailTile=1)
    shapes = []
    for core in range(4):
        bs = BlockSchedulerQuantBatchMatmulV3((5, 64, 64, 1), sch, FakeCore(core, 4, dev))
        bs.UpdateTailTile(4, 1)
        shapes += [tuple(bs.GetBlockShape(c)) for c in bs.tiles()]
    assert sorted(shapes) == [(0, 0, 0, 0), (1, 64, 4, 0), (2, 64, 0, 0), (2, 64, 2, 0)]
    count, _, log = run_schedule(5, 64, sch, 4)
    assert np.all(count == 1)
    assert not log.peek()  # single batch: the early return skips nothing that matters


def test_a_full_load_keeps_one_m_block_per_core():
    dev = Device()
    m_of_core = {}
    for core in range(8):
        bs = BlockSchedulerQuantBatchMatmulV3((2 * 32, 8 * 32, 64, 1), BlockSchedulerQbmmParams(32, 32),
                                              FakeCore(core, 8, dev), fullLoadMode=A_FULL_LOAD_MODE)
        m_of_core[core] = {c.m for c in bs.tiles()}
    assert all(len(v) == 1 for v in m_of_core.values())
    count, _, _ = run_schedule(64, 256, BlockSchedulerQbmmParams(32, 32), 8, full_load=A_FULL_LOAD_MODE)
    assert np.all(count == 1)
