"""Shared Blaze GEMM constants, shape tuples and integer helpers.

Emulates ops-tensor `include/blaze/gemm/utils/common_utils.h` (the constants and `CeilDiv` / `Align*`
helpers) and the index constants the Blaze MX kernels take from apace `utils/constant.h` (seed 000 §6).
Shapes and coordinates are the `Te::Shape<int64_t, int64_t, int64_t, int64_t>` /
`Te::Coord<...>` tuples of the source: `ProblemShape` is (m, n, k, b); the `BlockShape` a scheduler
returns is (m, n, mSplitOffset, nSplitOffset) and is indexed with `IDX_M_TILEIDX` / `IDX_N_TILEIDX`.

C++ integer division truncates toward zero and `%` keeps the dividend's sign; the schedulers reproduce
that with `cdiv` / `cmod` wherever an operand can be negative (degenerate shapes), so they never pick up
Python's floor semantics by accident.
"""

from __future__ import annotations

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

# --- fractal / alignment granules (common_utils.h, seed 000 §6) ---------------------------------------------
CUBE_BLOCK = 16  # cube fractal edge: M and N are padded to 16 in L0 / L0C
C0_SIZE_L0C = 16  # C0 of the FP32 L0C NZ layout (16 floats = 64 B)
C0_SIZE_B8 = 32  # C0 of 8-bit operands (32 elements = 32 B)
C0_SIZE_B4 = 64  # C0 of 4-bit operands (64 elements = 32 B)
ALIGN_64 = 64  # Align64: K granule of one MX LoadData (two 32-element scale groups)
ALIGN_64_BYTES_SHIFT = 6  # x >> 6 == x // 64
MXFP_DIVISOR_SIZE = 64  # K elements per stored scale pair
MXFP_MULTI_BASE_SIZE = 2  # scales per stored pair
SCALE_C0 = 2  # innermost dimension of the scale layouts
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

    def __iter__(self):  # type: ignore[no-untyped-def]
        return iter((self.m, self.n, self.k, self.b))

    def __eq__(self, other: object) -> bool:
        return tuple(self) == tuple(other) if isinstance(other, (BlockCoord, tuple)) else NotImplemented

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return f"BlockCoord({self.m}, {self.n}, {self.k}, {self.b})"


def CeilDiv(a: int, b: int) -> int:
    """`CeilDiv`: ceil(a / b) for a >= 0; like the source, division by 0 returns a."""
    if b == 0:
        return a
    return -(-a // b) if a >= 0 else cdiv(a, b)


def Align(a: int, b: int) -> int:
    return CeilDiv(a, b) * b


def Align16(a: int) -> int:
    return Align(a, 16)


def Align32(a: int) -> int:
    return Align(a, 32)


def Align64(a: int) -> int:
    return Align(a, 64)


def cdiv(a: int, b: int) -> int:
    """C++ signed integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def cmod(a: int, b: int) -> int:
    """C++ signed remainder (sign of the dividend)."""
    return a - b * cdiv(a, b)
