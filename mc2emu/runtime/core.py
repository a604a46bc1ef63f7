"""The kernel-side view of one core: what `GetBlockIdx()`, `CrossCoreSetFlag` and friends mean here.

A kernel is a Python callable `kernel(ctx, *args)` run once per core thread; `ctx` is this core's
`CoreContext`. Method names keep the Ascend C spelling so a line reads as the source does:

    if ctx.ASCEND_IS_AIV:
        ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, round_idx)      # CrossCoreSetFlag<0x2, PIPE_MTE3>(round)
    blockIdx = ctx.GetBlockIdx() // ctx.GetTaskRation()

Indices (SPEC §1): `GetBlockNum()` is block_dim on both core types; an AIC's `GetBlockIdx()` is its block;
an AIV's is block * ratio + sub-block, with `GetTaskRation()` = 1 (MIX 1:1) or 2 (MIX 1:2), 1 on AIC.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec

import numpy as np

from mc2emu.arch.platform import CoreType, FlagMode, Pipe
from mc2emu.runtime import sync_all
from mc2emu.runtime.events import AtomicMode, Event, PerturbDelay, SetOvertaken
from mc2emu.runtime.faults import DELAY_RANK_S, KILLED_EXIT_CODE, Fault, FaultHook
from mc2emu.runtime.hazards import LaunchAborted
from mc2emu.runtime.local_memory import LocalMemory
from mc2emu.runtime.perturb import WINDOW_STORE

P = ParamSpec("P")

if TYPE_CHECKING:
    from mc2emu.runtime.core_view import DeviceView
    from mc2emu.runtime.gm import GmAddr
    from mc2emu.runtime.launch import Launch


class CoreContext:
    """One AIC or AIV of one launch on one rank."""

    def __init__(self, device: DeviceView, launch: Launch, core_type: CoreType, block: int, sub_block: int) -> None:
        self.device = device
        self.launch = launch
        self.core_type = core_type
        self.group = block                      # the AI core (AIC + its AIVs) this core belongs to
        self.sub_block = sub_block
        ratio = launch.kernel_type.aiv_ratio if core_type is CoreType.AIV else 1
        self._task_ration = ratio
        self._block_idx = block * ratio + sub_block if core_type is CoreType.AIV else block
        self.label = f"{core_type.value}{self._block_idx}"
        self.key = self.label
        self.local = LocalMemory(device.platform, core_type, self.label, device.hazards, data=device.data)
        self.atomic_dtype: np.dtype | None = None
        self.rank = device.rank
        # A Set held back by the seeded perturbation (consecutive Sets may complete out of order).
        self.deferred_set: tuple | None = None

    # -- indices (Ascend C names) ------------------------------------------------------------------------
    @property
    def ASCEND_IS_AIC(self) -> bool:
        return self.core_type is CoreType.AIC

    @property
    def ASCEND_IS_AIV(self) -> bool:
        return self.core_type is CoreType.AIV

    def GetBlockIdx(self) -> int:
        return self._block_idx

    def GetBlockNum(self) -> int:
        return self.launch.block_dim

    def GetTaskRation(self) -> int:
        return self._task_ration

    def GetSubBlockIdx(self) -> int:
        return self.sub_block

    # -- cross-core synchronization ----------------------------------------------------------------------
    def CrossCoreSetFlag(self, mode: int | FlagMode, pipe: Pipe, flag_id: int) -> None:
        """`CrossCoreSetFlag<mode, pipe>(flagId)`."""
        self.checkpoint("set")
        self.device.flags.set_flag(self, mode, pipe, flag_id)

    def CrossCoreWaitFlag(self, mode: int | FlagMode, pipe: Pipe, flag_id: int) -> None:
        """`CrossCoreWaitFlag<mode, pipe>(flagId)`."""
        self.device.flags.wait_flag(self, mode, pipe, flag_id)

    def SyncAll(self, is_aiv_only: bool = True) -> None:
        """`SyncAll<isAIVOnly>()` (hard, flag based)."""
        self.checkpoint("sync_all")
        sync_all.sync_all_hard(self, is_aiv_only)

    def SyncAllSoft(self, workspace: GmAddr, participants: int | None = None) -> None:
        """`SyncAll(gmWorkspace, ubWorkspace)` (soft, GM epoch slots)."""
        self.checkpoint("sync_all")
        sync_all.sync_all_soft(self, workspace, participants)

    # -- atomic write-out ------------------------------------------------------------------------------------
    def SetAtomicAdd(self, dtype: Any) -> None:
        """`SetAtomicAdd<T>()`: this core's GM write-outs add in T until `SetAtomicNone()`."""
        self.atomic_dtype = np.dtype(dtype)
        if self.device.events.active:
            self.device.events.emit(AtomicMode, self.label, dtype=str(self.atomic_dtype))

    def SetAtomicNone(self) -> None:
        self.atomic_dtype = None
        if self.device.events.active:
            self.device.events.emit(AtomicMode, self.label, dtype=None)

    # -- GM access on behalf of this core -----------------------------------------------------------------
    def gm_read(self, addr: GmAddr, dtype: Any, shape: Any, strides: Any = None, out: Any = None,
                same_as: Any = None) -> np.ndarray:
        """DataCopy GM -> local (MTE2); with `out`, into that local buffer (`same_as`: see `GlobalMemory.read`)."""
        return self.device.gm.read(addr, dtype, shape, strides, core=self.label, out=out, same_as=same_as)

    def gm_write(self, addr: GmAddr, value: np.ndarray, strides: Any = None) -> None:
        """DataCopy / Fixpipe local -> GM (MTE3 / FIX), adding when the atomic mode is set."""
        perturb = self.device.perturb
        if perturb is not None and WINDOW_STORE in perturb.points and addr.alloc.kind == "window":
            self.checkpoint(WINDOW_STORE)
        self.device.gm.write(addr, value, strides, core=self.label, atomic=self.atomic_dtype)
        self.device.waiter.progress.bump()   # a write-out is progress (a long reduce phase puts nothing)

    # -- plumbing ----------------------------------------------------------------------------------------------
    def emit(self, cls: Callable[Concatenate[int, str, int, int, P], Event], /, *args: P.args,
             **fields: P.kwargs) -> None:
        """Publish an event of this core (`cls(..., **fields)`) and count it as progress."""
        self.device.waiter.progress.bump()
        if self.device.events.active:
            self.device.events.emit(cls, self.label, *args, **fields)

    def checkpoint(self, point: str) -> None:
        """Where a core notices that its launch was aborted, and where seeded perturbation delays it."""
        abort = self.launch.abort
        if abort.is_set():
            raise LaunchAborted(f"rank {self.rank} {self.label}: launch aborted")
        if self.deferred_set is not None:
            perturb = self.device.perturb
            if perturb is None or point not in perturb.set_overtaken_by:
                self.device.flags.flush_deferred(self)   # a held Set completes before the core blocks or syncs
            elif point in ("put", "signal"):
                self.emit(SetOvertaken, fid=self.deferred_set[2], by_point=point)
        faults = self.device.faults
        if faults is not None and faults.fires(FaultHook.CHECKPOINT, self.rank, self.label):
            if faults.fault is Fault.KILL_RANK:
                sys.stdout.flush()
                sys.stderr.write(f"[mc2emu fault injection] rank {self.rank} killed at {self.label} {point}\n")
                sys.stderr.flush()
                os._exit(KILLED_EXIT_CODE)
            abort.wait(DELAY_RANK_S)
        perturb = self.device.perturb
        if perturb is not None:
            delay = perturb.delay(point, self.rank, self.label)
            if delay > 0:
                if self.device.events.active:
                    self.device.events.emit(PerturbDelay, self.label, point=point, delay_s=delay)
                abort.wait(delay)

    def __repr__(self) -> str:
        return f"<CoreContext rank {self.rank} {self.label}>"
