"""Host side of one all_gather_quant_matmul call on one rank (the ST host `RunAllGatherQuantMatmul`): tile,
allocate, launch, read back. It owns the problem type (`AgProblem`, `AgProtocol`) the entry validates.

Allocation note: the TAIL gather of the kernel reads paddedTailM rows from every rank's tail start, i.e.
paddedTailM - tailM rows past the end of this rank's A / scaleA and past the last rank's data and scale
regions of the window. The ST host allocates exactly m rows (`aclrtMalloc(..., ACL_MEM_MALLOC_HUGE_ONLY)`: on
the device the over-read lands in the rest of the huge page) and the window is the whole HCCL buffer
(`udmaCtx_->commBufferAddrs[rankId_]`, udma impl @5778144076): the rows it feeds are dropped by the scatter.
Here the host pads A and scaleA with zero rows and sizes the window to the over-read's end.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import numpy as np

from mc2emu.apace.all_gather_mx_matmul_udma_impl import AgUdmaArgs, all_gather_quant_matmul_udma
from mc2emu.apace.all_gather_mx_matmul_urma_impl import (
    AgUrmaArgs,
    all_gather_quant_matmul_urma,
    normalized_slot_num,
    slot_sizes,
)
from mc2emu.apace.all_gather_qbmm_mx_kernel import AG_WINDOW_LEN, AgKernelVariant, FragmentParams, Params, QBMMTiling
from mc2emu.apace.basic.buffer_channel import FLAG_ID_MODULO
from mc2emu.apace.block.qmm_mx_block_mmad_fragment import QmmMxBlockMmadFragment
from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn
from mc2emu.comm.shmem import Shmem
from mc2emu.host.call_options import CallOptions
from mc2emu.host.collective import refuse
from mc2emu.host.harness import LaunchHarness
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.payload import contiguous
from mc2emu.numerics.scale_layout import scale_k_len
from mc2emu.runtime.hazards import HazardReport
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.tiling.all_gather_quant_matmul_tiling import (
    ag_constraint_violations,
    ag_matmul_tiling,
    make_ag_comm_tiling,
)

KERNEL_NAME = "all_gather_quant_matmul"
KERNEL_TYPE = KernelType.MIX_AIC_1_1


class AgProtocol(enum.Enum):
    SEED = "seed"            # every round in its own window rows (UDMA impl, 5778144076)
    SLOT_RING = "slot_ring"  # window reuse through a ring of slot_num slots (URMA impl, 67a83540d75e)


@dataclass(frozen=True)
class AgProblem:
    """The validated problem of one rank (filled by the entry, `all_gather_quant_matmul_op.py`)."""

    rank: int
    rank_size: int
    m: int
    k: int
    n: int
    elem: ElemFormat
    b_elem: ElemFormat
    out: OutDtype
    wait_order: WaitOrder
    variant: AgKernelVariant
    protocol: AgProtocol = AgProtocol.SEED
    slot_num: int = 0
    has_bias: bool = False
    tile_m: int | None = None   # None: the ST host's tileM = min(512, m)


@dataclass(frozen=True)
class AgLaunchInfo:
    """What the host learnt about the launch (`return_stats=True`)."""

    block_dim: int
    base: tuple[int, int, int]
    comm_tiling: Any
    mm_tiling: Any
    wall_s: float
    tiles: int


def _padded(arr: np.ndarray, pad_rows: int) -> np.ndarray:
    u8 = contiguous(arr).view(np.uint8).reshape(arr.shape[0], -1)
    if pad_rows == 0:
        return u8
    return np.concatenate([u8, np.zeros((pad_rows, u8.shape[1]), dtype=np.uint8)], axis=0)


def run_ag(problem: AgProblem, x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray,
           opts: CallOptions, *, block_dim: int | None, bias: np.ndarray | None = None
           ) -> tuple[np.ndarray, list[HazardReport], AgLaunchInfo]:
    R, rank = problem.rank_size, problem.rank
    m, k, n = problem.m, problem.k, problem.n
    # Tiling before any collective set-up: a refused tiling is refused on every rank (same shapes).
    ct = make_ag_comm_tiling(m, k, problem.tile_m)
    mm = ag_matmul_tiling(ct, R, n, problem.elem, DAV_3510, block_dim)
    # block_dim None: as the all-to-all host, a tiny problem still launches R blocks (AIV block r serves peer r);
    # the extra AICs find no tile and only drain their waits. A given block_dim is launched as given, as the ST
    # launcher launches usedCoreNum with no check against R: below R the impls report PEER_NOT_SERVED.
    used = mm.usedCoreNum if block_dim is not None else max(mm.usedCoreNum, R)
    refuse(ag_constraint_violations(m, k, n, R, slot_ring=problem.protocol is AgProtocol.SLOT_RING))
    rowBytes = k
    scaleRowBytes = scale_k_len(k)
    pad = ct.paddedTailM - ct.tailM
    with LaunchHarness(KERNEL_NAME, opts, platform=DAV_3510) as h:
        gm = h.device.gm
        x1_addr = gm.alloc(0, "x1", data=_padded(x1, pad))
        x1s_addr = gm.alloc(0, "x1_scale", data=_padded(x1_scale, pad))
        x2_addr = gm.alloc(0, "x2", data=contiguous(x2).view(np.uint8))
        x2s_addr = gm.alloc(0, "x2_scale", data=contiguous(x2_scale).view(np.uint8))
        out_dtype = problem.out.dtype
        c_addr = gm.alloc(R * m * n * out_dtype.itemsize, "y")
        bias_addr = None if bias is None else gm.alloc(
            0, "bias", data=contiguous(bias, np.float32).reshape(1, n))
        BlockMmadFragC = QmmMxBlockMmadFragment.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False),
                                                         problem.elem, NDExtLayoutPtn, problem.b_elem,
                                                         DNExtLayoutPtn, problem.out)
        BlockScheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn,
                                                                   DNExtLayoutPtn, problem.elem,
                                                                   window_len=AG_WINDOW_LEN)
        assert h.world is not None
        fp = FragmentParams(ct.tileCnt, ct.tileM, ct.tailCnt, ct.tailM, ct.paddedTailM, ct.commTurn, ct.headRows,
                            rank, R, m, k, n, scaleRowBytes)
        slotRing = problem.protocol is AgProtocol.SLOT_RING
        if slotRing:
            # URMA impl: bufferCount_ data slots, then commTurn scale slots (R - 1 packed remote tiles each)
            dataSlot, scaleSlot = slot_sizes(fp, rowBytes, scaleRowBytes)
            slots = normalized_slot_num(problem.slot_num, ct.commTurn)
            # + baseM rows: a MAIN block crossing its round's end reads on past the last slot (the source's
            # plain-tensor slice is unchecked; on the device the rows land past the window's used part)
            dataRegionBytes = slots * dataSlot
            winBytes = dataRegionBytes + ct.commTurn * scaleSlot + mm.baseM * rowBytes
        else:
            # The source's window is the HCCL buffer (`commBufferAddrs[rankId_]`): data then scale, R * m rows
            # each. The TAIL reads paddedTailM rows from the last rank's tail start in both regions: `pad` data
            # rows past the data region (into the scale region and, at small R * m, past it) and `pad` scale rows
            # past the scale region; the window holds the farther end (on the device: stale buffer bytes).
            dataRegionBytes = R * m * rowBytes
            winBytes = dataRegionBytes + max((R * m + pad) * scaleRowBytes, pad * rowBytes)
        win = h.data_window(max(winBytes, 1), "udma_all_gather")
        winData, winScale = win.addr(0), win.addr(dataRegionBytes)
        if slotRing and win.base is not None:
            win.base.alloc.describe = _slot_describer(dataRegionBytes, dataSlot, scaleSlot,
                                                      max(ct.tileM, ct.tailM), rowBytes, scaleRowBytes, rank, R)
        elif win.base is not None:
            win.base.alloc.describe = _seed_describer(dataRegionBytes, m, ct.tileM, rowBytes, scaleRowBytes, R)
        team = h.team_barrier(R)
        shmem = Shmem(h.world)
        params = Params(mm, QBMMTiling(mm.baseM, mm.baseN, mm.baseK, mm.dbL0c), fp, x1_addr, x1s_addr, x2_addr,
                        x2s_addr, c_addr, winData, winScale, rowBytes, scaleRowBytes, n * out_dtype.itemsize,
                        biasGM=bias_addr, isBias=bias_addr is not None)
        if slotRing:
            uargs = AgUrmaArgs(params, shmem, team, problem.slot_num, problem.variant)
            res = h.launch(all_gather_quant_matmul_urma, used, KERNEL_TYPE, uargs, BlockMmadFragC, BlockScheduler)
        else:
            args = AgUdmaArgs(params, shmem, team, problem.wait_order, problem.variant)
            res = h.launch(all_gather_quant_matmul_udma, used, KERNEL_TYPE, args, BlockMmadFragC, BlockScheduler)
        c = h.read(c_addr, out_dtype, (R * m, n))
    info = AgLaunchInfo(used, (mm.baseM, mm.baseN, mm.baseK), ct, mm, res.wall_s,
                        sum(v for v in res.returns.values() if isinstance(v, int)))
    return c, h.hazards, info


def _seed_describer(dataRegionBytes: int, m: int, tileM: int, rowBytes: int, scaleRowBytes: int, R: int) -> Any:
    """Names the seed-window place of a byte offset (for the happens-before diagnoses): region, source rank,
    round and the flag id its round signals with (round + 1; ids >= 16 name the 4-bit id the hardware uses,
    which an earlier round's Set on the same id can satisfy: the mask kernel's aliasing from commTurn 16 on)."""
    ids = DAV_3510.flag_id_count

    def describe(offset: int) -> str:
        if offset < dataRegionBytes:
            region, inside, perRow = "data", offset, rowBytes
        else:
            region, inside, perRow = "scale", offset - dataRegionBytes, scaleRowBytes
        if not perRow or not m or not tileM:
            return ""
        src, row = divmod(inside // perRow, m)
        rnd = row // tileM
        flag = rnd + 1
        hw = ""
        if flag >= ids:
            eff = flag & (ids - 1)
            hw = f" (the hardware's id {eff}, shared with {'HEAD' if eff == 0 else f'round {eff - 1}'})"
        return f"{region} rows of rank {src if src < R else '?'}, round {rnd}: flag {flag}{hw}"

    return describe


def _slot_describer(dataRegionBytes: int, dataSlot: int, scaleSlot: int, maxTileM: int, rowBytes: int,
                    scaleRowBytes: int, rank: int, R: int) -> Any:
    """Names the slot-ring place of a window byte offset (for the happens-before diagnoses): region, slot, the
    flag id its rounds signal with (slot % 11 + 1) and the source rank of the packed remote tile."""

    def describe(offset: int) -> str:
        if offset < dataRegionBytes and dataSlot:
            slot, inside = divmod(offset, dataSlot)
            region, flag = "data", f", flag {slot % FLAG_ID_MODULO + 1}"
            per = maxTileM * rowBytes
        elif scaleSlot:
            slot, inside = divmod(offset - dataRegionBytes, scaleSlot)
            region, flag = "scale", ""
            per = maxTileM * scaleRowBytes
        else:
            return ""
        remoteIdx = inside // per if per else 0
        src = remoteIdx + 1 if remoteIdx >= rank else remoteIdx
        return f"{region} slot {slot}{flag}, the tile from rank {src if src < R else '?'}"

    return describe
