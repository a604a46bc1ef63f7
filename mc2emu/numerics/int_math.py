"""Integer helpers of the kernels and the host tiling: `CeilDiv`, `Align`, `Align16/32/64`, `FloorAlign`
and C++ signed division (`cdiv`, `cmod`), defined once.

Emulates ops-tensor `include/blaze/gemm/utils/common_utils.h` (`CeilDiv`, `Align`, `Align16`, ...) and the
host helpers of apace `tiling/quant_matmul_tiling_base.h` (`CeilDiv`, `Align`, `FloorAlign`): like the
source, a division by 0 returns the dividend. For a positive divisor `CeilDiv` is ceil(a / b) for every a
(C++ truncation of a negative quotient is its ceiling).

C++ integer division truncates toward zero and `%` keeps the dividend's sign; the schedulers reproduce
that with `cdiv` / `cmod` wherever an operand can be negative (degenerate shapes), so they never pick up
Python's floor semantics by accident.
"""

from __future__ import annotations

from mc2emu.numerics.constants import ALIGN_64


def CeilDiv(a: int, b: int) -> int:
    """`CeilDiv`: ceil(a / b); like the source, division by 0 returns a."""
    if b == 0:
        return a
    return -(-a // b) if a >= 0 else cdiv(a, b)


def Align(a: int, b: int) -> int:
    """`Align`: a rounded up to a multiple of b (0 when b == 0: the source's CeilDiv(a, b) * b)."""
    return CeilDiv(a, b) * b


def FloorAlign(a: int, b: int) -> int:
    """`FloorAlign`: a rounded down to a multiple of b (a when b == 0)."""
    return a if b == 0 else a // b * b


def Align16(a: int) -> int:
    return Align(a, 16)


def Align32(a: int) -> int:
    return Align(a, 32)


def Align64(a: int) -> int:
    return Align(a, ALIGN_64)


def cdiv(a: int, b: int) -> int:
    """C++ signed integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def cmod(a: int, b: int) -> int:
    """C++ signed remainder (sign of the dividend)."""
    return a - b * cdiv(a, b)
