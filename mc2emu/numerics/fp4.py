"""FP4 packing: two 4-bit element codes per byte, as in CANN `fp4x2_e2m1_t` / `fp4x2_e1m2_t`.

Element 2i sits in the low nibble of byte i and element 2i+1 in the high nibble (SPEC §4). An odd
element count leaves the last high nibble zero (code 0 = +0.0 in both FP4 formats). GM, L1 and the
FP4 C0 (FP4_C0_SIZE = 64 elements in 32 bytes) all hold this packed form.
"""

from __future__ import annotations

import numpy as np

from mc2emu.numerics.constants import FP4_PER_BYTE
from mc2emu.numerics.element_codec import as_codes
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import ElemFormat
from mc2emu.numerics.int_math import CeilDiv

FP4_CODE_MASK = 0x0F  # a 4-bit element code occupies one nibble.
FP4_HIGH_SHIFT = 4  # the odd element of a pair lives in the high nibble.


def packed_len(n: int) -> int:
    """Bytes holding n packed FP4 elements: ceil(n / 2)."""
    return CeilDiv(n, FP4_PER_BYTE)


def pack_fp4(codes: np.ndarray) -> np.ndarray:
    """Pack uint8 codes [..., n] (each < 16) into uint8 [..., ceil(n/2)], element 2i in the low nibble."""
    c = as_codes(codes)
    if c.ndim == 0:
        raise MxValueError("codes must have at least one dimension (the packed axis is the last one)")
    if c.size and int(c.max()) > FP4_CODE_MASK:
        raise MxValueError(f"codes must be 4-bit FP4 codes (< 16), got max {int(c.max())}")
    n = c.shape[-1]
    lo = c[..., 0::2]
    hi = np.zeros_like(lo)
    hi[..., : n // 2] = c[..., 1::2]
    return lo | (hi << FP4_HIGH_SHIFT)


def unpack_fp4(packed: np.ndarray, n: int) -> np.ndarray:
    """Unpack uint8 [..., ceil(n/2)] into uint8 codes [..., n] (inverse of pack_fp4)."""
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise MxTypeError(f"packed must be uint8, got {p.dtype}")
    if p.ndim == 0 or p.shape[-1] != packed_len(n):
        raise MxValueError(
            f"packed last dimension must be ceil(n/2) = {packed_len(n)} for n={n}, got shape {p.shape}"
        )
    out = np.empty((*p.shape[:-1], p.shape[-1] * FP4_PER_BYTE), dtype=np.uint8)
    np.bitwise_and(p, FP4_CODE_MASK, out=out[..., 0::2])
    np.right_shift(p, FP4_HIGH_SHIFT, out=out[..., 1::2])
    return out if out.shape[-1] == n else np.ascontiguousarray(out[..., :n])


def packed_pair_lut(elem: ElemFormat | str) -> np.ndarray:
    """float32 [256, 2]: byte -> (value of low-nibble element, value of high-nibble element)."""
    fmt = ElemFormat.parse(elem)
    if not fmt.is_fp4:
        raise MxValueError(f"elem must be an FP4 format (e2m1, e1m2) for packed decode, got {fmt.value!r}")
    byte = np.arange(256, dtype=np.uint8)
    return np.stack([fmt.lut[byte & FP4_CODE_MASK], fmt.lut[byte >> FP4_HIGH_SHIFT]], axis=-1)
