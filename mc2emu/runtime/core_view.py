"""The device and a core as the core-level machinery sees them: `DeviceView`, `FlagsView`, `CoreView`.

`Device` builds the cores (`CoreContext`) and owns the cross-core flags (`CrossCoreFlags`); the cores, the
flags and SyncAll in turn read the device and the calling core. These protocols name what they read, so
`core`, `cross_core` and `sync_all` import this module instead of each other or `device`, and the import
graph of the runtime stays acyclic: launch, core_view -> cross_core, sync_all -> core -> device. `Device`,
`CrossCoreFlags` and `CoreContext` satisfy them (mypy checks it where they are passed).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import threading

    from mc2emu.arch.platform import CoreType, FlagMode, Pipe, PlatformSpec
    from mc2emu.runtime.compute_slots import ComputeSlots
    from mc2emu.runtime.decode_cache import DecodeCache
    from mc2emu.runtime.event_bus import EventBus
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.gm import GlobalMemory
    from mc2emu.runtime.hazards import HazardLog
    from mc2emu.runtime.launch import CoreKey, Launch
    from mc2emu.runtime.perturb import PerturbPolicy
    from mc2emu.runtime.waiting import Doorbell, Waiter


class FlagsView(Protocol):
    """The cross-core flag state of a device as its cores use it (`CrossCoreFlags`)."""

    def set_flag(self, ctx: CoreView, mode: int | FlagMode, pipe: Pipe, fid: int, *,
                 internal: bool = False) -> None: ...

    def wait_flag(self, ctx: CoreView, mode: int | FlagMode, pipe: Pipe, fid: int, *,
                  internal: bool = False) -> None: ...

    def flush_deferred(self, ctx: CoreView) -> None: ...


class DeviceView(Protocol):
    """One NPU as its cores, its flags and SyncAll see it (`Device`)."""

    @property
    def rank(self) -> int: ...

    @property
    def platform(self) -> PlatformSpec: ...

    @property
    def lock(self) -> threading.Lock: ...

    @property
    def events(self) -> EventBus: ...

    @property
    def hazards(self) -> HazardLog: ...

    @property
    def gm(self) -> GlobalMemory: ...

    @property
    def data(self) -> bool: ...

    @property
    def waiter(self) -> Waiter: ...

    @property
    def flags(self) -> FlagsView: ...

    @property
    def perturb(self) -> PerturbPolicy | None: ...

    @property
    def faults(self) -> FaultPlan | None: ...

    @property
    def soft_sync_epochs(self) -> dict[Any, int]: ...

    @property
    def compute_slots(self) -> ComputeSlots: ...

    @property
    def decode_cache(self) -> DecodeCache: ...

    def core_bell(self, key: CoreKey) -> Doorbell: ...


class CoreView(Protocol):
    """One AIC or AIV of a launch as the flags and SyncAll see it (`CoreContext`)."""

    # A Set held back by the seeded perturbation; the flags hold and release it.
    deferred_set: tuple | None

    @property
    def device(self) -> DeviceView: ...

    @property
    def launch(self) -> Launch: ...

    @property
    def core_type(self) -> CoreType: ...

    @property
    def group(self) -> int: ...

    @property
    def sub_block(self) -> int: ...

    @property
    def rank(self) -> int: ...

    @property
    def key(self) -> CoreKey: ...

    @property
    def label(self) -> str: ...

    def GetBlockIdx(self) -> int: ...

    def checkpoint(self, point: str) -> None: ...

    # `CoreContext.emit`: publish an event of this core and count it as progress (its arguments are the
    # event bus's).
    def emit(self, *args: Any, **kwargs: Any) -> None: ...
