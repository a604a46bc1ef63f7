"""Cross-core flags: `CrossCoreSetFlag<mode, pipe>(id)` / `CrossCoreWaitFlag<mode, pipe>(id)`.

Emulates asc-devkit 核间同步 as implemented for DAV_3510 (SPEC §2). One counter per (core, id) holds `c`,
the completed rounds pending on the waiting core (0 <= c <= 15): a completed round does c += 1 and wakes the
core's waits (c == 15: FlagOverflowError, a hardware error); a Wait does c -= 1, or blocks until a round
completes (deadline). State tables and the rules enforced: docs/protocols.md "Cross-core flags".

When a round completes, per mode:
- mode 0: every AIC (or every AIV) of the launch has Set the id once more -> each of them gets c += 1;
- mode 1: every AIV of one group (MIX 1:2) has Set -> each AIV of the group gets c += 1;
- mode 2: AIV -> AIC: every AIV of the group has Set -> the group's AIC gets c += 1;
          AIC -> AIV: one AIC Set -> each AIV of its group gets c += 1;
- mode 4 (MIX 1:2): its own counters: AIC id i (0-31) raises AIV (i // 16)'s id i % 16; AIV sub s id i
  (0-15) raises the AIC's id i + 16 s.
Modes 0-2 share the 16 counters of a core; ids >= 16 are truncated to 4 bits (FLAG_ID_TRUNCATED, a warning). A Set or
Wait on a pipe the core lacks compiles to nothing on DAV_3510 (PIPE_NOT_ON_CORE); so does any cross-core
sync under AIC_ONLY / AIV_ONLY or a mode the kernel type lacks (SYNC_KERNEL_TYPE). Consuming an id in a new
mode while it holds counts or partial rounds of another mode is undefined (FLAG_MODE_MIXED).
"""

from __future__ import annotations

import collections
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mc2emu.arch.platform import CoreType, FlagMode, Pipe
from mc2emu.runtime.events import FaultFired, FlagConsume, FlagRaise, FlagSet, SetOvertaken
from mc2emu.runtime.faults import Fault, FaultHook
from mc2emu.runtime.hazards import FlagOverflowError, Hazard, KernelError, Severity
from mc2emu.runtime.kernel_type import KernelType
from mc2emu.runtime.launch import CoreKey

if TYPE_CHECKING:
    from mc2emu.runtime.core_view import CoreView, DeviceView

# How many operations of one counter a FLAG_OVERFLOW report shows.
HISTORY_DEPTH = 24
VALID_MODES = tuple(m.value for m in FlagMode)
_FLAG_MODES = {m.value: m for m in FlagMode}

def core_label(key: CoreKey) -> str:
    return key


def flag_mode(mode: int | FlagMode, pipe: Pipe, op: str) -> FlagMode:
    """The flag API's boundary: the kernel's `mode` literal as a `FlagMode` (a KernelError when the
    compiler would reject it)."""
    m = _FLAG_MODES.get(mode)
    if m is None:
        raise KernelError(f"{op}<{mode}, {pipe.name}>: mode must be one of {VALID_MODES}")
    return m


@dataclass
class Counter:
    value: int = 0
    tokens: collections.deque[int] = field(default_factory=collections.deque)
    # (monotonic time, core, mode, +1/-1, value after)
    history: collections.deque[tuple] = field(default_factory=lambda: collections.deque(maxlen=HISTORY_DEPTH))


class CrossCoreFlags:
    """Flag state of one device. Persists across launches (SPEC §2 assumption), guarded by the device
    lock; each core sleeps on its own condition of that lock."""

    def __init__(self, device: DeviceView) -> None:
        self.device = device
        self.lock: threading.Lock = device.lock
        self.counters: dict[tuple[CoreKey, int, bool], Counter] = {}
        # partial rounds: (kind, domain, id) -> {setter core: ids of its Sets not yet in a completed round}
        self.pending: dict[tuple, dict[CoreKey, collections.deque[int]]] = {}
        self._set_id = 0
        self.id_mode: dict[tuple[CoreKey, int], int] = {}
        self.kernel_ids_used: set[int] = set()
        self._token = 0

    # -- helpers ---------------------------------------------------------------------------------------
    def counter(self, key: CoreKey, fid: int, mode4: bool = False) -> Counter:
        k = (key, fid, mode4)
        c = self.counters.get(k)
        if c is None:
            c = self.counters[k] = Counter()
        return c

    def _raise(self, ctx: CoreView, target: CoreKey, fid: int, mode4: bool, mode: FlagMode,
               sources: tuple[tuple[str, int], ...] = ()) -> None:
        """A round completed: raise `target`'s counter (device lock held). `sources` are the (core, Set id)
        of the Sets that made the round; the consuming Wait's event carries the same token."""
        c = self.counter(target, fid, mode4)
        if not mode4 and target != ctx.key:
            self._check_mode(ctx, fid, mode, target)
        limit = self.device.platform.flag_counter_max
        self._token += 1
        c.history.append((time.monotonic(), ctx.label, mode, +1, c.value + 1))
        if c.value >= limit:
            hist = "\n    ".join(f"{t:.6f} {'+' if d > 0 else '-'}1 by {who} (mode {m}) -> {v}"
                                  for t, who, m, d, v in c.history)
            raise FlagOverflowError(
                f"rank {self.device.rank}: Set from {ctx.label} would make counter "
                f"{target} id {fid}{' (mode 4)' if mode4 else ''} hold {c.value + 1} pending "
                f"rounds; the hardware counter holds at most {limit} (a 16th pending Set is a hardware "
                f"error). History:\n    {hist}")
        c.value += 1
        c.tokens.append(self._token)
        self.device.core_bell(target).ring()
        if self.device.events.active:
            self.device.events.emit(FlagRaise, ctx.label, target=target, fid=fid, count=c.value, mode=int(mode),
                                    mode4=mode4, token=self._token, sources=sources or ((ctx.label, self._set_id),))

    def _check_mode(self, ctx: CoreView, fid: int, mode: FlagMode, core: CoreKey | None = None) -> None:
        """Modes 0-2 share a core's counters: using id `fid` of `core` (default: the caller) in `mode` while
        it holds counts or partial rounds of another mode is undefined."""
        if mode is FlagMode.MIX_1_2:
            return
        core = ctx.key if core is None else core
        key = (core, fid)
        last = self.id_mode.get(key)
        if last == mode:
            return
        if last is not None and self._outstanding(core, fid):
            self.device.hazards.report(
                Hazard.FLAG_MODE_MIXED, ctx.label,
                f"flag id {fid} of {core} used in mode {mode} while mode-{last} Sets/Waits on it have not "
                f"drained (undefined on hardware)", flag=fid, mode=int(mode), previous_mode=int(last))
        self.id_mode[key] = mode

    def _outstanding(self, key: CoreKey, fid: int) -> bool:
        c = self.counters.get((key, fid, False))
        if c is not None and c.value > 0:
            return True
        return any(dom[-1] == fid and cnt.get(key) for dom, cnt in self.pending.items())

    def _validate(self, ctx: CoreView, mode: FlagMode, pipe: Pipe, fid: int, op: str) -> int | None:
        """Compile-time and DAV_3510 rules. Returns the effective id, or None when the call is a no-op.
        Results are cached per launch; each distinct misuse is reported once per core."""
        cache = ctx.launch.validated
        ck = (ctx.key, mode, pipe, fid, op)
        if ck in cache:
            return cache[ck]
        eff = self._validate_uncached(ctx, mode, pipe, fid, op)
        cache[ck] = eff
        return eff

    def _validate_uncached(self, ctx: CoreView, mode: FlagMode, pipe: Pipe, fid: int, op: str) -> int | None:
        if pipe is Pipe.PIPE_ALL or (mode is not FlagMode.MIX_1_2 and pipe is Pipe.PIPE_S):
            raise KernelError(f"{op}<{mode}, {pipe.name}>: mode {mode} does not accept {pipe.name} "
                              f"(rejected at compile time)")
        hz = self.device.hazards
        plat = self.device.platform
        kt = ctx.launch.kernel_type
        if pipe not in plat.pipes_of(ctx.core_type):
            hz.report(Hazard.PIPE_NOT_ON_CORE, ctx.label,
                      f"{op}<{mode}, {pipe.name}>({fid}) on an {ctx.core_type.value}: {pipe.name} does not "
                      f"exist on this core, the call compiles to nothing on {plat.name} (a partner Wait hangs)",
                      flag=fid, mode=int(mode), pipe=pipe.name)
            return None
        if kt in (KernelType.AIC_ONLY, KernelType.AIV_ONLY) or not kt.supports_mode(mode):
            hz.report(Hazard.SYNC_KERNEL_TYPE, ctx.label,
                      f"{op}<{mode}, {pipe.name}>({fid}) under {kt.value}: this kernel type has no "
                      f"mode-{mode} cross-core sync (Set dropped, Wait hangs)", flag=fid, mode=int(mode))
            return None if op == "CrossCoreSetFlag" else fid
        if mode is FlagMode.MIX_1_2:
            limit = plat.mode4_aic_id_count if ctx.core_type is CoreType.AIC else plat.mode4_aiv_id_count
            if not 0 <= fid < limit:
                raise KernelError(f"{op}<4>: id {fid} outside 0..{limit - 1} on {ctx.core_type.value}")
            return fid
        if mode is FlagMode.AIVS_OF_GROUP and ctx.core_type is CoreType.AIC:
            raise KernelError(f"{op}<1>: mode 1 synchronizes the AIVs of a group; called on {ctx.label}")
        if fid >= plat.flag_id_count or fid < 0:
            eff = fid & (plat.flag_id_count - 1)
            # a warning: the hardware runs it; what the aliasing breaks is reported by its own checks (an
            # early read READ_BEFORE_WAIT, a lost round DEADLOCK / UNCONSUMED_FLAG, FLAG_OVERFLOW)
            hz.report(Hazard.FLAG_ID_TRUNCATED, ctx.label,
                      f"{op}<{mode}>({fid}): ids are 4 bits, the hardware uses id {eff}", flag=fid,
                      effective=eff, severity=Severity.WARNING)
            return eff
        return fid

    # -- the API ---------------------------------------------------------------------------------------
    def set_flag(self, ctx: CoreView, mode: int | FlagMode, pipe: Pipe, fid: int, *,
                 internal: bool = False) -> None:
        fmode = flag_mode(mode, pipe, "CrossCoreSetFlag")
        fid_eff = self._validate(ctx, fmode, pipe, fid, "CrossCoreSetFlag")
        if fid_eff is None:
            return
        if not internal and fmode is not FlagMode.MIX_1_2:
            self.kernel_ids_used.add(fid_eff)
        repeat = 1
        faults = self.device.faults
        if not internal and faults is not None and faults.fires(FaultHook.SET_FLAG, ctx.rank, ctx.label):
            ctx.emit(FaultFired, fault=faults.fault, at=fid_eff)
            if faults.fault is Fault.DROP_SET_FLAG:
                return
            repeat = 2
        perturb = self.device.perturb
        for _ in range(repeat):
            if perturb is not None and perturb.reorder_sets:
                self._set_reordered(ctx, perturb, (fmode, pipe, fid_eff))
            else:
                self._set(ctx, fmode, pipe, fid_eff)
        self.device.waiter.progress.bump()

    def _set_reordered(self, ctx: CoreView, perturb: Any, op: tuple[FlagMode, Pipe, int]) -> None:
        """Consecutive Sets of one core may complete out of order (the hardware does not order them): hold
        one Set back and let the seeded policy decide whether the next one overtakes it. The held Set
        completes at the latest when the core next waits, synchronizes or ends (`flush_deferred`)."""
        held = ctx.deferred_set
        if held is None:
            ctx.deferred_set = op
            return
        ctx.deferred_set = None
        first, second = (op, held) if perturb.swap(ctx.rank, ctx.label) else (held, op)
        if first is op:
            ctx.emit(SetOvertaken, fid=held[2], by_fid=op[2])
        self._set(ctx, *first)
        self._set(ctx, *second)

    def flush_deferred(self, ctx: CoreView) -> None:
        held = ctx.deferred_set
        if held is not None:
            ctx.deferred_set = None
            self._set(ctx, *held)
            self.device.waiter.progress.bump()

    def _set(self, ctx: CoreView, mode: FlagMode, pipe: Pipe, fid_eff: int) -> None:
        launch = ctx.launch
        with self.lock:
            self._check_mode(ctx, fid_eff, mode)
            self._set_id += 1
            if self.device.events.active:
                self.device.events.emit(FlagSet, ctx.label, fid=fid_eff, mode=int(mode), pipe=pipe.name,
                                        set_id=self._set_id)
            if mode is FlagMode.AIC_AIV_OF_GROUP:
                if ctx.core_type is CoreType.AIV:
                    aivs = launch.groups[ctx.group]
                    if len(aivs) == 1:
                        self._raise(ctx, launch.aics[ctx.group], fid_eff, False, mode)
                    else:
                        self._partial(ctx, ("m2", ctx.group, fid_eff), aivs, mode, fid_eff,
                                      targets=[launch.aics[ctx.group]])
                else:
                    for aiv in launch.groups[ctx.group]:
                        self._raise(ctx, aiv, fid_eff, False, mode)
            elif mode is FlagMode.ALL_CORES_OF_TYPE:
                domain = launch.aics if ctx.core_type is CoreType.AIC else launch.aivs
                self._partial(ctx, ("m0", ctx.core_type.value, fid_eff), domain, mode, fid_eff,
                              targets=domain)
            elif mode is FlagMode.AIVS_OF_GROUP:
                group = launch.groups[ctx.group]
                self._partial(ctx, ("m1", ctx.group, fid_eff), group, mode, fid_eff, targets=group)
            elif ctx.core_type is CoreType.AIC:  # mode 4
                self._raise(ctx, launch.aivs[ctx.group * 2 + fid_eff // 16], fid_eff % 16, True, mode)
            else:
                self._raise(ctx, launch.aics[ctx.group], fid_eff + 16 * ctx.sub_block, True, mode)

    def _partial(self, ctx: CoreView, dom: tuple, members: list[CoreKey], mode: FlagMode, fid: int, *,
                 targets: list[CoreKey]) -> None:
        cnt = self.pending.get(dom)
        if cnt is None:
            cnt = self.pending[dom] = {}
        mine = cnt.get(ctx.key)
        if mine is None:
            mine = cnt[ctx.key] = collections.deque()
        mine.append(self._set_id)
        if len(cnt) == len(members):  # every member holds at least one Set: a round completes
            sources = []
            for m in members:
                ids = cnt[m]
                sources.append((m, ids.popleft()))
                if not ids:
                    del cnt[m]
            # One tuple for every target of the round: the happens-before check joins a round's sources once
            # per distinct tuple (a SyncAll of n cores is n acquisitions of the same n Sets).
            round_sources = tuple(sources)
            for t in targets:
                self._raise(ctx, t, fid, False, mode, round_sources)

    def wait_flag(self, ctx: CoreView, mode: int | FlagMode, pipe: Pipe, fid: int, *,
                  internal: bool = False) -> None:
        self.flush_deferred(ctx)
        mode = flag_mode(mode, pipe, "CrossCoreWaitFlag")
        fid_eff = self._validate(ctx, mode, pipe, fid, "CrossCoreWaitFlag")
        if fid_eff is None:
            return
        if not internal and mode is not FlagMode.MIX_1_2:
            self.kernel_ids_used.add(fid_eff)
        mode4 = mode is FlagMode.MIX_1_2
        with self.lock:
            self._check_mode(ctx, fid_eff, mode)
            c = self.counter(ctx.key, fid_eff, mode4)
            ready = c.value > 0
        if not ready:
            ctx.checkpoint("wait")
            self.device.waiter.wait_until(
                self.device.core_bell(ctx.key), lambda: c.value > 0, core=ctx.label,
                obj=f"CrossCoreWaitFlag<{mode}, {pipe.name}>({fid_eff}){' mode4' if mode4 else ''}",
                expected="counter > 0", setter=self._setters(ctx, mode, fid_eff), current=lambda: c.value,
                waits_for=self._setter_keys(ctx, mode, fid_eff))
        with self.lock:
            c.value -= 1
            token = c.tokens.popleft() if c.tokens else None
            c.history.append((time.monotonic(), ctx.label, mode, -1, c.value))
        if self.device.events.active:
            self.device.events.emit(FlagConsume, ctx.label, fid=fid_eff, count=c.value, mode=int(mode), token=token)

    def _setter_keys(self, ctx: CoreView, mode: FlagMode, fid: int) -> tuple[tuple[int | None, str], ...]:
        launch = ctx.launch
        if mode is FlagMode.ALL_CORES_OF_TYPE:
            keys = launch.aics if ctx.core_type is CoreType.AIC else launch.aivs
        elif mode is FlagMode.AIVS_OF_GROUP:
            keys = launch.groups[ctx.group]
        elif mode is FlagMode.AIC_AIV_OF_GROUP:
            keys = launch.groups[ctx.group] if ctx.core_type is CoreType.AIC else launch.aics[ctx.group:ctx.group + 1]
        elif ctx.core_type is CoreType.AIV:
            keys = launch.aics[ctx.group:ctx.group + 1]
        else:
            keys = [launch.aivs[ctx.group * 2 + fid // 16]]
        return tuple((None, k) for k in keys if k != ctx.key)

    def _setters(self, ctx: CoreView, mode: FlagMode, fid: int) -> str:
        launch = ctx.launch
        if mode is FlagMode.ALL_CORES_OF_TYPE:
            return f"all {ctx.core_type.value}s of the launch (mode 0 id {fid})"
        if mode is FlagMode.AIVS_OF_GROUP:
            return ", ".join(launch.groups[ctx.group])
        if mode is FlagMode.AIC_AIV_OF_GROUP:
            if ctx.core_type is CoreType.AIC:
                return ", ".join(launch.groups[ctx.group]) + " (all of them)"
            return launch.aics[ctx.group] if launch.aics else "no AIC in this launch"
        if ctx.core_type is CoreType.AIV:
            return launch.aics[ctx.group]
        return launch.aivs[ctx.group * 2 + fid // 16]

    # -- pairing ---------------------------------------------------------------------------------------
    def leftovers(self) -> list[tuple[str, str]]:
        """(core, description) of every count or partial round left in the state."""
        out = []
        with self.lock:
            for (key, fid, mode4), c in sorted(self.counters.items()):
                if c.value:
                    out.append((core_label(key), f"flag id {fid}{' (mode 4)' if mode4 else ''} holds "
                                                 f"{c.value} unconsumed round(s)"))
            for dom, cnt in self.pending.items():
                for key, ids in cnt.items():
                    n = len(ids)
                    if n:
                        out.append((core_label(key), f"{n} Set(s) of {dom[0]} id {dom[-1]} waiting for "
                                                     f"the rest of their round"))
        return out

    def report_leftovers(self) -> None:
        for core, what in self.leftovers():
            self.device.hazards.report(Hazard.UNCONSUMED_FLAG, core,
                                       f"{what} at launch end: Sets and Waits do not pair (a skipped drain?)")

    def report_reserved_ids(self, used_sync_all: bool) -> None:
        reserved = sorted(self.kernel_ids_used & set(self.device.platform.reserved_flag_ids))
        if used_sync_all and reserved:
            self.device.hazards.report(
                Hazard.FLAG_ID_RESERVED, "launch",
                f"kernel flag ids {reserved} overlap the ids hard SyncAll uses (11-14)",
                severity=Severity.WARNING, ids=reserved)
        self.kernel_ids_used.clear()

    def reset(self) -> None:
        with self.lock:
            self.counters.clear()
            self.pending.clear()
            self.id_mode.clear()
