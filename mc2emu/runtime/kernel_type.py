"""Kernel types of an Ascend C launch (`KERNEL_TASK_TYPE_DEFAULT(KERNEL_TYPE_...)`).

The kernel type decides which core types run and how many AIVs pair with one AIC (`GetTaskRation()`),
and which cross-core synchronization modes exist (asc-devkit 核间同步).
"""

from __future__ import annotations

import enum

from mc2emu.arch.platform import FlagMode


class KernelType(enum.Enum):
    AIC_ONLY = "AIC_ONLY"
    AIV_ONLY = "AIV_ONLY"
    MIX_AIC_1_0 = "MIX_AIC_1_0"
    MIX_AIV_1_0 = "MIX_AIV_1_0"
    MIX_AIC_1_1 = "MIX_AIC_1_1"
    MIX_AIC_1_2 = "MIX_AIC_1_2"

    @classmethod
    def parse(cls, value: KernelType | str) -> KernelType:
        if isinstance(value, cls):
            return value
        try:
            return cls(str(value).upper())
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise ValueError(f"kernel_type {value!r} is not one of {allowed}") from None

    @property
    def runs_aic(self) -> bool:
        return self in (KernelType.AIC_ONLY, KernelType.MIX_AIC_1_0, KernelType.MIX_AIC_1_1,
                        KernelType.MIX_AIC_1_2)

    @property
    def aiv_ratio(self) -> int:
        """AIVs per block: `GetTaskRation()` on the AIV side (0 when no AIV runs)."""
        return {KernelType.AIV_ONLY: 1, KernelType.MIX_AIV_1_0: 1, KernelType.MIX_AIC_1_1: 1,
                KernelType.MIX_AIC_1_2: 2}.get(self, 0)

    @property
    def is_mix(self) -> bool:
        return self.name.startswith("MIX")

    @property
    def has_pairs(self) -> bool:
        """AIC and AIV run together as groups (modes 1 and 2 exist)."""
        return self in (KernelType.MIX_AIC_1_1, KernelType.MIX_AIC_1_2)

    def supports_mode(self, mode: FlagMode) -> bool:
        """Cross-core modes available under this kernel type (SPEC §2)."""
        if mode is FlagMode.ALL_CORES_OF_TYPE:
            return self.is_mix
        if mode in (FlagMode.AIVS_OF_GROUP, FlagMode.AIC_AIV_OF_GROUP):
            return self.has_pairs
        if mode is FlagMode.MIX_1_2:
            return self is KernelType.MIX_AIC_1_2
        return False
