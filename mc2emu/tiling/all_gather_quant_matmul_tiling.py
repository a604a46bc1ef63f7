"""Host tiling of all_gather_quant_matmul: the ST host's communication tiles, the SWAT matmul tiling of the
logical M, and the operator's constraints (ops-transformer, commit 5778144076).
- ST `main.cpp` (`RunAllGatherQuantMatmul`): tileM = min(512, m), tileCnt = m / tileM, tailM = m % tileM,
  paddedTailM = align16(tailM), totalLogicalM = R * (tileCnt * tileM + tailCnt * paddedTailM); matmul tiling
  `QuantMatmulTilingSwat` with `SetOptimizeEnable(false)` (only `OptimizeEdgeBasicBlock` off) and
  `SetMTailAlignEnable(true)`; `ParseArgs` refuses K % 32 != 0 and an odd CeilDiv(K, 64).
- `all_gather_mx_matmul_udma_impl.h`: commTurn = tileCnt + tailCnt, headRows = tileCnt * tileM, padding 16.
- Rank limits: the seed kernel's `cFragAddrs_[8]` (R <= 8); the slot ring's `MAX_RANK_SIZE = 16U` (hicann
  67a83540d75e, R <= 16; flag id `slot % 11 + 1`). No commTurn limit: ids >= 16 wrap (SPEC §2), in-order waits
  still pair; the mask kernel's aliasing from commTurn 16 is reported (READ_BEFORE_WAIT), not refused.
- Launch blocks: the launcher (main.cpp:239) launches `usedCoreNum` unchecked against R; AIV block r serves peer
  r, so with fewer blocks some peers are never served: reported by the impls (PEER_NOT_SERVED), not refused.
- Logical M = HEAD (own rows) + MAIN (tileCnt rounds of (R - 1) * tileM rows) + TAIL (R * paddedTailM rows).
  Small m or few blocks can give blocks straddling two regions, run as the source does (FRAGMENT_OUT_OF_RANGE).
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
# Seed protocol (ops-transformer 5778144076 `all_gather_qbmm_mx_kernel.h:206-208`): `cFragAddrs_[8]`,
# `winDataRankBase_[8]`, `winScaleRankBase_[8]`: the kernel's per-rank address arrays hold 8 ranks.
MAX_RANKS = 8
# Slot ring (hicann/ops-transformer 67a83540d75e `all_gather_qbmm_mx_kernel.h`): `MAX_RANK_SIZE = 16U`.
MAX_RANK_SIZE_SLOT_RING = 16
SEED_RANK_RULE = ("AG-3 R <= 8", "ops-transformer 5778144076 all_gather_qbmm_mx_kernel.h:206-208 "
                  "cFragAddrs_[8] / winDataRankBase_[8] / winScaleRankBase_[8]")
SLOT_RING_RANK_RULE = ("AG-3 R <= 16", "hicann/ops-transformer 67a83540d75e all_gather_qbmm_mx_kernel.h "
                       "MAX_RANK_SIZE = 16U (cFragAddrs_[MAX_RANK_SIZE], ...)")


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


def make_ag_comm_tiling(m: int, k: int, tile_m: int | None = None) -> AgCommTiling:
    """The ST host rule (main.cpp: tileM = min(512, m); `tile_m` replaces the 512) and the impl's derived fields."""
    tileM = min(TILE_M if tile_m is None else tile_m, m)
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


def max_ranks(slot_ring: bool) -> int:
    """The rank limit of the protocol's kernel: 8 (seed, 5778144076), 16 (slot ring, 67a83540d75e)."""
    return MAX_RANK_SIZE_SLOT_RING if slot_ring else MAX_RANKS


def ag_constraint_violations(m: int, k: int, n: int, rank_size: int, *,
                             slot_ring: bool = False) -> list[tuple[str, str]]:
    """(rule, reason) for every source rule the configuration breaks (each reason cites the source's check).
    Not rules: the round count (the source has no commTurn limit) and the launch's block count (fewer blocks
    than ranks runs as on the device and is reported, `ag_unserved_peers`)."""
    out: list[tuple[str, str]] = []
    if min(m, k, n) <= 0:
        out.append(("AG-0 m, k, n > 0", f"m = {m}, k = {k}, n = {n} (ST main.cpp ParseArgs: \"m k n rankNum must "
                                        f"be positive\")"))
        return out
    if k % MX_GROUP_SIZE:
        out.append(("AG-1 K % 32 == 0", f"K = {k} is not a multiple of {MX_GROUP_SIZE} (one E8M0 scale per 32 "
                                        f"elements; ST main.cpp ParseArgs: \"K must be divisible by 32 for MXFP8 "
                                        f"quantization\")"))
    if CeilDiv(k, MXFP_DIVISOR_SIZE) % 2:
        out.append(("AG-2 ceil(K/64) even", f"ceil(K / 64) = {CeilDiv(k, MXFP_DIVISOR_SIZE)} is odd (ST main.cpp "
                                            f"ParseArgs refuses an odd CeilDiv(K, 64): the scale rows are gathered "
                                            f"in pairs of pairs)"))
    rule, where = SLOT_RING_RANK_RULE if slot_ring else SEED_RANK_RULE
    if rank_size > max_ranks(slot_ring):
        other = "" if slot_ring else f"; protocol 'slot_ring' takes up to {MAX_RANK_SIZE_SLOT_RING}"
        out.append((rule, f"{rank_size} ranks: the kernel's per-rank address arrays hold {max_ranks(slot_ring)} "
                          f"({where}){other}"))
    return out


def ag_unserved_peers(rank_size: int, aiv_blocks: int) -> list[int]:
    """The peers no AIV block serves when the launch has fewer blocks than ranks: AIV block r puts this rank's
    rows to peer r only (`GetBlockIdx() < rankSize_` in the impls), so peers >= aiv_blocks never receive them."""
    return list(range(max(aiv_blocks, 0), rank_size))
