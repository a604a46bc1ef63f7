"""Host tiling of all_gather_quant_matmul: the ST host's communication tiles, the SWAT matmul tiling of the
logical M, and the operator's constraints.

Sources (ops-transformer, commit 5778144076):
- `mc2/common/op_kernel/apace/tests/st/all_gather_quant_matmul/src/main.cpp` (`RunAllGatherQuantMatmul`):
  tileM = min(TILE_M = 512, m), tileCnt = m / tileM, tailM = m % tileM, tailCnt = (tailM > 0),
  paddedTailM = align16(tailM), totalLogicalM = R * (tileCnt * tileM + tailCnt * paddedTailM); the matmul
  tiling is `QuantMatmulTilingSwat` with `SetOptimizeEnable(false)` (which switches off only
  `OptimizeEdgeBasicBlock`: `AdjustBasicBlock` still runs) and `SetMTailAlignEnable(true)`; `ParseArgs`
  refuses K % 32 != 0 and an odd CeilDiv(K, 64).
- `all_gather_mx_matmul_udma_impl.h`: commTurn = tileCnt + tailCnt, headRows = tileCnt * tileM, kPaddingLength 16.
- `all_gather_qbmm_mx_kernel.h`: `cFragAddrs_[8]`, `winDataRankBase_[8]` (R <= 8); flag ids 0..commTurn carry
  the rounds (16 counters per core: commTurn <= 15).

The logical M the AIC schedules is HEAD (own rows, headRows) + MAIN (tileCnt rounds of (R - 1) * tileM
rows: the other ranks) + TAIL (R * paddedTailM rows). With m >= 512 and baseM = 256 no block straddles two
regions; small m or few blocks (AdjustBasicBlock re-balances baseM) can give straddling blocks, which the
kernel runs as the source does (FRAGMENT_OUT_OF_RANGE for their reads past the region's fragments).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from mc2emu.arch.platform import DAV_3510, PlatformSpec
from mc2emu.numerics import ElemFormat
from mc2emu.numerics.constants import MX_GROUP_SIZE, MXFP_DIVISOR_SIZE
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.tiling.all_to_all_quant_matmul_tiling import CommTilingData
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat

if TYPE_CHECKING:
    from mc2emu.tiling.quant_matmul_tiling_data import QuantMatmulTilingData

# ST host: the communication tile of every round (rows of one rank's A).
TILE_M = 512
# `kPaddingLength` of the impl: the TAIL fragments are padded to whole 16-row cube blocks.
TAIL_PADDING = 16
# `cFragAddrs_[8]` / `winDataRankBase_[8]`: the kernel's per-rank address arrays hold 8 ranks.
MAX_RANKS = 8
# Flag ids 0 (HEAD, pre-set) .. commTurn (TAIL) live in a core's 16 cross-core counters.
MAX_COMM_TURN = 15


@dataclass(frozen=True)
class AgCommTiling:
    """The derived communication tiling (the impl's InitBaseParams)."""

    tileM: int
    tileCnt: int
    tailM: int
    tailCnt: int
    paddedTailM: int
    commTurn: int
    headRows: int
    k: int

    @property
    def commTile(self) -> CommTilingData:
        """`tilingData.commTile` as the ST host fills it."""
        return CommTilingData(self.tileM, self.tileCnt, self.tailM, self.tailCnt, self.k)

    def total_logical_m(self, rank_size: int) -> int:
        return rank_size * (self.tileCnt * self.tileM + self.tailCnt * self.paddedTailM)


def make_ag_comm_tiling(m: int, k: int) -> AgCommTiling:
    """The ST host rule (main.cpp) and the impl's derived fields."""
    tileM = min(TILE_M, m)
    tileCnt = m // tileM if tileM > 0 else 0
    tailM = m % tileM if tileM > 0 else 0
    tailCnt = 1 if tailM > 0 else 0
    paddedTailM = CeilDiv(tailM, TAIL_PADDING) * TAIL_PADDING if tailM > 0 else 0
    return AgCommTiling(tileM, tileCnt, tailM, tailCnt, paddedTailM, tileCnt + tailCnt, tileCnt * tileM, k)


def ag_matmul_tiling(comm: AgCommTiling, rank_size: int, n: int, elem: ElemFormat,
                     platform: PlatformSpec = DAV_3510, aic_num: int | None = None) -> QuantMatmulTilingData:
    """The SWAT tiling of the logical (totalLogicalM, n, k) matmul with the ST host's switches."""
    swat = QuantMatmulTilingSwat(platform, aic_num=aic_num, isOpenOptimize=False, enableMTailAlign=True)
    return swat.GetTilingData(comm.total_logical_m(rank_size), n, comm.k, False, True, elem, elem)


def ag_constraint_violations(m: int, k: int, n: int, rank_size: int, comm: AgCommTiling | None,
                             aiv_blocks: int | None) -> list[tuple[str, str]]:
    """(rule, reason) for every operator constraint the configuration breaks."""
    out: list[tuple[str, str]] = []
    if min(m, k, n) <= 0:
        out.append(("AG-0 m, k, n > 0", f"m = {m}, k = {k}, n = {n}"))
        return out
    if k % MX_GROUP_SIZE:
        out.append(("AG-1 K % 32 == 0", f"K = {k} is not a multiple of {MX_GROUP_SIZE} (one E8M0 scale per 32 "
                                        f"elements; the ST host refuses it)"))
    if CeilDiv(k, MXFP_DIVISOR_SIZE) % 2:
        out.append(("AG-2 ceil(K/64) even", f"ceil(K / 64) = {CeilDiv(k, MXFP_DIVISOR_SIZE)} is odd (the ST "
                                            f"host refuses it: the scale rows are gathered in pairs of pairs)"))
    if rank_size > MAX_RANKS:
        out.append(("AG-3 R <= 8", f"{rank_size} ranks: the kernel's per-rank address arrays hold {MAX_RANKS}"))
    if comm is not None and comm.commTurn > MAX_COMM_TURN:
        out.append(("AG-4 commTurn <= 15",
                    f"m = {m} gives {comm.tileCnt} tiles of {comm.tileM} rows + {comm.tailCnt} tail = commTurn "
                    f"{comm.commTurn}: flag ids 0..commTurn need {comm.commTurn + 1} of a core's 16 counters"))
    if aiv_blocks is not None and rank_size > aiv_blocks:
        out.append(("AG-5 R <= AIV blocks", f"{rank_size} ranks but {aiv_blocks} AIV blocks: AIV block r puts "
                                            f"to peer r, so some peers would never receive this rank's rows"))
    return out
