"""One kernel launch on one device: what its cores share (`Launch`), and how a core is keyed (`CoreKey`).

`Device.launch` builds one per call and hands it to every core's `CoreContext`; the cross-core flags and
SyncAll read the launch's cores, groups and kernel type from it.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from mc2emu.arch.platform import CoreType
from mc2emu.runtime.kernel_type import KernelType

# Cores are keyed by their label ("AIC3", "AIV7"): strings hash fast, enums do not.
CoreKey = str


@dataclass
class Launch:
    """What the cores of one launch share. Core keys are the labels "AIC3" / "AIV7"."""

    kernel_type: KernelType
    block_dim: int
    abort: threading.Event = field(default_factory=threading.Event)
    used_sync_all: bool = False
    name: str = "kernel"
    index: int = 0   # the device's launch number (0, 1, ...): what cross-launch checks name a launch by

    def __post_init__(self) -> None:
        kt = self.kernel_type
        self.ratio = kt.aiv_ratio
        self.aics = [f"AIC{i}" for i in range(self.block_dim)] if kt.runs_aic else []
        self.aivs = [f"AIV{i}" for i in range(self.block_dim * self.ratio)]
        self.groups = {g: self.aivs[g * self.ratio:(g + 1) * self.ratio] for g in range(self.block_dim)}
        self.reported: set[tuple] = set()
        self.validated: dict[tuple, int | None] = {}
        # label -> "running" / "finished" / "failed": what a deadlock report says of a core that waits on
        # nothing.
        self.core_state: dict[str, str] = {}

    def count(self, core_type: CoreType) -> int:
        return len(self.aics) if core_type is CoreType.AIC else len(self.aivs)

    def cores_of(self, core_type: CoreType) -> list[CoreKey]:
        return self.aics if core_type is CoreType.AIC else self.aivs
