"""Host tiling of all_to_all_quant_matmul: `CommTilingData` and the operator's constraints.

Emulates the tiling of ops-transformer `mc2/common/op_kernel/apace/kernel/all_to_all_quant_matmul`
(SPEC §6, seed 000 §3-4). The M axis of each rank's C (`oriM` rows) is cut into communication tiles:
`splitAxisTileCnt` head tiles of `splitAxisTileSize` rows, then at most one tail tile of
`splitAxisTailSize` rows. Communication round t moves tile t of every peer's row block; its flag id is t.

Head tile size follows the CANN ST rule: headTileSize = ceil(usedCoreNum / ceil(n / baseN)) * baseM,
i.e. enough M rows to give every core one output tile per round.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import PlatformSpec
from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE
from mc2emu.numerics.formats import ElemFormat
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.tiling.quant_matmul_tiling_data import QuantMatmulTilingData
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat

# Scale rows and the per-rank B segments line up only when Ka is a whole number of 64-element scale pairs.
KA_ALIGN = MXFP_DIVISOR_SIZE
# Cross-core flag ids 0-15 carry the round index (UdmaCommWaitPolicy waits flag `tile`).
MAX_COMM_TURNS = 16
# hcomm: the head and tail AlltoAlls carry tileCnt / tailCnt as their HCCL `repeat`, a uint8_t (the source
# casts `static_cast<uint8_t>(commTiling.splitAxisTileCnt)`); hcomm waits on HCCL handles, not flags.
MAX_HCCL_REPEAT = 255
# The AIV of block r serves peer r; apace sizes its peer tables for 64 ranks.
MAX_RANKS = 64


class KernelWaitOrder(Protocol):
    """The kernel's wait order (`mc2emu.apace.comm_policy.WaitOrder`) as the tiling sees it: the most
    communication tiles it can track (None: no limit) and its name."""

    @property
    def max_tiles(self) -> int | None: ...

    @property
    def value(self) -> str: ...


@dataclass(frozen=True)
class CommTilingData:
    """Source field names; sizes in rows of the split (M) axis, nonSplitAxisSize in elements (Ka)."""

    splitAxisTileSize: int
    splitAxisTileCnt: int
    splitAxisTailSize: int
    splitAxisTailCnt: int
    nonSplitAxisSize: int

    @property
    def commTurn(self) -> int:
        return self.splitAxisTileCnt + self.splitAxisTailCnt

    @property
    def headTileSize(self) -> int:
        return self.splitAxisTileSize

    def total_tiles(self, ori_m: int) -> int:
        """totalTiles as the kernel computes it: ceil(oriM / headTileSize)."""
        return CeilDiv(ori_m, self.splitAxisTileSize)

    def tile_rows(self, t: int) -> tuple[int, int]:
        """(first row, row count) of communication tile t inside a rank's row block."""
        if t < self.splitAxisTileCnt:
            return t * self.splitAxisTileSize, self.splitAxisTileSize
        return self.splitAxisTileCnt * self.splitAxisTileSize, self.splitAxisTailSize


def st_head_tile_size(used_core_num: int, n: int, base_m: int, base_n: int) -> int:
    """CANN ST rule: ceil(usedCoreNum / ceil(n / baseN)) * baseM."""
    n_tiles = CeilDiv(n, base_n)
    return CeilDiv(used_core_num, n_tiles) * base_m


def make_comm_tiling(ori_m: int, ka: int, head_tile_size: int) -> CommTilingData:
    if head_tile_size <= 0:
        raise ConstraintError("head_tile_size", f"head tile size must be positive, got {head_tile_size}")
    tile_cnt = ori_m // head_tile_size
    tail = ori_m - tile_cnt * head_tile_size
    return CommTilingData(head_tile_size, tile_cnt, tail, 1 if tail else 0, ka)


def comm_constraint_violations(tiling: CommTilingData, *, ori_m: int, ka: int, rank_size: int,
                               aiv_blocks: int | None, wait_order: KernelWaitOrder,
                               hcomm: bool = False) -> list[tuple[str, str]]:
    """(rule, reason) for each of the five constraints of SPEC §6 the configuration breaks. `aiv_blocks`
    None: no AIV serves peers (hcomm), so constraint 5 checks only R <= 64. `hcomm`: rounds are HCCL repeats
    (uint8, <= 255 per handle) instead of cross-core flag ids (<= 16)."""
    out: list[tuple[str, str]] = []
    if ka % KA_ALIGN:
        out.append(("A2A-1 Ka % 64 == 0", f"Ka = {ka} is not a multiple of {KA_ALIGN}: scale rows and the "
                                          f"per-rank B segments would not line up"))
    if tiling.splitAxisTailCnt > 1 or tiling.splitAxisTailSize > tiling.splitAxisTileSize or (
            tiling.splitAxisTailCnt == 0 and tiling.splitAxisTailSize != 0):
        out.append(("A2A-2 at most one tail tile, no larger than a head tile",
                    f"tail count {tiling.splitAxisTailCnt}, tail size {tiling.splitAxisTailSize}, head size "
                    f"{tiling.splitAxisTileSize}: the PUT source formula src + idx * tileMax assumes it"))
    covered = tiling.splitAxisTileCnt * tiling.splitAxisTileSize + tiling.splitAxisTailCnt * tiling.splitAxisTailSize
    total = tiling.total_tiles(ori_m)
    if total != tiling.commTurn or covered != ori_m:
        out.append(("A2A-3 totalTiles == commTurn",
                    f"kernel waits on ceil(oriM / head) = {total} tiles but the AIVs run {tiling.commTurn} "
                    f"rounds covering {covered} of {ori_m} rows: Waits and Sets would not pair"))
    if hcomm:
        for what, cnt in (("head", tiling.splitAxisTileCnt), ("tail", tiling.splitAxisTailCnt)):
            if cnt > MAX_HCCL_REPEAT:
                out.append((f"A2A-4 (hcomm) HCCL repeat <= {MAX_HCCL_REPEAT}",
                            f"{cnt} {what} tiles are the repeat of one HCCL AlltoAll, a uint8_t: the device "
                            f"would wrap it to {cnt % 256}"))
    elif tiling.commTurn > MAX_COMM_TURNS:
        out.append(("A2A-4 commTurn <= 16", f"{tiling.commTurn} communication rounds but only "
                                            f"{MAX_COMM_TURNS} cross-core flag ids carry the round index"))
    max_tiles = wait_order.max_tiles
    if max_tiles is not None and total > max_tiles:
        out.append((f"A2A-4 tiles <= {max_tiles} ({wait_order.value})",
                    f"{total} tiles do not fit the uint32 waitedMask"))
    short = aiv_blocks is not None and rank_size > aiv_blocks
    if rank_size < 1:
        out.append(("A2A-5 1 <= R <= 64", f"{rank_size} ranks: every rank holds one row block of A"))
    elif short or rank_size > MAX_RANKS:
        out.append(("A2A-5 R <= AIV blocks, R <= 64",
                    f"{rank_size} ranks but {aiv_blocks} AIV blocks (AIV block r serves peer r; some peers "
                    f"would never be served)" if short else f"{rank_size} ranks > {MAX_RANKS}"))
    return out


@dataclass(frozen=True)
class A2ATilingData:
    """The whole host tiling of one call: the SWAT matmul tiling, the communication tiling and the launch's
    block dim (computed once, passed down to the host program)."""

    mm: QuantMatmulTilingData
    comm: CommTilingData
    usedCoreNum: int
    note: str = ""   # why the launch differs from the tiling's usedCoreNum, if it does


def a2a_tiling(platform: PlatformSpec, *, ori_m: int, ka: int, n: int, rank_size: int, elem: ElemFormat,
               b_elem: ElemFormat, aiv_served: bool, wait_order: KernelWaitOrder, block_dim: int | None,
               head_tile_size: int | None, source_launch: bool = False) -> A2ATilingData:
    """Tile the call; raises `ConstraintError` naming the first constraint of SPEC §6 it breaks.

    aiv_served (UDMA): AIV block r serves peer r (constraint A2A-5), so a small problem still launches R
    blocks (the extra AICs find no tile and only drain their waits); hcomm launches AIC only (the HCCL
    server serves every peer), so constraint 5 checks only R <= 64. The head tile comes from the launched
    core count for both impls (CANN ST `main.cpp`: headMSize = CeilDiv(usedCoreNum, CeilDiv(n, baseN)) *
    baseM). Raising the launch to R blocks is the host's convenience, not the source's (its ST host launches
    usedCoreNum): it is said in `note`, and `source_launch` launches usedCoreNum as the source does (and so
    hits constraint 5 when it is below R)."""
    mm = QuantMatmulTilingSwat(platform, aic_num=block_dim).GetTilingData(ori_m, n, ka, False, True, elem, b_elem)
    used = mm.usedCoreNum
    note = ""
    if aiv_served and block_dim is None and used < rank_size and not source_launch:
        note = (f"launched {rank_size} blocks where the tiling's usedCoreNum is {used}: AIV block r serves peer "
                f"r; the source host launches usedCoreNum (launch='source', CLI --launch source: refused by A2A-5)")
        used = rank_size
    aiv_blocks = used if aiv_served else None
    head = head_tile_size or st_head_tile_size(used, n, mm.baseM, mm.baseN)
    ct = make_comm_tiling(ori_m, ka, head)
    violations = comm_constraint_violations(ct, ori_m=ori_m, ka=ka, rank_size=rank_size, aiv_blocks=aiv_blocks,
                                            wait_order=wait_order, hcomm=not aiv_served)
    if violations:
        rule, reason = violations[0]
        raise ConstraintError(rule, reason)
    return A2ATilingData(mm, ct, used, note)
