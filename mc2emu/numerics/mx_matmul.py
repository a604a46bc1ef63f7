"""MX matmul core: element/scale decode, per-32 dequant, K-ordered FP32 MMAD and the fixpipe cast.

Emulates the arithmetic inside Blaze `BlockMmad<MatmulWithScaleMx>` (ops-tensor `include/blaze/gemm`,
SPEC §4-5): the cube decodes MX elements and E8M0 scales, multiplies them (exact: every scale is a power
of two), accumulates products in FP32 in L0C while walking K in kL1 chunks of baseK steps, and the fixpipe
converts the FP32 L0C tile to the output type with round-to-nearest-even. The data movement (GM -> L1 ->
L0A/L0B, ping-pong, splitK, dbL0C) belongs to the BlockMmad emulation that calls these functions.

Emulation choices: within one baseK step the products are summed by one float32 numpy matmul (BLAS order
inside the step); across steps the step result is added to the float32 accumulator, so the rounding
sequence across K steps is the hardware's. The hardware zero-pads the K tail of a step to a multiple of
64 (`mmadParams.k` = Align64): the padded A and B elements are both zero, every padded product is +0,
and adding +0 never changes a float32 sum, so the padding is not emulated.
"""

from __future__ import annotations

import enum

import ml_dtypes
import numpy as np

from mc2emu.numerics.block_scale import apply_block_scale, decode_scales, num_blocks
from mc2emu.numerics.constants import MX_GROUP_SIZE
from mc2emu.numerics.element_codec import decode_elements
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import ElemFormat
from mc2emu.numerics.fp4 import packed_len, packed_pair_lut
from mc2emu.numerics.payload import Payload

__all__ = [
    "OutDtype",
    "decode_elements",
    "decode_packed_fp4",
    "decode_scales",
    "dequant_cols",
    "dequant_rows",
    "fixpipe_cast",
    "mmad_k_ordered",
]


class OutDtype(enum.Enum):
    """Fixpipe output types of the MX matmuls (the value is the numpy/ml_dtypes dtype name)."""

    BF16 = "bfloat16"
    FP16 = "float16"
    FP32 = "float32"

    @classmethod
    def _missing_(cls, value: object) -> OutDtype | None:
        """A numpy / ml_dtypes dtype (or a type it accepts) names the member of that dtype."""
        if isinstance(value, str):
            return None
        try:
            dt = np.dtype(value)  # type: ignore[call-overload]
        except TypeError:
            return None
        return next((member for member in cls if dt == member.dtype), None)

    @classmethod
    def parse(cls, x: object, param: str = "out_dtype") -> OutDtype:
        """Accept an OutDtype, its name string, or the numpy/ml_dtypes dtype."""
        if isinstance(x, cls):
            return x
        if isinstance(x, str):
            for member in cls:
                if x.strip().lower() == member.value:
                    return member
        elif x is not None:
            found = cls._missing_(x)
            if found is not None:
                return found
        allowed = ", ".join(repr(m.value) for m in cls)
        raise MxValueError(f"{param}={x!r} is not a fixpipe output type; allowed: {allowed} or their dtypes")

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(ml_dtypes.bfloat16) if self is OutDtype.BF16 else np.dtype(self.value)


def _float32_2d(x: np.ndarray, param: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.dtype != np.float32:
        raise MxTypeError(f"{param} must be float32, got {arr.dtype}")
    if arr.ndim != 2:
        raise MxValueError(f"{param} must be 2-D, got shape {arr.shape}")
    return arr


def decode_packed_fp4(packed: np.ndarray, elem: ElemFormat | str, n: int) -> np.ndarray:
    """float32 [..., n] values of packed FP4 bytes [..., ceil(n/2)] via a 256 x 2 LUT (both nibbles)."""
    p = np.asarray(packed)
    if p.dtype != np.uint8:
        raise MxTypeError(f"packed must be uint8, got {p.dtype}")
    if p.ndim == 0 or p.shape[-1] != packed_len(n):
        raise MxValueError(
            f"packed last dimension must be ceil(n/2) = {packed_len(n)} for n={n}, got shape {p.shape}"
        )
    vals = np.take(packed_pair_lut(elem), p, axis=0).reshape(*p.shape[:-1], -1)
    return vals if vals.shape[-1] == n else np.ascontiguousarray(vals[..., :n])


def dequant_rows(elem_f32: np.ndarray, scale_f32: np.ndarray) -> np.ndarray:
    """[r, k] elements times per-row scales [r, ceil(k/32)], one scale per 32 along the last axis."""
    e = _float32_2d(elem_f32, "elem_f32")
    s = _float32_2d(scale_f32, "scale_f32")
    r, k = e.shape
    if s.shape != (r, num_blocks(k, MX_GROUP_SIZE)):
        raise MxValueError(
            f"scale_f32 shape must be (r, ceil(k/32)) = {(r, num_blocks(k, MX_GROUP_SIZE))} "
            f"for elem_f32 {e.shape}, got {s.shape}"
        )
    out = apply_block_scale(e.reshape(r, k, 1), s.reshape(r, -1, 1), MX_GROUP_SIZE)
    return out.reshape(r, k)


def dequant_cols(elem_f32: np.ndarray, scale_f32: np.ndarray) -> np.ndarray:
    """[k, c] elements times per-column scales [ceil(k/32), c], one scale per 32 along the first axis."""
    e = _float32_2d(elem_f32, "elem_f32")
    s = _float32_2d(scale_f32, "scale_f32")
    k, c = e.shape
    if s.shape != (num_blocks(k, MX_GROUP_SIZE), c):
        raise MxValueError(
            f"scale_f32 shape must be (ceil(k/32), c) = {(num_blocks(k, MX_GROUP_SIZE), c)} "
            f"for elem_f32 {e.shape}, got {s.shape}"
        )
    out = apply_block_scale(e.reshape(1, k, c), s.reshape(1, -1, c), MX_GROUP_SIZE)
    return out.reshape(k, c)


def _positive_int(v: int, param: str) -> int:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
        raise MxValueError(f"{param} must be a positive int, got {v!r}")
    return int(v)


def mmad_k_ordered(
    a_f32: np.ndarray, b_f32: np.ndarray, k_l1: int, base_k: int, acc: np.ndarray | None = None
) -> np.ndarray:
    """FP32 [m, n] += a [m, k] @ b [k, n] in BlockMmad K order: kL1 chunks, each in baseK steps.

    Each step is one float32 matmul whose result is added to the float32 accumulator (L0C). With `acc`
    the sum accumulates into it in place (splitKIdx > 0) and `acc` is returned; without, L0C starts at 0.
    The hardware's zero padding of a step to Align64(K) adds only +0 products and is not emulated.
    """
    a = _float32_2d(a_f32, "a_f32")
    b = _float32_2d(b_f32, "b_f32")
    kl1 = _positive_int(k_l1, "k_l1")
    bk = _positive_int(base_k, "base_k")
    m, k = a.shape
    if b.shape[0] != k:
        raise MxValueError(f"b_f32 rows must equal a_f32 columns (K={k}), got shapes {a.shape} and {b.shape}")
    n = b.shape[1]
    if acc is None:
        acc = np.zeros((m, n), dtype=np.float32)
    else:
        if not isinstance(acc, np.ndarray) or acc.dtype != np.float32 or acc.shape != (m, n):
            raise MxValueError(
                f"acc must be a float32 ndarray of shape {(m, n)} (the L0C tile), got "
                f"{getattr(acc, 'dtype', type(acc).__name__)} {getattr(acc, 'shape', '')}"
            )
        if not acc.flags.writeable:
            raise MxValueError("acc must be writeable: it is accumulated in place")
    step = np.empty((m, n), dtype=np.float32)
    for k_start in range(0, k, kl1):  # GM -> L1: one kL1 chunk of A and B
        k_end = min(k_start + kl1, k)
        for kk in range(k_start, k_end, bk):  # L1 -> L0A/L0B: one baseK step, one mmad
            kk_end = min(kk + bk, k_end)
            np.matmul(a[:, kk:kk_end], b[kk:kk_end, :], out=step)
            acc += step
    return acc


def fixpipe_cast(acc_f32: np.ndarray, out_dtype: OutDtype | str | np.dtype) -> np.ndarray:
    """Fixpipe L0C -> GM conversion: float32 to bf16 / fp16 (round to nearest even) or float32.

    Overflow follows IEEE round-to-nearest (values past max + half an ULP become +-Inf) like the CANN
    golden's numpy cast; whether the hardware fixpipe saturates instead is an assumption left open.
    """
    acc = acc_f32 if isinstance(acc_f32, Payload) else np.asarray(acc_f32)   # Payload: a protocol-only run
    if acc.dtype != np.float32:
        raise MxTypeError(f"acc_f32 must be float32 (the L0C accumulator), got {acc.dtype}")
    out = OutDtype.parse(out_dtype)
    if out is OutDtype.FP32:
        return acc.copy()
    with np.errstate(over="ignore"):  # overflow to +-Inf is the documented result, not a fault
        return acc.astype(out.dtype)
