"""ND <-> FRACTAL_NZ for 8-bit (fp8 e4m3 / e5m2, int8), packed 4-bit (fp4 e2m1 / e1m2) and 16-bit data.

Rule: ND (..., rows, cols) -> NZ (..., ceil(cols / C0), ceil(rows / 16), 16, C0), C0 = 32 bytes (32 8-bit,
64 4-bit, 16 16-bit elements): the last ND axis is cut into C0-wide column blocks, the outermost NZ axis, each
stored as ceil(rows/16) fractals of 16 rows x C0; rows and C0 tails are zero-filled. For a B weight (k, n),
transB false, that is (ceil(n/C0), ceil(k/16), 16, C0): n1 is fractal-major, n is the C0 axis; transB (n, k)
gives (ceil(k/C0), ceil(n/16), 16, C0). Scales stay ND. FP4 stays packed (element 2i in the low nibble of
byte i) along the C0 axis, so its cols must be even.
- ops-transformer (recursion-ascend a093e954) `mc2/common/op_kernel/apace/tests/st/quant_matmul_reduce_scatter/
  ubmem/scripts/gen_data.py` `to_weight_nz_layout`: [K, N] -> zero-padded (Kt·16, Nt·32) -> [Nt, Kt, 16, 32];
  scaleB {ceil(K/64), N, 2} "store as-is". hicann 0f2296ba `…/ubmem/src/main.cpp`: B {ceil(N/32), ceil(K/16), 16,
  32}; b993c14f `…/apace_qmrs_kernel_launcher.h`: `LayoutB = nz_layout_ptn`, TransB false.
- libochao-huawei 5778144076 `gmm/grouped_matmul/op_api/grouped_matmul_950_checker.cpp:261-329`
  (`CheckWeightStorageShape`: last dim 32 fp8 / 64 fp4, second-last 16, outer dims as above for both transB),
  `gmm/grouped_matmul/tests/ut/op_host/test_grouped_quant_arch35_tiling.cpp:117-138` (same storage dims; scale
  ND for both formats); refusal `gmm/grouped_matmul/docs/aclnnGroupedMatmulWeightNz.md:436` (n = 1 or k = 1).
- Zero fill: hicann/ops-math 4909ff8a `conversion/npu_format_cast/docs/aclnnNpuFormatCast.md` (the format cast:
  C0 = 32 B / sizeof(dtype), ND view dims 2..6), the CCE `copy_gm_to_cbuf_multi_nd2nz` page (ND->NZ pads the
  low dimension with zeros to 32 B); ATB TransdataOperation worked example {8, 100, 30} fp16 -> {8, 2, 112, 16}.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from mc2emu.numerics.constants import CUBE_BLOCK
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import FP4_STORAGE_DTYPE
from mc2emu.numerics.int_math import CeilDiv

C0_BYTES = 32  # one C0 row of a fractal: 32 bytes whatever the element width (aclnnNpuFormatCast: 32B / sizeof)
NZ_FRACTAL_ROWS = CUBE_BLOCK  # rows of one fractal (the 16 of "16 x C0")
BITS_PER_BYTE = 8
ND_MIN_DIMS = 2  # aclnnNpuFormatCast: ND view shape dims in [2, 6] (a matrix, then up to 4 batch dims)
ND_MAX_DIMS = 6
WEIGHT_NZ_MIN_DIM = 2  # aclnnGroupedMatmulWeightNz.md:436: n == 1 or k == 1 has no private (NZ) format


@dataclass(frozen=True)
class _NzInfo:
    bits: int
    accepted: tuple[np.dtype, ...]  # array dtypes that hold this format's storage (codes or the real dtype)


class NzDtype(enum.Enum):
    """An element type the NZ conversion handles; the value is its short name."""

    E4M3 = "e4m3"
    E5M2 = "e5m2"
    E2M1 = "e2m1"
    E1M2 = "e1m2"
    INT8 = "int8"
    FLOAT16 = "float16"
    BFLOAT16 = "bfloat16"

    @classmethod
    def parse(cls, x: object, param: str = "dtype") -> NzDtype:
        """Accept a member, its name (also the ml_dtypes names float8_e4m3fn / float8_e5m2 / float4_e2m1fn,
        and fp8 / fp4 spellings e4m3fn), an ElemFormat, or a numpy / ml_dtypes dtype other than uint8."""
        if isinstance(x, cls):
            return x
        value = getattr(x, "value", x)  # an ElemFormat member parses by its value
        if isinstance(value, str):
            key = value.strip().lower()
            for member in cls:
                if key == member.value or key in _ALIASES.get(member, ()):
                    return member
        else:
            try:
                dt = np.dtype(value)  # type: ignore[call-overload]
            except TypeError:
                dt = None
            for member, dts in _DTYPE_OF.items():
                if dt is not None and dt in dts:
                    return member
        allowed = ", ".join(repr(m.value) for m in cls)
        raise MxValueError(
            f"{param}={x!r} is not an NZ element type; allowed: {allowed} (or their ml_dtypes / numpy dtypes; "
            "uint8 is ambiguous: name the format the codes are in)"
        )

    @property
    def bits(self) -> int:
        """Bits per element (4 for the packed FP4 formats)."""
        return _INFO[self].bits

    @property
    def c0(self) -> int:
        """C0 in elements: 32 bytes of this type (32 for 8-bit, 64 for FP4, 16 for 16-bit)."""
        return C0_BYTES * BITS_PER_BYTE // self.bits

    @property
    def storage_c0(self) -> int:
        """C0 in array items: FP4 arrays hold packed bytes, so 32 items for both 8-bit and 4-bit types."""
        return C0_BYTES // self.storage_itemsize

    @property
    def storage_itemsize(self) -> int:
        """Bytes per array item: 1 (8-bit, packed FP4 pairs) or 2 (16-bit)."""
        return max(1, self.bits // BITS_PER_BYTE)

    @property
    def is_packed(self) -> bool:
        """Two elements per byte (FP4)."""
        return self.bits < BITS_PER_BYTE


_U8 = np.dtype(np.uint8)
_U16 = np.dtype(np.uint16)
_DTYPE_OF: dict[NzDtype, tuple[np.dtype, ...]] = {
    NzDtype.E4M3: (np.dtype(ml_dtypes.float8_e4m3fn),),
    NzDtype.E5M2: (np.dtype(ml_dtypes.float8_e5m2),),
    NzDtype.E2M1: (np.dtype(ml_dtypes.float4_e2m1fn),),
    NzDtype.INT8: (np.dtype(np.int8),),
    NzDtype.FLOAT16: (np.dtype(np.float16),),
    NzDtype.BFLOAT16: (np.dtype(ml_dtypes.bfloat16),),
}
_ALIASES: dict[NzDtype, tuple[str, ...]] = {
    NzDtype.E4M3: ("float8_e4m3fn", "e4m3fn", "fp8_e4m3"),
    NzDtype.E5M2: ("float8_e5m2", "fp8_e5m2"),
    NzDtype.E2M1: ("float4_e2m1fn", "fp4_e2m1"),
    NzDtype.E1M2: ("fp4_e1m2",),
    NzDtype.INT8: ("i1",),
    NzDtype.FLOAT16: ("half", "fp16", "f2"),
    NzDtype.BFLOAT16: ("bf16",),
}
_INFO: dict[NzDtype, _NzInfo] = {
    NzDtype.E4M3: _NzInfo(8, (*_DTYPE_OF[NzDtype.E4M3], _U8)),
    NzDtype.E5M2: _NzInfo(8, (*_DTYPE_OF[NzDtype.E5M2], _U8)),
    NzDtype.E2M1: _NzInfo(4, (_U8, FP4_STORAGE_DTYPE)),  # packed bytes, as GM holds them (formats.py)
    NzDtype.E1M2: _NzInfo(4, (_U8, FP4_STORAGE_DTYPE)),
    NzDtype.INT8: _NzInfo(8, (np.dtype(np.int8), _U8)),
    NzDtype.FLOAT16: _NzInfo(16, (np.dtype(np.float16), _U16)),
    NzDtype.BFLOAT16: _NzInfo(16, (np.dtype(ml_dtypes.bfloat16), _U16)),
}


def nz_shape(shape: tuple[int, ...], dtype: object) -> tuple[int, ...]:
    """NZ shape in elements of an ND shape (..., rows, cols): (..., ceil(cols/C0), ceil(rows/16), 16, C0)."""
    fmt = NzDtype.parse(dtype)
    *batch, rows, cols = _check_nd_shape(shape, fmt)
    return (*batch, CeilDiv(cols, fmt.c0), CeilDiv(rows, NZ_FRACTAL_ROWS), NZ_FRACTAL_ROWS, fmt.c0)


def nz_storage_shape(shape: tuple[int, ...], dtype: object) -> tuple[int, ...]:
    """Shape of the NZ array `nd_to_nz` returns: `nz_shape` with C0 counted in array items (FP4: 32 bytes)."""
    fmt = NzDtype.parse(dtype)
    return (*nz_shape(shape, fmt)[:-1], fmt.storage_c0)


def nd_storage_shape(shape: tuple[int, ...], dtype: object) -> tuple[int, ...]:
    """Shape of the ND array holding (..., rows, cols) elements: FP4 packs the last axis, (..., rows, cols/2)."""
    fmt = NzDtype.parse(dtype)
    *batch, rows, cols = _check_nd_shape(shape, fmt)
    return (*batch, rows, cols * fmt.bits // (fmt.storage_itemsize * BITS_PER_BYTE))


def nd_to_nz(x: np.ndarray, dtype: object) -> np.ndarray:
    """ND (..., rows, cols) -> FRACTAL_NZ, zero-filled tails; the result keeps x's dtype.

    FP4 (e2m1 / e1m2): x is the packed form, uint8 or FP4_STORAGE_DTYPE (..., rows, cols/2), element 2i in
    the low nibble; the result is (..., ceil(cols/64), ceil(rows/16), 16, 32) bytes.
    """
    fmt = NzDtype.parse(dtype)
    a = _check_array(x, fmt, "x")
    shape = _element_shape(a.shape, fmt)
    *batch, rows, cols_items = a.shape
    *_, c1, r1, _, c0 = nz_storage_shape(shape, fmt)
    padded = np.zeros((*batch, r1 * NZ_FRACTAL_ROWS, c1 * c0), dtype=_raw_dtype(fmt))
    padded[..., :rows, :cols_items] = a.view(_raw_dtype(fmt))
    blocked = padded.reshape(*batch, r1, NZ_FRACTAL_ROWS, c1, c0)
    nb = len(batch)
    order = (*range(nb), nb + 2, nb, nb + 1, nb + 3)  # (..., r1, 16, c1, c0) -> (..., c1, r1, 16, c0)
    return np.ascontiguousarray(blocked.transpose(order)).view(a.dtype)


def nz_to_nd(x_nz: np.ndarray, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    """FRACTAL_NZ -> ND of element shape `shape` (..., rows, cols): the inverse of nd_to_nz (tails dropped).

    FP4 returns the packed form (..., rows, cols/2) in x_nz's dtype.
    """
    fmt = NzDtype.parse(dtype)
    a = _check_array(x_nz, fmt, "x_nz", nd=False)
    want = nz_storage_shape(tuple(shape), fmt)
    if a.shape != want:
        raise MxValueError(
            f"x_nz shape {a.shape} is not the {fmt.value} NZ storage shape {want} of ND shape {tuple(shape)} "
            "((..., ceil(cols/C0), ceil(rows/16), 16, C0))"
        )
    *batch, rows, _ = tuple(shape)
    cols_items = nd_storage_shape(tuple(shape), fmt)[-1]
    *_, c1, r1, _, c0 = want
    nb = len(batch)
    order = (*range(nb), nb + 1, nb + 2, nb, nb + 3)  # (..., c1, r1, 16, c0) -> (..., r1, 16, c1, c0)
    padded = a.view(_raw_dtype(fmt)).transpose(order).reshape(*batch, r1 * NZ_FRACTAL_ROWS, c1 * c0)
    return np.ascontiguousarray(padded[..., :rows, :cols_items]).view(a.dtype)


def nd_to_nz_codes(codes: np.ndarray, dtype: object) -> np.ndarray:
    """ND (..., rows, cols) of one element code per array item (8-bit types; FP4 unpacked, one code a byte) ->
    NZ (..., ceil(cols/C0), ceil(rows/16), 16, C0) in elements (C0 = `NzDtype.c0`: 64 for FP4), zero tails,
    same dtype: the element view of `nd_to_nz` (packing its C0 rows gives nd_to_nz's bytes)."""
    fmt = NzDtype.parse(dtype)
    a = np.asarray(codes)
    if a.dtype.itemsize != fmt.storage_itemsize:
        raise MxTypeError(f"codes dtype {a.dtype}: one {fmt.value} element per {fmt.storage_itemsize}-byte item "
                          "expected (FP4: unpacked codes, one per byte)")
    *batch, rows, cols = _check_nd_shape(a.shape, fmt) if not fmt.is_packed else a.shape
    c0 = fmt.c0
    r1, c1 = CeilDiv(rows, NZ_FRACTAL_ROWS), CeilDiv(cols, c0)
    padded = np.zeros((*batch, r1 * NZ_FRACTAL_ROWS, c1 * c0), dtype=a.dtype)
    padded[..., :rows, :cols] = a
    nb = len(batch)
    order = (*range(nb), nb + 2, nb, nb + 1, nb + 3)  # (..., r1, 16, c1, c0) -> (..., c1, r1, 16, c0)
    return np.ascontiguousarray(padded.reshape(*batch, r1, NZ_FRACTAL_ROWS, c1, c0).transpose(order))


def nz_codes_to_nd(codes_nz: np.ndarray, shape: tuple[int, ...], dtype: object) -> np.ndarray:
    """The inverse of `nd_to_nz_codes`: NZ element codes -> ND (..., rows, cols) of `shape` (tails dropped)."""
    fmt = NzDtype.parse(dtype)
    a = np.asarray(codes_nz)
    *batch, rows, cols = (int(v) for v in shape)
    want = (*batch, CeilDiv(cols, fmt.c0), CeilDiv(rows, NZ_FRACTAL_ROWS), NZ_FRACTAL_ROWS, fmt.c0)
    if a.shape != want:
        raise MxValueError(f"codes_nz shape {a.shape} is not the {fmt.value} NZ element shape {want} of ND shape "
                           f"{tuple(shape)}")
    nb = len(batch)
    order = (*range(nb), nb + 1, nb + 2, nb, nb + 3)  # (..., c1, r1, 16, c0) -> (..., r1, 16, c1, c0)
    padded = a.transpose(order).reshape(*batch, want[-3] * NZ_FRACTAL_ROWS, want[-4] * fmt.c0)
    return np.ascontiguousarray(padded[..., :rows, :cols])


def nz_padding_mask(shape: tuple[int, ...], dtype: object) -> np.ndarray:
    """bool array of the NZ storage shape: True where an item is padding (a row or C0 tail), not ND data."""
    fmt = NzDtype.parse(dtype)
    *batch, rows, _ = tuple(shape)
    cols_items = nd_storage_shape(tuple(shape), fmt)[-1]
    *_, c1, r1, f16, c0 = nz_storage_shape(tuple(shape), fmt)
    row = (np.arange(r1)[:, None] * f16 + np.arange(f16)[None, :]) >= rows  # [r1, 16]
    col = (np.arange(c1)[:, None] * c0 + np.arange(c0)[None, :]) >= cols_items  # [c1, c0]
    mask = row[None, :, :, None] | col[:, None, None, :]  # [c1, r1, 16, c0]
    return np.broadcast_to(mask, (*batch, c1, r1, f16, c0)).copy()


def check_nz_weight_dims(k: int, n: int, param: str = "weight") -> None:
    """Refuse an NZ weight whose k or n is 1, as aclnnGroupedMatmulWeightNz does (its doc, line 436 at
    libochao-huawei/ops-transformer 5778144076: "n = 1 or k = 1 has no private format")."""
    if k < WEIGHT_NZ_MIN_DIM or n < WEIGHT_NZ_MIN_DIM:
        raise MxValueError(
            f"{param}: an NZ (FRACTAL_NZ) weight needs k > 1 and n > 1, got k={k}, n={n} "
            "(aclnnGroupedMatmulWeightNz: when either of the last two axes is 1 the private format is not "
            "supported; pass the weight as ND)"
        )


def _raw_dtype(fmt: NzDtype) -> np.dtype:
    return _U16 if fmt.storage_itemsize == 2 else _U8


def _check_nd_shape(shape: tuple[int, ...], fmt: NzDtype) -> tuple[int, ...]:
    shape = tuple(int(s) for s in shape)
    if not ND_MIN_DIMS <= len(shape) <= ND_MAX_DIMS:
        raise MxValueError(
            f"ND shape {shape}: the NZ format cast takes {ND_MIN_DIMS} to {ND_MAX_DIMS} dims "
            "(a matrix (rows, cols) with up to 4 batch dims; aclnnNpuFormatCast)"
        )
    if any(s < 0 for s in shape):
        raise MxValueError(f"ND shape {shape} has a negative dimension")
    if fmt.is_packed and shape[-1] % 2:
        raise MxValueError(
            f"ND shape {shape}: {fmt.value} packs two elements per byte along the C0 axis (the last ND axis), "
            f"so cols must be even, got {shape[-1]}"
        )
    return shape


def _element_shape(storage: tuple[int, ...], fmt: NzDtype) -> tuple[int, ...]:
    *lead, cols_items = storage
    return (*lead, cols_items * fmt.storage_itemsize * BITS_PER_BYTE // fmt.bits)


def _check_array(x: np.ndarray, fmt: NzDtype, param: str, nd: bool = True) -> np.ndarray:
    a = np.asarray(x)
    if a.dtype not in _INFO[fmt].accepted:
        names = ", ".join(str(d) for d in _INFO[fmt].accepted)
        raise MxTypeError(f"{param} dtype {a.dtype} does not hold {fmt.value} data; expected one of: {names}")
    if nd:
        _check_nd_shape(_element_shape(a.shape, fmt) if a.ndim else a.shape, fmt)
    elif a.ndim < ND_MIN_DIMS + 2:
        raise MxValueError(f"{param} shape {a.shape}: an NZ array has at least 4 dims (c1, r1, 16, C0)")
    return np.ascontiguousarray(a)
