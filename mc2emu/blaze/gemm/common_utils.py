"""Shared Blaze GEMM constants and shape tuples.

Emulates ops-tensor `include/blaze/gemm/utils/common_utils.h` (buffer counts, unit flags, shape slots)
and the index constants the Blaze MX kernels take from apace `utils/constant.h` (seed 000 §6). The MX and
fractal constants of the same header (C0_SIZE_B8, SCALE_C0, ...) are in `mc2emu/numerics/constants.py`,
its `CeilDiv` / `Align*` helpers in `mc2emu/numerics/int_math.py`, shared with the host tiling.
Shapes and coordinates are the `Te::Shape<int64_t, int64_t, int64_t, int64_t>` /
`Te::Coord<...>` tuples of the source: `ProblemShape` is (m, n, k, b); the `BlockShape` a scheduler
returns is (m, n, mSplitOffset, nSplitOffset) and is indexed with `IDX_M_TILEIDX` / `IDX_N_TILEIDX`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import NamedTuple

# --- ProblemShape / BlockShape slots (common_utils.h MNK_*, constant.h IDX_*) ------------------------------
MNK_M = 0
MNK_N = 1
MNK_K = 2
MNK_B = 3
IDX_M_TILEIDX = 0  # BlockShape slot of the tile's M extent
IDX_N_TILEIDX = 1  # BlockShape slot of the tile's N extent
IDX_M_TAIL_SPLIT_TILEIDX = 2  # BlockShape slot of the M offset of a tail-split piece
IDX_N_TAIL_SPLIT_TILEIDX = 3  # BlockShape slot of the N offset of a tail-split piece
IDX_M_IDX = 0  # l0TileShape slots (baseM, baseN, baseK, 0)
IDX_N_IDX = 1
IDX_K_IDX = 2

# --- buffering and scheduling (common_utils.h) ---------------------------------------------------------------
DOUBLE_BUFFER_COUNT = 2  # ping-pong depth of L0A/L0B, L0C, the scale and bias L1 buffers
TRIPLE_BUFFER_COUNT = 3  # the only non-power-of-two L1 buffer count (GetL1BufferId uses % instead of &)
QUADRUPLE_BUFFER_COUNT = 4  # the largest l1BufNum the L1 offset tables hold
WINDOW_LEN = 4  # rows of M tiles per serpentine scheduling window (common_utils.h, apace constant.h)

# --- L2 stream alignment (kCacheLineAlignMask of the MX GEMM kernels: QBMM and the apace MC2 kernel) ----------
FP8_CACHE_LINE_ALIGN_MASK = 0x7F  # 128-byte cache line alignment for FP8 GM streaming
FP4_CACHE_LINE_ALIGN_MASK = 0xFF  # 256 elements: the same 128 bytes for packed FP4

# --- mmad unit flags (common_utils.h) ----------------------------------------------------------------------------
FINAL_ACCUMULATION = 3  # mmad unitFlag on the last K step of a tile: L0C may be read by the fixpipe
NON_FINAL_ACCUMULATION = 2  # mmad unitFlag while more K steps follow


class ProblemShape(NamedTuple):
    """`Te::Shape<int64_t x4>` of a GEMM problem: (m, n, k, b), b the batch count."""

    m: int
    n: int
    k: int
    b: int = 1


class BlockShape(NamedTuple):
    """`BlockShape` a scheduler hands to BlockMmad: the tile extent and, for tail-split pieces, the piece's
    offset inside its tile (slots IDX_M_TAIL_SPLIT_TILEIDX / IDX_N_TAIL_SPLIT_TILEIDX). Also used for the
    `l0TileShape` (baseM, baseN, baseK, 0)."""

    m: int
    n: int
    k: int = 0
    b: int = 0


class BlockCoord:
    """`Te::Coord<int64_t x4>` filled by `GetTileIdx(blockCoord)`: (mTileIdx, nTileIdx, 0, 0).

    Mutable on purpose, like the C++ out-parameter, so kernel loops read as the source does:
    `blockIdx = BlockCoord(); while bs.GetTileIdx(blockIdx): ...`."""

    __slots__ = ("b", "k", "m", "n")

    def __init__(self, m: int = 0, n: int = 0, k: int = 0, b: int = 0) -> None:
        self.m, self.n, self.k, self.b = m, n, k, b

    def set(self, m: int, n: int, k: int = 0, b: int = 0) -> None:
        self.m, self.n, self.k, self.b = m, n, k, b

    def __getitem__(self, idx: int) -> int:
        return (self.m, self.n, self.k, self.b)[idx]

    def __iter__(self) -> Iterator[int]:
        return iter((self.m, self.n, self.k, self.b))

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (BlockCoord, tuple)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BlockCoord({self.m}, {self.n}, {self.k}, {self.b})"
