"""Ascend C tensor API emulation: layout patterns, GM tensors and copies (`include/tensor_api`)."""

from mc2emu.blaze.tensor_api.copy import (
    Copy,
    CopyGM2L1,
    CopyHandle,
    CopyL0C2GM,
    FixpipeParams,
    SliceLocal,
)
from mc2emu.blaze.tensor_api.layout import (
    DNExtLayoutPtn,
    FrameLayoutFormat,
    IsTrans,
    Layout,
    LayoutError,
    LayoutPtn,
    MakeFrameLayout,
    NDExtLayoutPtn,
    ScaleADNLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)
from mc2emu.blaze.tensor_api.tensor import (
    FP4_STORAGE_DTYPE,
    CacheMode,
    GmTensor,
    Location,
    MakeMemPtr,
    MakeTensor,
    MemPtr,
)

__all__ = [
    "FP4_STORAGE_DTYPE", "CacheMode", "Copy", "CopyGM2L1", "CopyHandle", "CopyL0C2GM", "DNExtLayoutPtn",
    "FixpipeParams", "FrameLayoutFormat", "GmTensor", "IsTrans", "Layout", "LayoutError", "LayoutPtn", "Location",
    "MakeFrameLayout", "MakeMemPtr", "MakeTensor", "MemPtr", "NDExtLayoutPtn", "ScaleADNLayoutPtn",
    "ScaleANDLayoutPtn", "ScaleBDNLayoutPtn", "ScaleBNDLayoutPtn", "SliceLocal",
]
