"""The emulated device: platform table, cores, GM, local memory, cross-core flags, SyncAll, atomics, the
blocking wait primitive, events and hazards."""

from mc2emu.arch.platform import DAV_3510, CoreType, FlagMode, Pipe, PlatformSpec
from mc2emu.runtime.core import CoreContext
from mc2emu.runtime.device import Device, Launch, LaunchResult
from mc2emu.runtime.event_bus import EventBus, EventRecorder
from mc2emu.runtime.events import Event
from mc2emu.runtime.gm import GlobalMemory, GmAddr
from mc2emu.runtime.hazards import (
    CapacityError,
    ConstraintError,
    CoreError,
    DeadlockError,
    FlagOverflowError,
    GmError,
    Hazard,
    HazardError,
    HazardReport,
    KernelError,
    LaunchAborted,
    Mc2EmuError,
    Severity,
)
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.runtime.local_memory import Position
from mc2emu.runtime.perturb import PerturbPolicy
from mc2emu.runtime.waiting import Waiter

__all__ = [
    "DAV_3510",
    "CapacityError",
    "ConstraintError",
    "CoreContext",
    "CoreError",
    "CoreType",
    "DeadlockError",
    "Device",
    "Event",
    "EventBus",
    "EventRecorder",
    "FlagMode",
    "FlagOverflowError",
    "GlobalMemory",
    "GmAddr",
    "GmError",
    "Hazard",
    "HazardError",
    "HazardReport",
    "KernelError",
    "KernelType",
    "Launch",
    "LaunchAborted",
    "LaunchResult",
    "Mc2EmuError",
    "PerturbPolicy",
    "Pipe",
    "PlatformSpec",
    "Position",
    "Severity",
    "Waiter",
]
