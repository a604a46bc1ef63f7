"""`SyncAll` — the all-core barrier of Ascend C, hard (cross-core flags) and soft (GM epoch slots).

Hard SyncAll on DAV_3510 (SPEC §2), by kernel mix:

| call               | core | MIX 1:1                                 | MIX 1:2                                  |
|--------------------|------|-----------------------------------------|------------------------------------------|
| `SyncAll<true>()`  | AIV  | mode-0 Set(14), Wait(14)                | same                                     |
| `SyncAll<true>()`  | AIC  | no-op                                   | no-op                                    |
| `SyncAll<false>()` | AIV  | mode-2 Set(12), Wait(13)                | mode-4 Set(12), Wait(13)                 |
| `SyncAll<false>()` | AIC  | mode-2 Wait(12), mode-0 Set/Wait(11),   | mode-4 Wait(12), Wait(28), mode-0        |
|                    |      | mode-2 Set(13)                          | Set/Wait(11), mode-4 Set(13), Set(29)    |

Kernels without the partner core type (MIX_AIC_1_0, MIX_AIV_1_0) reduce `SyncAll<false>` to the mode-0
barrier of their own type. A SyncAll over more blocks than physical cores can never complete (blocks of a
later wave are not resident): it hangs on hardware; here it is reported and then waits into the deadline.

Soft SyncAll: each core stores its epoch into its own 32-byte GM slot and waits until every slot holds at
least that epoch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from mc2emu.arch.platform import CoreType, Pipe
from mc2emu.runtime.events import SyncAllBegin, SyncAllEnd
from mc2emu.runtime.hazards import Hazard
from mc2emu.runtime.kernel_type import KernelType

if TYPE_CHECKING:
    from mc2emu.runtime.core_view import CoreView
    from mc2emu.runtime.gm import GmAddr

# The pipe hard SyncAll uses for its flags on each core type (one the core has).
_SYNC_PIPE = {CoreType.AIC: Pipe.PIPE_FIX, CoreType.AIV: Pipe.PIPE_MTE3}


def _oversubscribed(ctx: CoreView) -> bool:
    plat = ctx.device.platform
    n = ctx.launch.block_dim
    aiv_total = n * max(ctx.launch.kernel_type.aiv_ratio, 1)
    over = n > plat.aic_count if ctx.core_type is CoreType.AIC else aiv_total > plat.aiv_count
    if over:
        ctx.device.hazards.report(
            Hazard.SYNC_ALL_OVERSUBSCRIBED, ctx.label,
            f"SyncAll with block_dim {n} above the physical core count: blocks of later waves are never "
            f"resident, the barrier cannot complete (hangs on hardware)")
        ctx.device.waiter.wait_until(ctx.device.core_bell(ctx.key), lambda: False, core=ctx.label,
                                     obj="SyncAll (oversubscribed)", expected="all blocks resident",
                                     setter="blocks of a later wave")
    return over


def sync_all_hard(ctx: CoreView, is_aiv_only: bool = True) -> None:
    plat = ctx.device.platform
    flags = ctx.device.flags
    kt = ctx.launch.kernel_type
    ctx.launch.used_sync_all = True
    if ctx.device.events.active:
        ctx.device.events.emit(SyncAllBegin, ctx.label, soft=False, is_aiv_only=is_aiv_only)
    pipe = _SYNC_PIPE[ctx.core_type]
    set_, wait = flags.set_flag, flags.wait_flag
    if is_aiv_only:
        if ctx.core_type is CoreType.AIV and not _oversubscribed(ctx):
            set_(ctx, 0, pipe, plat.syncall_aiv_only_id, internal=True)
            wait(ctx, 0, pipe, plat.syncall_aiv_only_id, internal=True)
    elif not _oversubscribed(ctx):
        a, b, barrier = plat.syncall_mix_aiv_set_id, plat.syncall_mix_aic_set_id, plat.syncall_mix_barrier_id
        if kt is KernelType.MIX_AIC_1_1:
            if ctx.core_type is CoreType.AIV:
                set_(ctx, 2, pipe, a, internal=True)
                wait(ctx, 2, pipe, b, internal=True)
            else:
                wait(ctx, 2, pipe, a, internal=True)
                set_(ctx, 0, pipe, barrier, internal=True)
                wait(ctx, 0, pipe, barrier, internal=True)
                set_(ctx, 2, pipe, b, internal=True)
        elif kt is KernelType.MIX_AIC_1_2:
            if ctx.core_type is CoreType.AIV:
                set_(ctx, 4, pipe, a, internal=True)
                wait(ctx, 4, pipe, b, internal=True)
            else:
                wait(ctx, 4, pipe, a, internal=True)
                wait(ctx, 4, pipe, a + 16, internal=True)
                set_(ctx, 0, pipe, barrier, internal=True)
                wait(ctx, 0, pipe, barrier, internal=True)
                set_(ctx, 4, pipe, b, internal=True)
                set_(ctx, 4, pipe, b + 16, internal=True)
        else:
            # One core type only (or none: AIC_ONLY / AIV_ONLY, which the flag layer reports).
            set_(ctx, 0, pipe, barrier, internal=True)
            wait(ctx, 0, pipe, barrier, internal=True)
    if ctx.device.events.active:
        ctx.device.events.emit(SyncAllEnd, ctx.label, soft=False, is_aiv_only=is_aiv_only)


def sync_all_soft(ctx: CoreView, workspace: GmAddr, participants: int | None = None) -> None:
    """Soft SyncAll over `participants` cores of this core type (default: all of them), each owning the
    32-byte slot at `workspace + GetBlockIdx() * 32`."""
    dev = ctx.device
    slot = dev.platform.soft_syncall_slot_bytes
    n = participants if participants is not None else ctx.launch.count(ctx.core_type)
    ctx.launch.used_sync_all = True
    if dev.events.active:
        dev.events.emit(SyncAllBegin, ctx.label, soft=True, participants=n)
    idx = ctx.GetBlockIdx()
    slot_key = (workspace, idx)
    epoch = dev.soft_sync_epochs.get(slot_key, 0) + 1
    dev.soft_sync_epochs[slot_key] = epoch
    dev.gm.write(workspace + idx * slot, np.array([epoch], dtype=np.int32), core=ctx.label)
    slots = dev.gm.view(workspace, np.int32, (n,), strides=(slot,))
    with dev.lock:
        for key in ctx.launch.cores_of(ctx.core_type):
            dev.core_bell(key).ring()
    dev.waiter.wait_until(dev.core_bell(ctx.key), lambda: bool((slots >= epoch).all()), core=ctx.label,
                          obj=f"SyncAll(soft) epoch slots @ {workspace!r}", expected=f"all >= {epoch}",
                          setter=f"all {n} {ctx.core_type.value}s",
                          current=lambda: slots.tolist(), poll=True)
    if dev.events.active:
        dev.events.emit(SyncAllEnd, ctx.label, soft=True, participants=n)
