"""Blaze dispatch policies: compile-time tags that select the BlockMmad / GemmUniversal specialization.

Emulates ops-tensor `include/blaze/gemm/policy/dispatch_policy.h`:

    template <uint64_t FullLoadMode_ = 0, bool AtomicAdd_ = false,
              class ScheduleType_ = KernelMmadWithScaleMx, uint64_t L0C2UBMode_ = L0C2UB_MODE_NONE>
    struct MatmulWithScaleMx { using ScheduleType = ScheduleType_; FULL_LOAD_MODE; IS_ATOMIC_ADD; ... };

A policy is a frozen dataclass value (hashable, compared by value): `MatmulWithScaleMx(A_FULL_LOAD_MODE,
True)` plays `MatmulWithScaleMx<A_FULL_LOAD_MODE, true>`. The full-load modes are `FullLoadMode` members
whose values are the source's constants (NONE 0, A 1, B 2). Only NONE and A are implemented by the MX
BlockMmad (as in the source); B is refused at construction, loudly, like an unmatched specialization.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from mc2emu.runtime.hazards import ConstraintError


class FullLoadMode(enum.IntEnum):
    """`NONE_FULL_LOAD_MODE` / `A_FULL_LOAD_MODE` / `B_FULL_LOAD_MODE` of common_utils.h."""

    NONE_FULL_LOAD_MODE = 0  # stream A and B through L1 in kL1 chunks, per tile
    A_FULL_LOAD_MODE = 1  # A (all of K) stays resident in L1 after the first tile; only B streams
    B_FULL_LOAD_MODE = 2  # B resident (not used by the MX kernels)


NONE_FULL_LOAD_MODE = FullLoadMode.NONE_FULL_LOAD_MODE
A_FULL_LOAD_MODE = FullLoadMode.A_FULL_LOAD_MODE
B_FULL_LOAD_MODE = FullLoadMode.B_FULL_LOAD_MODE


class KernelMmadWithScaleMx:
    """Schedule tag of the MX kernels (`struct KernelMmadWithScaleMx {}`): GemmUniversal dispatches on it."""


@dataclass(frozen=True)
class MatmulWithScaleMx:
    """`MatmulWithScaleMx<FullLoadMode_, AtomicAdd_>`: MX matmul with scaleA / scaleB.

    `atomic` is the compile-time atomic-add switch: the QBMM kernel calls `SetAtomicAdd<float>()` before
    Init when it is set (seed 004)."""

    fullLoadMode: FullLoadMode = NONE_FULL_LOAD_MODE
    atomic: bool = False
    ScheduleType: type = KernelMmadWithScaleMx

    def __post_init__(self) -> None:
        try:
            mode = FullLoadMode(self.fullLoadMode)
        except ValueError:
            raise ConstraintError("MatmulWithScaleMx.fullLoadMode",
                                  f"{self.fullLoadMode!r} is not a full-load mode "
                                  f"({', '.join(m.name for m in FullLoadMode)})") from None
        if mode is B_FULL_LOAD_MODE:
            raise ConstraintError("MatmulWithScaleMx.fullLoadMode",
                                  "B_FULL_LOAD_MODE has no MX BlockMmad specialization in ops-tensor")
        object.__setattr__(self, "fullLoadMode", mode)
        object.__setattr__(self, "atomic", bool(self.atomic))

    @property
    def FULL_LOAD_MODE(self) -> FullLoadMode:
        return self.fullLoadMode

    @property
    def IS_ATOMIC_ADD(self) -> bool:
        return self.atomic

    @property
    def isAtomicAdd(self) -> bool:
        """The spelling kernel_qbmm_mx.h reads (`BlockMmad::DispatchPolicy::isAtomicAdd`)."""
        return self.atomic
