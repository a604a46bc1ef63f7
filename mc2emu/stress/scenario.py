"""The scenarios of the fault-injection stress: what one job runs, the diagnosis it must end in, whether it
can run, and the seeded fault plan (pure: no MPI). Judging a job's rank results and the tally are
`mc2emu.stress.judge`; the worker that runs one scenario on every rank is `mc2emu.stress.worker`; the driver
is `launch/stress.py`.

Two operators (`StressOp`): all_to_all_quant_matmul (the default) and all_gather_quant_matmul. An AG scenario
reads `ori_m` as the rows of x1 per rank (the ST tile rule then gives tileM = min(512, m), tileCnt rounds
and maybe a tail), `ka` as K, `wait_order` as the kernel's; it ignores impl, localMatmul, the HCCL server
and head_tile_size (the AG kernel is UDMA only). Its injections: the cross-core flag faults (every AIV Sets
flags 0..commTurn, every AIC waits each once), skip_wait_tile (the AIC skips one of those waits), kill_rank,
delay_rank and seeded perturbation, plus the kernel's reproduced hazards as source variants
(`AgKernelVariant`: skip_flag0_wait, update_addr_before_wait; and skip_release_wait, which runs the slot ring
(`protocol="slot_ring"`, one slot, in-order waits) with the AIV reusing a slot without the AICs' release:
READ_OVERWRITTEN; it needs two rounds or more)."""


from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TypeVar

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.ops.all_to_all_quant_matmul_op import Impl
from mc2emu.runtime.faults import Fault, FaultPlan
from mc2emu.tiling.all_gather_quant_matmul_tiling import (
    ag_constraint_violations,
    ag_unserved_peers,
    make_ag_comm_tiling,
)

# Marker key of the worker's JSON lines (any other output of the ranks is ignored).
LINE_KEY = "mc2emu_stress"
# How long rank 0 collects the other ranks' results (and they wait for its ack) before exiting anyway:
# covers the spread of verdicts after a deadlock (the requester collects 3 s, every rank lingers 3 s).
GATHER_S = 10.0
GATHER_POLL_S = 0.01
# How long a rank lets its small control messages complete before it moves on (or exits).
SETTLE_S = 0.5
TAG_RESULT, TAG_ACK, TAG_DEAD = 7201, 7202, 7203
# Default emulator wait deadline of a stress job: short, so that a hang is diagnosed in seconds.
DEFAULT_TIMEOUT_S = 2.0
DEADLOCK = "DEADLOCK"
# Hook occurrences FaultPlan.seeded draws from (0..MAX_NTH), capped by what the scenario runs.
MAX_NTH = 2
# The AIC that sends HCCL messages (hcomm) and always has an output tile.
WORKING_BLOCK = "AIC0"


class StressOp(enum.Enum):
    """The operator a scenario runs."""

    A2A = "all_to_all_quant_matmul"
    AG = "all_gather_quant_matmul"


class Injection(enum.Enum):
    """What a scenario injects: one named fault, seeded perturbation only, nothing (a source hazard), or an
    AllGather kernel variant that reproduces a hazard (`AgKernelVariant`)."""

    DROP_SET_FLAG = "drop_set_flag"
    EXTRA_SET_FLAG = "extra_set_flag"
    SKIP_WAIT_TILE = "skip_wait_tile"
    SWAP_WAIT_ORDER = "swap_wait_order"
    WRONG_SPLITK = "wrong_splitk"
    DELAY_RANK = "delay_rank"
    KILL_RANK = "kill_rank"
    NO_ATOMIC_ADD = "no_atomic_add"
    AIV_JOINS_AIC_KERNEL = "aiv_joins_aic_kernel"
    PERTURB = "perturb"
    NONE = "none"
    SKIP_FLAG0_WAIT = "skip_flag0_wait"                   # AG kernel variant
    UPDATE_ADDR_BEFORE_WAIT = "update_addr_before_wait"   # AG kernel variant
    SKIP_RELEASE_WAIT = "skip_release_wait"               # AG kernel variant of the slot ring (one slot)

    @property
    def fault(self) -> Fault | None:
        return next((f for f in Fault if f.value == self.value), None)

    @property
    def ag_variant(self) -> str | None:
        """The `AgKernelVariant` value this injection runs (None: the source kernel)."""
        return self.value if self in AG_VARIANTS else None


# The AllGather kernel variants (source hazards reproduced by the kernel, `AgKernelVariant`) and what each
# must end in: the AIV's pre-set flag 0 never consumed; MAIN addresses moved before their round's wait.
AG_VARIANTS = {Injection.SKIP_FLAG0_WAIT: "UNCONSUMED_FLAG",
               Injection.UPDATE_ADDR_BEFORE_WAIT: "ADDR_LIST_UPDATED_EARLY",
               Injection.SKIP_RELEASE_WAIT: "READ_OVERWRITTEN"}
# The AllGather injections that run the slot ring (protocol "slot_ring", this many slots, in-order waits).
AG_SLOT_RING = {Injection.SKIP_RELEASE_WAIT: 1}
# The injections an AllGather scenario may carry.
AG_INJECTIONS = frozenset({Injection.DROP_SET_FLAG, Injection.EXTRA_SET_FLAG, Injection.SKIP_WAIT_TILE,
                           Injection.KILL_RANK, Injection.DELAY_RANK, Injection.PERTURB, *AG_VARIANTS})


@dataclass(frozen=True)
class Scenario:
    """One stress job: configuration, shape and injection, all replayable from these fields."""

    injection: Injection
    ranks: int
    impl: Impl = Impl.UDMA
    local_matmul: int = 0
    wait_order: WaitOrder = WaitOrder.MASK
    hccl_server: HcclServerType = HcclServerType.CCU
    ori_m: int = 96
    ka: int = 128
    n: int = 64
    head_tile_size: int = 32
    block_dim: int = 4
    seed: int = 1
    timeout: float = DEFAULT_TIMEOUT_S
    reference: bool = False   # run unperturbed first; the injected run must match it bitwise
    golden: bool = False      # a clean C must be within 1 bf16 ULP of the CANN golden
    op: StressOp = StressOp.A2A

    @property
    def total_tiles(self) -> int:
        return CeilDiv(self.ori_m, self.head_tile_size)

    @property
    def ag_comm_turn(self) -> int:
        """AllGather: the communication rounds of the ST tile rule (tileCnt + tailCnt)."""
        return make_ag_comm_tiling(self.ori_m, self.ka).commTurn

    @property
    def hcomm_lm2(self) -> bool:
        """hcomm with localMatmul 2: the source's own Wait-beyond-Commit (SPEC §6), run uninjected."""
        return self.impl is Impl.HCOMM and self.local_matmul == 2

    def label(self) -> str:
        if self.op is StressOp.AG:
            return (f"{'ag ' + self.injection.value:<23} R={self.ranks} {self.wait_order.value:<26} m{self.ori_m} "
                    f"k{self.ka} n{self.n} b{self.block_dim} seed {self.seed}")
        cfg = f"{self.impl.value}/lm{self.local_matmul}/{self.wait_order.value}"
        if self.impl is Impl.HCOMM:
            cfg += f"/{self.hccl_server.value}"
        what = "hcomm_lm2" if self.injection is Injection.NONE else self.injection.value
        return (f"{what:<20} R={self.ranks} {cfg:<26} m{self.ori_m} k{self.ka} n{self.n} "
                f"h{self.head_tile_size} b{self.block_dim} seed {self.seed}")

    def argv(self) -> list[str]:
        """The worker's argv tail (after `python`)."""
        out = ["-m", "mc2emu.stress.worker", "--injection", self.injection.value, "--impl", self.impl.value,
               "--local-matmul", str(self.local_matmul), "--wait-order", self.wait_order.value,
               "--hccl-server", self.hccl_server.value, "--ori-m", str(self.ori_m), "--ka", str(self.ka),
               "--n", str(self.n), "--head-tile-size", str(self.head_tile_size), "--block-dim",
               str(self.block_dim), "--seed", str(self.seed), "--timeout", str(self.timeout),
               "--op", self.op.value]
        return out + (["--reference"] if self.reference else []) + (["--golden"] if self.golden else [])


def is_valid_config(impl: Impl, local_matmul: int, wait_order: WaitOrder,
                    hccl_server: HcclServerType = HcclServerType.CCU, block_dim: int = 1) -> bool:
    """The configurations that compute C correctly whatever the timing: udma x lm{0,1,2} x {mask,
    in_order}; hcomm x lm{0,1} x in_order, under AICPU with one AIC only. (hcomm lm 2 is the source's Wait
    beyond Commit; under AICPU block 0 may Finalize while other AICs still Wait and whether they then hang
    depends on timing; hcomm mask reads repeat handles before their data: SPEC §6.)"""
    if impl is Impl.UDMA:
        return local_matmul in (0, 1, 2)
    return (local_matmul in (0, 1) and wait_order is WaitOrder.IN_ORDER
            and (hccl_server is HcclServerType.CCU or block_dim == 1))


def expected_diagnosis(s: Scenario) -> str | None:
    """The diagnosis `s` must end in (a hazard name or DEADLOCK); None for a run that must stay clean."""
    if s.op is StressOp.AG:
        return _ag_expected(s)
    if s.hcomm_lm2:
        return DEADLOCK if s.hccl_server is HcclServerType.CCU else "HCCL_WAIT_BEYOND_COMMIT"
    inj = s.injection
    if inj in (Injection.DROP_SET_FLAG, Injection.KILL_RANK):
        return DEADLOCK
    if inj is Injection.EXTRA_SET_FLAG:
        return "UNCONSUMED_FLAG"
    if inj is Injection.SKIP_WAIT_TILE:
        if s.impl is Impl.UDMA:
            return "UNCONSUMED_FLAG"
        # hcomm, the working block skips (pinned_core): CCU lets the other AICs complete a Wait only after
        # block 0 completed more, so they hang; AICPU releases them by the finish counters: unwaited commit
        return DEADLOCK if s.hccl_server is HcclServerType.CCU else "HCCL_UNWAITED_COMMIT"
    if inj is Injection.SWAP_WAIT_ORDER:
        # Tiles 0 and 1 swapped (hook_occurrences pins it): the head (or tail) handle is waited before the
        # scale handle, out of Prepare order. Swapping two repeats of one handle changes nothing: a Wait
        # proves the next repeat whatever tile asks, and every read still follows both Waits.
        return "HCCL_WAIT_ORDER"
    if inj is Injection.WRONG_SPLITK:
        return "SPLITK_SEQUENCE"
    if inj is Injection.NO_ATOMIC_ADD:
        return "LOCAL_WITHOUT_ATOMIC"
    if inj is Injection.AIV_JOINS_AIC_KERNEL:
        return "AIV_RUNS_AIC_KERNEL"
    return None


def _ag_expected(s: Scenario) -> str | None:
    inj = s.injection
    if inj in AG_VARIANTS:
        return AG_VARIANTS[inj]
    if inj in (Injection.DROP_SET_FLAG, Injection.KILL_RANK):
        return DEADLOCK               # the AIC's wait on the lost round (or on the dead rank's puts) hangs
    if inj in (Injection.EXTRA_SET_FLAG, Injection.SKIP_WAIT_TILE):
        return "UNCONSUMED_FLAG"      # one round more than the waits consume (plus READ_BEFORE_WAIT maybe)
    return None


def _ag_can_run(s: Scenario) -> list[str]:
    out = []
    if s.injection not in AG_INJECTIONS:
        out.append(f"{s.injection.value}: not an all_gather_quant_matmul injection")
    out += [f"ag {rule}: {reason}" for rule, reason in ag_constraint_violations(s.ori_m, s.ka, s.n, s.ranks)]
    if s.block_dim is not None and ag_unserved_peers(s.ranks, s.block_dim):
        out.append(f"ag PEER_NOT_SERVED: block_dim {s.block_dim} < R {s.ranks} (peers never served: the launch's "
                   f"own hazard)")
    slots = AG_SLOT_RING.get(s.injection)
    if slots is not None and s.ag_comm_turn <= slots:
        out.append(f"{s.injection.value}: {s.ag_comm_turn} round(s) in {slots} slot(s) never reuse a slot")
    return out


def can_run(s: Scenario) -> list[str]:
    """Reasons `s` has no timing-independent expectation (empty: it is a sound stress scenario)."""
    if s.op is StressOp.AG:
        return _ag_can_run(s)
    out = []
    inj = s.injection
    if s.hcomm_lm2:
        if inj is not Injection.NONE or s.wait_order is not WaitOrder.IN_ORDER:
            out.append("hcomm local_matmul 2 (the source's own hazard) runs uninjected and in_order only")
        if s.hccl_server is HcclServerType.AICPU and s.block_dim != 1:
            out.append("hcomm AICPU with several AICs: block 0's Finalize race may add a hang (timing)")
    elif not is_valid_config(s.impl, s.local_matmul, s.wait_order, s.hccl_server, s.block_dim):
        out.append(f"{s.impl.value} lm{s.local_matmul} {s.wait_order.value} {s.hccl_server.value} block_dim "
                   f"{s.block_dim} is not a timing-independent configuration")
    if inj is Injection.NONE and not s.hcomm_lm2:
        out.append("injection none: only for hcomm local_matmul 2")
    if inj in (Injection.DROP_SET_FLAG, Injection.EXTRA_SET_FLAG) and s.impl is not Impl.UDMA:
        out.append(f"{inj.value}: only the UDMA kernel uses cross-core flags")
    if (inj is Injection.SKIP_WAIT_TILE and s.impl is Impl.HCOMM and s.hccl_server is HcclServerType.CCU
            and s.block_dim < 2):
        out.append("skip_wait_tile on hcomm/CCU hangs the other AICs: block_dim >= 2")
    if inj is Injection.SWAP_WAIT_ORDER and s.impl is not Impl.HCOMM:
        out.append("swap_wait_order: HCCL_WAIT_ORDER is the expectation for HCCL handles only")
    if inj is Injection.NO_ATOMIC_ADD and s.local_matmul != 1:
        out.append("no_atomic_add: only localMatmul 1 adds the REMOTE pass atomically")
    if inj is Injection.AIV_JOINS_AIC_KERNEL and s.impl is not Impl.HCOMM:
        out.append("aiv_joins_aic_kernel: only the hcomm kernel is AIC-only")
    if s.impl is Impl.UDMA and s.block_dim < s.ranks:
        out.append(f"udma block_dim {s.block_dim} < {s.ranks} ranks (A2A-5)")
    if inj.fault is not None and hook_occurrences(s) < 1:
        out.append(f"{inj.value}: its hook point never runs in this shape")
    return out


def hook_occurrences(s: Scenario) -> int:
    """How often (at least) the fault's hook point runs on the core it may hit, so that the seeded
    occurrence is drawn among those that happen."""
    fault = s.injection.fault
    if s.op is StressOp.AG and fault in (Fault.DROP_SET_FLAG, Fault.EXTRA_SET_FLAG, Fault.SKIP_WAIT_TILE):
        return s.ag_comm_turn + 1    # every AIV Sets flags 0..commTurn, every AIC waits each once
    if fault is Fault.WRONG_SPLITK:   # SetupParams once per pass: two passes when a LOCAL pass comes first
        return 2 if s.local_matmul == 1 or (s.impl is Impl.HCOMM and s.local_matmul != 0) else 1
    if fault in (Fault.DROP_SET_FLAG, Fault.EXTRA_SET_FLAG, Fault.SKIP_WAIT_TILE):
        return s.total_tiles         # one Set per round per AIV; every AIC waits every tile once
    if fault is Fault.SWAP_WAIT_ORDER:
        return min(1, s.total_tiles - 1)   # tile 0 with tile 1: the one swap that breaks the wait order
    return MAX_NTH + 1               # checkpoints: many per core; the others fire at every occurrence


def pinned_core(s: Scenario) -> str | None:
    """The core the fault must hit for its expectation to hold (None: any core of the rank). A wrong
    splitKNum or a swapped wait changes nothing on a core without output tiles (on hardware either), and
    small shapes leave the last AICs idle; the hcomm skip must hit the working block (expected_diagnosis)."""
    fault = s.injection.fault
    if s.op is StressOp.AG:
        return None
    if fault in (Fault.WRONG_SPLITK, Fault.SWAP_WAIT_ORDER) or (
            fault is Fault.SKIP_WAIT_TILE and s.impl is Impl.HCOMM):
        return WORKING_BLOCK
    return None


def fault_plan(s: Scenario, plan_cls: type[PlanT] = FaultPlan) -> PlanT | None:  # type: ignore[assignment]
    """The seeded plan of `s`, the same on every rank (FaultPlan.seeded with the scenario's core and
    occurrence range)."""
    fault = s.injection.fault
    if fault is None:
        return None
    max_nth = max(0, min(MAX_NTH, hook_occurrences(s) - 1))
    base = FaultPlan.seeded(fault, s.seed, s.ranks, core=pinned_core(s), max_nth=max_nth)
    return plan_cls(base.fault, base.rank, base.core, base.nth)


PlanT = TypeVar("PlanT", bound=FaultPlan)
