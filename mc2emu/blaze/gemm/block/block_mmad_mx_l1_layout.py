"""The L1 buffer maps of the MX BlockMmad: `InitNoneFullLoadL1BufferOffsets` (A and B streamed in kL1 chunks)
and `InitAFullLoadL1BufferOffsets` (A resident for all of K), the members of ops-tensor
`include/blaze/gemm/block/block_mmad_qbmm_mx.h` that `Init` calls, with the emulator's capacity check of
the map they produce (overlapping or out-of-L1 buffers raise `CapacityError`, where the device would
silently overwrite).

`L1BufferOffsets` is a base of `BlockMmadMx`: the members read the Init state (`kL1_`, `scaleKL1_`,
`l1BufNum_`, `k_`, `C0_SIZE`, `TOTAL_L1_SIZE`, `TRANS_A`, the AType) exactly as the source's do.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Generic, Protocol, TypeVar

import numpy as np

from mc2emu.blaze.gemm.common_utils import DOUBLE_BUFFER_COUNT, QUADRUPLE_BUFFER_COUNT, TRIPLE_BUFFER_COUNT
from mc2emu.numerics.constants import ALIGN_64_BYTES_SHIFT, MXFP_MULTI_BASE_SIZE
from mc2emu.numerics.formats import ElemFormat
from mc2emu.numerics.int_math import Align, Align16, Align64
from mc2emu.runtime.hazards import CapacityError
from mc2emu.runtime.local_memory import Position

if TYPE_CHECKING:
    from mc2emu.blaze.gemm.dispatch_policy import MatmulWithScaleMx
    from mc2emu.runtime.core import CoreContext

L1_BUF_NUMS = (DOUBLE_BUFFER_COUNT, TRIPLE_BUFFER_COUNT, QUADRUPLE_BUFFER_COUNT)  # l1BufNum the source lays out


class L1Template(Protocol):
    """What the L1 map reads of the BlockMmad template (`BlockMmadMxType`): the A operand's format."""

    @property
    def AType(self) -> ElemFormat: ...


TemplateT = TypeVar("TemplateT", bound=L1Template)


class L1BufferOffsets(Generic[TemplateT]):
    """The L1 map members of `BlockMmad` (see the module docstring); `T` is the template instantiation."""

    ctx: CoreContext
    T: TemplateT
    DispatchPolicy: MatmulWithScaleMx
    TOTAL_L1_SIZE: int
    TRANS_A: bool
    C0_SIZE: int
    k_: int
    kL1_: int
    scaleKL1_: int
    l1BufNum_: int
    baseM_: int
    baseN_: int

    def InitNoneFullLoadL1BufferOffsets(self, baseM: int, l1HalfBufNum: int, bL1OneBuffer: int,
                                        scaleBL1OneBuffer: int, biasL1OneBuffer: int) -> list[tuple[str, int, int]]:
        """The source's L1 map for streamed A and B; returns (name, offset, bytes) of every buffer."""
        sizeShift = 1 if self.T.AType.is_fp4 else 0
        halfL1Size = self.TOTAL_L1_SIZE >> 1
        aL1OneBuffer = (baseM * Align64(self.kL1_)) >> sizeShift
        scaleAL1OneBuffer = baseM * (Align64(self.scaleKL1_) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
        a = [0] * QUADRUPLE_BUFFER_COUNT
        b = [0] * QUADRUPLE_BUFFER_COUNT
        sa = [0] * DOUBLE_BUFFER_COUNT
        sb = [0] * DOUBLE_BUFFER_COUNT
        bias = [0] * DOUBLE_BUFFER_COUNT
        if self.l1BufNum_ == TRIPLE_BUFFER_COUNT:
            # L1 space: A0|A2|B0|B2|AScale0|BScale0|bias0|...|A1|B1|AScale1|BScale1|bias1
            a[0] = 0
            a[2] = a[0] + aL1OneBuffer
            b[0] = a[2] + aL1OneBuffer
            b[2] = b[0] + bL1OneBuffer
            sa[0] = b[2] + bL1OneBuffer
            sb[0] = sa[0] + scaleAL1OneBuffer
            bias[0] = sb[0] + scaleBL1OneBuffer
            a[1] = max(halfL1Size, bias[0] + biasL1OneBuffer)
            b[1] = a[1] + aL1OneBuffer
            sa[1] = b[1] + bL1OneBuffer
            sb[1] = sa[1] + scaleAL1OneBuffer
            bias[1] = sb[1] + scaleBL1OneBuffer
        else:
            # 2 buffer: A0|B0|AScale0|BScale0|bias0|...|A1|B1|AScale1|BScale1|bias1|...
            # 4 buffer: A0A2|B0B2|AScale0|BScale0|bias0|...|A1A3|B1B3|AScale1|BScale1|bias1|...
            for bufferId in range(self.l1BufNum_):
                l1Offset = halfL1Size * (bufferId & 1)
                a[bufferId] = l1Offset + aL1OneBuffer * (bufferId >> 1)
                b[bufferId] = l1Offset + aL1OneBuffer * l1HalfBufNum + bL1OneBuffer * (bufferId >> 1)
            scaleABaseOffset = bL1OneBuffer * l1HalfBufNum
            for bufferId in range(DOUBLE_BUFFER_COUNT):
                sa[bufferId] = b[bufferId] + scaleABaseOffset
                sb[bufferId] = sa[bufferId] + scaleAL1OneBuffer
                bias[bufferId] = sb[bufferId] + scaleBL1OneBuffer
        regions = [(f"A{i}", a[i], aL1OneBuffer) for i in range(self.l1BufNum_)]
        regions += [(f"B{i}", b[i], bL1OneBuffer) for i in range(self.l1BufNum_)]
        for i in range(DOUBLE_BUFFER_COUNT):
            regions += [(f"ScaleA{i}", sa[i], scaleAL1OneBuffer), (f"ScaleB{i}", sb[i], scaleBL1OneBuffer),
                        (f"Bias{i}", bias[i], biasL1OneBuffer)]
        return regions

    def InitAFullLoadL1BufferOffsets(self, baseM: int, l1HalfBufNum: int, bL1OneBuffer: int,
                                     scaleBL1OneBuffer: int, biasL1OneBuffer: int) -> list[tuple[str, int, int]]:
        """The source's L1 map with A (all of K) resident; returns (name, offset, bytes) of every buffer."""
        sizeShift = 1 if self.T.AType.is_fp4 else 0
        halfL1Size = self.TOTAL_L1_SIZE >> 1
        mAlign = Align(baseM, self.C0_SIZE) if self.TRANS_A else Align16(baseM)
        kAlign = Align64(self.k_)
        aL1OneBuffer = (mAlign * kAlign) >> sizeShift
        scaleAL1OneBuffer = baseM * (Align64(self.k_) >> ALIGN_64_BYTES_SHIFT) * MXFP_MULTI_BASE_SIZE
        b = [0] * QUADRUPLE_BUFFER_COUNT
        sb = [0] * DOUBLE_BUFFER_COUNT
        bias = [0] * DOUBLE_BUFFER_COUNT
        if self.l1BufNum_ == TRIPLE_BUFFER_COUNT:
            # B0|B2|BScale0|bias0|A|AScale|...|B1|BScale1|bias1
            b[0] = 0
            b[2] = b[0] + bL1OneBuffer
            sb[0] = b[2] + bL1OneBuffer
            bias[0] = sb[0] + scaleBL1OneBuffer
            a0 = bias[0] + biasL1OneBuffer
            sa0 = a0 + aL1OneBuffer
            b[1] = max(halfL1Size, sa0 + scaleAL1OneBuffer)
            sb[1] = b[1] + bL1OneBuffer
            bias[1] = sb[1] + scaleBL1OneBuffer
        else:
            # 2 buffer: B0|BScale0|bias0|A|AScale|...|B1|BScale1|bias1|
            a0 = bL1OneBuffer * l1HalfBufNum + scaleBL1OneBuffer + biasL1OneBuffer
            sa0 = a0 + aL1OneBuffer
            b1Offset = sa0 + scaleAL1OneBuffer if sa0 + scaleAL1OneBuffer >= halfL1Size else halfL1Size
            for bufferId in range(self.l1BufNum_):
                b[bufferId] = b1Offset * (bufferId & 1) + bL1OneBuffer * (bufferId >> 1)
            scaleBBaseOffset = bL1OneBuffer * l1HalfBufNum
            for bufferId in range(DOUBLE_BUFFER_COUNT):
                sb[bufferId] = b[bufferId] + scaleBBaseOffset
                bias[bufferId] = sb[bufferId] + scaleBL1OneBuffer
        regions = [("A", a0, aL1OneBuffer), ("ScaleA", sa0, scaleAL1OneBuffer)]
        regions += [(f"B{i}", b[i], bL1OneBuffer) for i in range(self.l1BufNum_)]
        for i in range(DOUBLE_BUFFER_COUNT):
            regions += [(f"ScaleB{i}", sb[i], scaleBL1OneBuffer), (f"Bias{i}", bias[i], biasL1OneBuffer)]
        return regions

    def _check_l1_regions(self, regions: list[tuple[str, int, int]]) -> None:
        used = [(name, off, size) for name, off, size in regions if size > 0]
        end = max((off + size for _, off, size in used), default=0)
        if end > self.TOTAL_L1_SIZE:
            worst = max(used, key=lambda r: r[1] + r[2])
            raise CapacityError(
                f"{self.ctx.label}: BlockMmad MX L1 buffer {worst[0]} [{worst[1]}, {worst[1] + worst[2]}) ends beyond "
                f"the {self.TOTAL_L1_SIZE} B L1 (baseM {self.baseM_}, baseN {self.baseN_}, kL1 {self.kL1_}, "
                f"scaleKL1 {self.scaleKL1_}, l1BufNum {self.l1BufNum_}, {self.DispatchPolicy.FULL_LOAD_MODE.name})")
        ordered = sorted(used, key=lambda r: r[1])
        for (n0, o0, s0), (n1, o1, _) in itertools.pairwise(ordered):
            if o0 + s0 > o1:
                raise CapacityError(
                    f"{self.ctx.label}: BlockMmad MX L1 buffers {n0} [{o0}, {o0 + s0}) and {n1} (from {o1}) overlap: "
                    f"one half of L1 ({self.TOTAL_L1_SIZE >> 1} B) cannot hold a buffer set for baseM {self.baseM_}, "
                    f"baseN {self.baseN_}, kL1 {self.kL1_}, scaleKL1 {self.scaleKL1_}")
        self.ctx.local.allocate(Position.A1, "BlockMmadMx", end, np.uint8)
