"""Tensor API copies: `Te::Copy(copyHandle, dst, src)` between GM tensors and a core's local buffers.

Emulates `Te::MakeCopy(Te::CopyGM2L1{})` and `Te::MakeCopy(Te::CopyL0C2GM{}).with(Te::FixpipeParams(unitFlag))`
of the Ascend C tensor API (`include/tensor_api`), the two copy handles the FragmentTensor copies are called
with (ops-transformer `mc2/common/op_kernel/apace/block/mmad/qmm_mx_block_mmad_fragment.h`, commit 5778144076,
`CopyAInL1` / `CopyScalesInL1` / `ScatterL0C2GM`). A handle is bound to the core that issues the copy, so GM
bounds, poison, the atomic mode and GM events apply (`GmTensor.load` / `store`).

Local (L1 / L0C) tensors are numpy arrays here (logical (rows, cols), as the block components hold them);
`SliceLocal` is their `Tensor::Slice`: a view, bounds-checked because numpy slicing would silently clip.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from mc2emu.blaze.tensor_api.layout import LayoutError
from mc2emu.blaze.tensor_api.tensor import GmTensor
from mc2emu.numerics import fixpipe_cast
from mc2emu.numerics.payload import is_payload

if TYPE_CHECKING:
    from collections.abc import Sequence

    from mc2emu.runtime.core import CoreContext


class CopyHandle(Protocol):
    """What `Te::Copy(copyHandle, dst, src)` needs: the issuing core and the move itself."""

    @property
    def ctx(self) -> CoreContext: ...

    def __call__(self, dst: Any, src: Any) -> None: ...


def SliceLocal(tensor: np.ndarray, coord: Sequence[int], shape: Sequence[int]) -> np.ndarray:
    """`Tensor::Slice(coord, shape)` of a local tensor: a writable view of `shape` elements from `coord`."""
    if len(coord) != tensor.ndim or len(shape) != tensor.ndim:
        raise LayoutError(f"local tensor of rank {tensor.ndim} sliced with coord {tuple(coord)} shape {tuple(shape)}")
    index = []
    for d, (o, n) in enumerate(zip(coord, shape, strict=True)):
        o, n = int(o), int(n)
        if o < 0 or n < 0 or o + n > tensor.shape[d]:
            raise LayoutError(f"local tensor {tensor.shape}: slice of {n} from {o} along dimension {d} leaves the "
                              f"tensor")
        index.append(slice(o, o + n))
    return tensor[tuple(index)]


def Copy(copyHandle: CopyHandle, dst: Any, src: Any) -> None:
    """`Te::Copy(copyHandle, dst, src)`."""
    copyHandle(dst, src)


@dataclass(frozen=True)
class CopyGM2L1:
    """`Te::CopyGM2L1`: a GM tensor into a local buffer of the same shape and element type (MTE2)."""

    ctx: CoreContext

    def __call__(self, dst: np.ndarray, src: GmTensor) -> None:
        if dst.shape != src.shape:
            raise LayoutError(f"{self.ctx.label}: CopyGM2L1 of a {src.shape} GM tensor into a {dst.shape} buffer")
        if dst.dtype != src.dtype:
            raise LayoutError(f"{self.ctx.label}: CopyGM2L1 of {src.dtype} into a {dst.dtype} buffer")
        src.load(self.ctx, out=dst)   # the GM read lands in dst (no intermediate copy)


@dataclass(frozen=True)
class FixpipeParams:
    """`Te::FixpipeParams(unitFlag)`: 3 = the final accumulation (L0C may be read out)."""

    unitFlag: int = 3


@dataclass(frozen=True)
class CopyL0C2GM:
    """`Te::CopyL0C2GM`: the float32 accumulator into a GM tensor, converted by the fixpipe to the tensor's
    element type (RNE; `numerics.fixpipe_cast`). Adds when the core's atomic mode is set."""

    ctx: CoreContext
    params: FixpipeParams = FixpipeParams()

    def with_(self, params: FixpipeParams) -> CopyL0C2GM:
        """`copyL0C2GM.with(FixpipeParams(...))` (`with` is a Python keyword)."""
        return replace(self, params=params)

    def __call__(self, dst: GmTensor, src: np.ndarray) -> None:
        if src.shape != dst.shape:
            raise LayoutError(f"{self.ctx.label}: CopyL0C2GM of a {src.shape} L0C tile into a {dst.shape} GM tensor")
        dst.store(self.ctx, fixpipe_cast(src if is_payload(src) else np.asarray(src), dst.dtype))
