"""Ascend C tensor API emulation: layout patterns and GM tensors (`include/tensor_api/tensor.h`)."""

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
    "FP4_STORAGE_DTYPE", "CacheMode", "DNExtLayoutPtn", "FrameLayoutFormat", "GmTensor", "IsTrans", "Layout",
    "LayoutError", "LayoutPtn", "Location", "MakeFrameLayout", "MakeMemPtr", "MakeTensor", "MemPtr",
    "NDExtLayoutPtn", "ScaleADNLayoutPtn", "ScaleANDLayoutPtn", "ScaleBDNLayoutPtn", "ScaleBNDLayoutPtn",
]
