"""Named, seeded fault injection: break one thing on purpose and check that the emulator diagnoses it.

A `FaultPlan` names one fault, the rank and core it hits and which occurrence of its hook point fires;
`FaultPlan.seeded(fault, seed, ranks, cores)` draws those from a seed so a stress run is replayable.
| fault | hook | what breaks | expected diagnosis |
|---|---|---|---|
| DROP_SET_FLAG | CrossCoreSetFlag (kernel ids) | the Set is lost | DEADLOCK (its Wait hangs) |
| EXTRA_SET_FLAG | CrossCoreSetFlag (kernel ids) | the Set is issued twice | UNCONSUMED_FLAG |
| SKIP_WAIT_TILE | QuantMatmulMxKernel WaitTile | a tile is read unwaited | UDMA: UNCONSUMED_FLAG (1) |
| SWAP_WAIT_ORDER | QuantMatmulMxKernel WaitTile | two waits run in the wrong order | HCCL_WAIT_ORDER (tiles 0, 1) |
| WRONG_SPLITK | SetupParams splitKNum | the L0C index sequence breaks | SPLITK_SEQUENCE |
| DELAY_RANK | every checkpoint of one rank | that rank is slow | nothing: results unchanged, no false alarm |
| KILL_RANK | a checkpoint of one rank | the rank process dies | DEADLOCK, the rank listed as not answering |
| NO_ATOMIC_ADD | QuantMatmulMxKernel Init | REMOTE pass of localMatmul 1 overwrites C | LOCAL_WITHOUT_ATOMIC |
| AIV_JOINS_AIC_KERNEL | the hcomm launch | launched MIX_AIC_1_1: AIVs run Run | AIV_RUNS_AIC_KERNEL |
| LATE_PUT_DATA | Shmem.put_signal | the signal lands, the data only at the next barrier_all | READ_NOT_VISIBLE |

(1) plus READ_BEFORE_WAIT when no later wait orders the read; hcomm: DEADLOCK when the working block AIC0
skips under CCU, else HCCL_UNWAITED_COMMIT. The AllGather kernel's hazards (ADDR_LIST_UPDATED_EARLY, the
skipped flag-0 wait) are kernel variants instead (`apace.all_gather_qbmm_mx_kernel.AgKernelVariant`).
"""

from __future__ import annotations

import enum
import threading
import zlib
from dataclasses import dataclass, field

import numpy as np


class Fault(enum.Enum):
    DROP_SET_FLAG = "drop_set_flag"
    EXTRA_SET_FLAG = "extra_set_flag"
    SKIP_WAIT_TILE = "skip_wait_tile"
    SWAP_WAIT_ORDER = "swap_wait_order"
    WRONG_SPLITK = "wrong_splitk"
    DELAY_RANK = "delay_rank"
    KILL_RANK = "kill_rank"
    NO_ATOMIC_ADD = "no_atomic_add"
    AIV_JOINS_AIC_KERNEL = "aiv_joins_aic_kernel"
    LATE_PUT_DATA = "late_put_data"


class FaultHook(enum.Enum):
    """The hook points that consult a `FaultPlan` (the table above)."""

    SET_FLAG = "set_flag"          # CrossCoreSetFlag of kernel ids
    WAIT_TILE = "wait_tile"        # QuantMatmulMxKernel WaitTile
    SETUP_PARAMS = "setup_params"  # the impls' SetupParams (splitKNum)
    CHECKPOINT = "checkpoint"      # every checkpoint of a core
    KERNEL_INIT = "kernel_init"    # QuantMatmulMxKernel Init (SetAtomicAdd)
    LAUNCH = "launch"              # the host's launch of the hcomm kernel
    PUT_SIGNAL = "put_signal"      # Shmem.put_signal (the transport's ordering of data and signal)


# The hook point each fault fires at.
HOOK_OF = {
    Fault.DROP_SET_FLAG: FaultHook.SET_FLAG,
    Fault.EXTRA_SET_FLAG: FaultHook.SET_FLAG,
    Fault.SKIP_WAIT_TILE: FaultHook.WAIT_TILE,
    Fault.SWAP_WAIT_ORDER: FaultHook.WAIT_TILE,
    Fault.WRONG_SPLITK: FaultHook.SETUP_PARAMS,
    Fault.DELAY_RANK: FaultHook.CHECKPOINT,
    Fault.KILL_RANK: FaultHook.CHECKPOINT,
    Fault.NO_ATOMIC_ADD: FaultHook.KERNEL_INIT,
    Fault.AIV_JOINS_AIC_KERNEL: FaultHook.LAUNCH,
    Fault.LATE_PUT_DATA: FaultHook.PUT_SIGNAL,
}
# DELAY_RANK: how long the slow rank stalls at each of its checkpoints.
DELAY_RANK_S = 0.02
# KILL_RANK: exit status of the killed rank process (SIGKILL-like).
KILLED_EXIT_CODE = 137


@dataclass
class FaultPlan:
    fault: Fault
    rank: int
    core: str | None = None   # None: any core of the rank
    nth: int = 0              # which occurrence (per core) of the hook point fires
    fired: list[str] = field(default_factory=list)
    _counts: dict[str, int] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def seeded(cls, fault: Fault | str, seed: int, ranks: int, core: str | None = None,
               max_nth: int = 2) -> FaultPlan:
        fault = Fault(fault) if not isinstance(fault, Fault) else fault
        rng = np.random.default_rng([seed, zlib.crc32(fault.value.encode())])
        return cls(fault, int(rng.integers(0, ranks)), core, int(rng.integers(0, max_nth + 1)))

    def fires(self, hook: FaultHook, rank: int, core: str) -> bool:
        """True when this call of `hook` on (rank, core) is the one to break. Thread-safe; fires once."""
        if HOOK_OF[self.fault] is not hook or rank != self.rank:
            return False
        if self.fault in (Fault.DELAY_RANK, Fault.NO_ATOMIC_ADD, Fault.AIV_JOINS_AIC_KERNEL):
            if not self.fired:
                with self._lock:
                    if not self.fired:
                        self.fired.append(core)   # fires on every occurrence; `fired` names the first
            return True
        if self.core is not None and core != self.core:
            return False
        with self._lock:
            if self.fired:
                return False
            n = self._counts.get(core, 0)
            self._counts[core] = n + 1
            if n != self.nth:
                return False
            self.fired.append(core)
            return True
