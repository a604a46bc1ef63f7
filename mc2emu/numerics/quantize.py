"""MX quantize / dequantize: float tensor <-> (element codes, E8M0 block scales).

Emulates the MX quantization that produces the operands of the CANN MX matmuls (`x1`/`x2` in
`fp8_e4m3fn_t` / `fp8_e5m2_t` / `fp4x2_*` plus `x1_scale`/`x2_scale` in `fp8_e8m0_t`) and the
dequantization the CANN golden performs (SPEC §4): one scale per `block` (32) elements along `axis`.

quantize_mx per block: scale code from the OCP floor rule (block_scale.shared_scale_codes), elements
multiplied by the exact inverse power of two in float32, then element_codec RNE with saturation. The
float32 multiply is exact unless its result is a float32 subnormal (< 2^-126); every such value lies far
below half the smallest element subnormal (E5M2: 2^-17), so it rounds to a signed zero either way.
A block holding NaN or Inf gets scale 0xFF and all its elements the format's NaN code (FP4: code 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mc2emu.numerics.block_scale import (
    apply_block_scale,
    block_amax_bits,
    decode_scales,
    inverse_scales,
    num_blocks,
    scale_codes_to_e8m0,
    shared_scale_codes,
)
from mc2emu.numerics.constants import E8M0_NAN_CODE, MX_GROUP_SIZE
from mc2emu.numerics.element_codec import (
    FP4_NAN_SUBSTITUTE,
    as_codes,
    as_float32,
    codes_to_storage,
    decode_elements,
    encode_finite,
)
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import E8M0_DTYPE, ElemFormat


def _normalize_axis(axis: int, ndim: int, param: str = "axis") -> int:
    if not isinstance(axis, (int, np.integer)) or isinstance(axis, bool):
        raise MxTypeError(f"{param} must be an int, got {type(axis).__name__}")
    if not -ndim <= axis < ndim:
        raise MxValueError(f"{param}={axis} is out of range for an array of {ndim} dimension(s)")
    return int(axis) % ndim


def _check_block(block: int) -> int:
    if not isinstance(block, (int, np.integer)) or isinstance(block, bool) or block <= 0:
        raise MxValueError(f"block must be a positive int (MX uses {MX_GROUP_SIZE}), got {block!r}")
    return int(block)


def _scale_shape(shape: tuple[int, ...], axis: int, block: int) -> tuple[int, ...]:
    return (*shape[:axis], num_blocks(shape[axis], block), *shape[axis + 1 :])


@dataclass(frozen=True, eq=False)
class MxTensor:
    """An MX-quantized tensor.

    data:  element array of the original shape; ml_dtypes dtype for E4M3/E5M2/E2M1, uint8 codes for E1M2.
    scale: float8_e8m0fnu, the original shape with `axis` replaced by ceil(K / block).
    """

    data: np.ndarray
    scale: np.ndarray
    elem: ElemFormat
    axis: int
    block: int = MX_GROUP_SIZE

    def __post_init__(self) -> None:
        if not isinstance(self.elem, ElemFormat):
            raise MxTypeError(f"elem must be an ElemFormat, got {self.elem!r}")
        if self.data.dtype != self.elem.storage_dtype:
            raise MxTypeError(
                f"data dtype must be {self.elem.storage_dtype} for {self.elem.value}, got {self.data.dtype}"
            )
        if self.scale.dtype != E8M0_DTYPE:
            raise MxTypeError(f"scale dtype must be {E8M0_DTYPE}, got {self.scale.dtype}")
        axis = _normalize_axis(self.axis, self.data.ndim)
        object.__setattr__(self, "axis", axis)
        want = _scale_shape(self.data.shape, axis, _check_block(self.block))
        if self.scale.shape != want:
            raise MxValueError(
                f"scale shape must be {want} (axis {axis}, block {self.block}) for data "
                f"{self.data.shape}, got {self.scale.shape}"
            )

    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def codes(self) -> np.ndarray:
        """Element codes as uint8 (one per element, FP4 unpacked)."""
        return as_codes(self.data, "data")

    @property
    def scale_codes(self) -> np.ndarray:
        """E8M0 scale codes as uint8."""
        return as_codes(self.scale, "scale")


def quantize_mx(
    x: np.ndarray, elem: ElemFormat | str, axis: int = -1, block: int = MX_GROUP_SIZE
) -> MxTensor:
    """Quantize float32 / bfloat16 / float16 `x` to MX with one E8M0 scale per `block` along `axis`."""
    fmt = ElemFormat.parse(elem)
    xf = as_float32(x)
    if xf.ndim == 0:
        raise MxValueError("x must have at least one dimension (the blocked axis)")
    ax = _normalize_axis(axis, xf.ndim)
    blk = _check_block(block)
    k = xf.shape[ax]
    nb = num_blocks(k, blk)
    xm = np.moveaxis(xf, ax, -1)
    lead = xm.shape[:-1]
    if nb * blk != k:  # zero padding leaves every block amax unchanged
        xm = np.concatenate([xm, np.zeros((*lead, nb * blk - k), dtype=np.float32)], axis=-1)
    xb = np.ascontiguousarray(xm).reshape(*lead, nb, blk)

    scale_codes = shared_scale_codes(block_amax_bits(xb), fmt)
    scaled = xb * inverse_scales(scale_codes)[..., None]
    bad = scale_codes == E8M0_NAN_CODE
    any_bad = bool(bad.any())
    if any_bad:
        scaled[bad] = 0.0
    codes = encode_finite(scaled, fmt)  # NaN / Inf blocks were zeroed above
    if any_bad:
        codes[bad] = fmt.nan_code if fmt.nan_code is not None else FP4_NAN_SUBSTITUTE

    codes = codes.reshape(*lead, nb * blk)[..., :k]
    codes = np.ascontiguousarray(np.moveaxis(codes, -1, ax))
    scale = np.ascontiguousarray(np.moveaxis(scale_codes, -1, ax))
    return MxTensor(codes_to_storage(codes, fmt), scale_codes_to_e8m0(scale), fmt, ax, blk)


def dequantize_mx(q: MxTensor, axis: int | None = None) -> np.ndarray:
    """float32 values of `q`: decoded elements times their block scale (exact power-of-two multiply).

    `axis` (default q.axis) names the blocked axis of q.data; it must agree with q.scale's shape.
    Results may overflow to +-Inf (e.g. E5M2 max times 2^127); a 0xFF scale gives NaN for its block.
    """
    ax = q.axis if axis is None else _normalize_axis(axis, q.data.ndim)
    want = _scale_shape(q.data.shape, ax, q.block)
    if q.scale.shape != want:
        raise MxValueError(
            f"axis={axis} does not match the scale: scale shape {q.scale.shape}, "
            f"expected {want} for blocks of {q.block} along axis {ax}"
        )
    shape = q.data.shape
    pre = int(np.prod(shape[:ax], dtype=np.int64))
    post = int(np.prod(shape[ax + 1 :], dtype=np.int64))
    vals = decode_elements(q.data, q.elem).reshape(pre, shape[ax], post)
    scale = decode_scales(q.scale).reshape(pre, want[ax], post)
    return apply_block_scale(vals, scale, q.block, out=vals).reshape(shape)
