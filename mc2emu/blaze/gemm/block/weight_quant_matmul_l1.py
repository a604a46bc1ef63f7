"""The L1 of each AI core of a weight-quant matmul launch, shared by its AIC and its two AIVs.

In the V+C weight-quant matmul (seed 001) the AIVs write the dequantized weight into their AIC's L1 with
`copy_ubuf_to_cbuf` and the AIC's BlockMmad reads it from there (Blaze skill assets
`kernel/weight_quant_matmul_kernel.h` `StoreUB2L1` and `block/weight_quant_matmul_block_mmad.h`). Here
each AI core's L1 is one byte array of `TOTAL_L1_SIZE`, filled with a poison pattern (0xFF: NaN in bf16 /
half) so a read of bytes nobody wrote shows; the kernel code addresses it by byte offset as the source
does (`l1HalfSize_ * ubBufId`, `l1BufferAOffset_[i]`, `biasL1Offset_`), so overlapping buffers overlap.

Fractal layouts of a (rows, cols) logical tile with C0 = 16 elements (the Te layouts the source names):
- NZ (`NZLayoutPtn`, B_dequant when !transB, A always): element (r, c) at ((c // 16) * Align16(rows) + r)
  * 16 + c % 16;
- ZN (`ZNLayoutPtn`, B_dequant when transB): element (r, c) at ((r // 16) * Align16(cols) + c) * 16 +
  r % 16.
The emulator moves whole sub-tiles with numpy reshapes; the copy's burst geometry (nBurst, lenBurst,
srcGap, dstGap of `copy_ubuf_to_cbuf`) is what these index formulas spell out.
"""

from __future__ import annotations

import threading

import numpy as np

from mc2emu.numerics.int_math import Align16, CeilDiv
from mc2emu.numerics.payload import Payload, is_payload
from mc2emu.runtime.hazards import CapacityError
from mc2emu.runtime.local_region import local_bytes

C0 = 16  # BLOCK_CUBE: a fractal is 16 x 16 elements; a 16-bit C0 row is one 32-byte DataBlock
L1_POISON = 0xFF  # never-written L1 bytes: NaN in bf16 and half


class WeightQuantL1:
    """The L1 byte arrays of the AI cores of one launch (created on first use, per group)."""

    def __init__(self, l1_size: int, data: bool = True) -> None:
        self.l1Size = int(l1_size)
        self.data = data   # False: a protocol-only run (the L1s mark the payload they receive)
        self._l1: dict[int, np.ndarray] = {}
        self._lock = threading.Lock()

    def of(self, group: int) -> np.ndarray:
        with self._lock:
            buf = self._l1.get(group)
            if buf is None:
                buf = self._l1[group] = (np.full(self.l1Size, L1_POISON, dtype=np.uint8) if self.data
                                         else local_bytes(self.l1Size))
            return buf


def _region(l1: np.ndarray, offset: int, nelems: int, dtype: np.dtype, what: str) -> np.ndarray:
    nbytes = nelems * dtype.itemsize
    if offset < 0 or offset + nbytes > l1.size:
        raise CapacityError(f"L1 {what} of {nbytes} B at byte {offset} runs past the {l1.size} B L1")
    return l1[offset: offset + nbytes].view(dtype)


def nz_view(l1: np.ndarray, offset: int, dtype: np.dtype, rows: int, cols: int, what: str) -> np.ndarray:
    """The NZ fractal storage of a (rows, cols) tile at `offset`: shape (Align16(cols) / 16, Align16(rows), 16)."""
    r16, c16 = Align16(rows), Align16(cols)
    return _region(l1, offset, r16 * c16, dtype, what).reshape(c16 // C0, r16, C0)


def zn_view(l1: np.ndarray, offset: int, dtype: np.dtype, rows: int, cols: int, what: str) -> np.ndarray:
    """The ZN fractal storage of a (rows, cols) tile at `offset`: shape (Align16(rows) / 16, Align16(cols), 16)."""
    r16, c16 = Align16(rows), Align16(cols)
    return _region(l1, offset, r16 * c16, dtype, what).reshape(r16 // C0, c16, C0)


def _pad_cols(x: np.ndarray, cols: int) -> np.ndarray:
    if x.shape[1] == cols:
        return x
    if is_payload(x):
        return Payload((x.shape[0], cols), x.dtype)  # type: ignore[return-value]
    out = np.zeros((x.shape[0], cols), dtype=x.dtype)
    out[:, : x.shape[1]] = x
    return out


def store_nz(view: np.ndarray, row0: int, tile: np.ndarray) -> None:
    """Write logical rows [row0, row0 + len(tile)) of an NZ tile (all its columns, padded to 16)."""
    rows, cols = tile.shape
    if rows == 0 or cols == 0:
        return
    groups = CeilDiv(cols, C0)
    src = _pad_cols(tile, groups * C0).reshape(rows, groups, C0).transpose(1, 0, 2)
    view[:groups, row0: row0 + rows, :] = src


def store_zn_rows_major(view: np.ndarray, col0: int, tile_t: np.ndarray) -> None:
    """Write logical columns [col0, col0 + n) of a ZN tile from `tile_t` given as (n, rows) (the transposed,
    DN order the AIV holds when transB), rows padded to 16."""
    n, rows = tile_t.shape
    if rows == 0 or n == 0:
        return
    groups = CeilDiv(rows, C0)
    src = _pad_cols(tile_t, groups * C0).reshape(n, groups, C0).transpose(1, 0, 2)
    view[:groups, col0: col0 + n, :] = src


def load_nz(view: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The logical (rows, cols) tile of an NZ storage view (a copy)."""
    return np.ascontiguousarray(view[:, :rows, :].transpose(1, 0, 2).reshape(rows, -1)[:, :cols])


def load_zn(view: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """The logical (rows, cols) tile of a ZN storage view (a copy)."""
    return np.ascontiguousarray(view[:, :cols, :].transpose(0, 2, 1).reshape(-1, cols)[:rows])
