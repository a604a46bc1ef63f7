"""apace basic building blocks (ops-transformer `mc2/common/op_kernel/apace/basic/`)."""

from mc2emu.apace.basic.fragment_tensor import (
    MAX_FRAGMENT_COUNT,
    FragmentComposition,
    FragmentInfo,
    FragmentParam,
    FragmentSliceCopy,
    FragmentTensor,
    MakeFragmentTensor,
)

__all__ = [
    "MAX_FRAGMENT_COUNT", "FragmentComposition", "FragmentInfo", "FragmentParam", "FragmentSliceCopy",
    "FragmentTensor", "MakeFragmentTensor",
]
