"""The model of the fault-injection stress: scenarios, the diagnosis each must end in, judging a job's rank
results, and the tally (pure: no MPI). The worker that runs one scenario on every rank is
`mc2emu.check.stress`; the driver is `launch/stress.py`.

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
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.ops.all_to_all_quant_matmul_op import Impl
from mc2emu.runtime.faults import Fault, FaultPlan
from mc2emu.tiling.all_gather_quant_matmul_tiling import ag_constraint_violations, make_ag_comm_tiling
from mc2emu.tiling.all_to_all_quant_matmul_tiling import WaitOrder

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


class Verdict(enum.Enum):
    DETECTED = "DETECTED"          # the fault fired and the expected diagnosis came
    MISSED = "MISSED"              # the fault fired, the expected diagnosis did not come
    NOT_FIRED = "NOT_FIRED"        # the hook point never reached the planned occurrence: it ran clean
    CLEAN = "CLEAN"                # clean run: no diagnosis, C bitwise equal to the reference
    FALSE_ALARM = "FALSE_ALARM"    # clean run (or unfired fault) with a diagnosis
    MISMATCH = "MISMATCH"          # clean run whose C differs from the reference or the golden
    HANG = "HANG"                  # the job outlived its hard timeout
    BROKEN = "BROKEN"              # a rank gave no result (and was not the killed one), or a worker error


FAILING = frozenset({Verdict.MISSED, Verdict.FALSE_ALARM, Verdict.MISMATCH, Verdict.HANG, Verdict.BROKEN})


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
        out = ["-m", "mc2emu.check.stress", "--injection", self.injection.value, "--impl", self.impl.value,
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
    violations = ag_constraint_violations(s.ori_m, s.ka, s.n, s.ranks, make_ag_comm_tiling(s.ori_m, s.ka),
                                          s.block_dim)
    out += [f"ag {rule}: {reason}" for rule, reason in violations]
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


# -- judging ------------------------------------------------------------------------------------------------
@dataclass
class JobRun:
    """What the host saw of one job."""

    results: dict[int, dict[str, Any]]   # rank -> its result line
    returncode: int | None               # None: the job hung and was killed
    wall_s: float
    stderr_tail: str = ""


@dataclass
class Outcome:
    scenario: Scenario
    verdict: Verdict
    expected: str | None
    seen: list[str]
    latency_s: float | None = None    # fault (else call start) to the first rank holding the diagnosis
    overrun_s: float | None = None    # last rank's exit after the deadline (fault + emulator timeout)
    wall_s: float = 0.0
    note: str = ""

    def line(self) -> str:
        lat = f" latency {self.latency_s:5.2f}s" if self.latency_s is not None else ""
        seen = ",".join(self.seen) or "-"
        return (f"{self.verdict.value:<11} {self.scenario.label()}  expect {self.expected or 'clean'} "
                f"seen {seen}{lat} wall {self.wall_s:4.1f}s" + (f"  ({self.note})" if self.note else ""))


def _names(rec: dict[str, Any]) -> set[str]:
    """What one rank diagnosed: its exception's names and every error hazard filed during the call."""
    return set(rec.get("names", [])) | set(rec.get("events", []))


def _seen(results: dict[int, dict[str, Any]]) -> list[str]:
    names: set[str] = set()
    for r in results.values():
        names |= _names(r)
        if r.get("status") in ("constraint", "error"):
            names.add(r["status"].upper())
    return sorted(names)


def judge(s: Scenario, run: JobRun) -> Outcome:
    """One job's verdict from its rank results (pure: the tests feed it synthetic results)."""
    expected = expected_diagnosis(s)
    res = run.results
    out = Outcome(s, Verdict.BROKEN, expected, _seen(res), wall_s=run.wall_s)
    if run.returncode is None:
        out.verdict, out.note = Verdict.HANG, f"killed after {run.wall_s:.0f} s"
        return out
    killed = sorted(r for r, v in res.items() if v.get("status") == "killed")
    fired = bool(killed) or any(v.get("fired") for v in res.values())
    t_fault = min((v["t_fault"] for v in res.values() if v.get("t_fault") is not None), default=None)
    t0 = t_fault if t_fault is not None else min((v["t_start"] for v in res.values() if "t_start" in v),
                                                  default=0.0)
    survivors = [v for r, v in res.items() if r not in killed]
    exits = [v.get("t_exit", v.get("t_end", t0)) for v in survivors]
    if exits:
        out.overrun_s = max(exits) - (t0 + s.timeout)
    missing = [r for r in range(s.ranks) if r not in res]
    if missing:
        out.note = f"no result from rank(s) {missing}"
        return out
    errors = [f"rank {r}: {v.get('message', '')[:160]}" for r, v in res.items() if v.get("status") == "error"]
    if errors:
        out.note = "; ".join(errors)
        return out
    if expected is not None and (fired or s.injection is Injection.NONE or s.injection in AG_VARIANTS):
        if expected == DEADLOCK and killed:   # the report must name the killed rank as not answering
            hits = [v["t_end"] for v in survivors if set(killed) & set(v.get("unresponsive", []))]
        else:
            hits = [v["t_end"] for v in survivors if expected in _names(v)]
        if hits:
            out.verdict, out.latency_s = Verdict.DETECTED, min(hits) - t0
        else:
            out.verdict, out.note = Verdict.MISSED, "no rank reported it"
        return out
    # a clean run, or a fault that never fired: nothing may be reported and C must hold
    if out.seen:
        out.verdict = Verdict.FALSE_ALARM
        return out
    bad = [r for r, v in sorted(res.items()) if v.get("ref_sha") is not None and v["ref_sha"] != v.get("sha")]
    far = [r for r, v in sorted(res.items()) if v.get("ulp") is not None and v["ulp"] > 1]
    if bad or far:
        out.verdict = Verdict.MISMATCH
        out.note = "; ".join(([f"not bitwise equal to the reference on ranks {bad}"] if bad else [])
                             + ([f"> 1 ULP from the golden on ranks {far}"] if far else []))
        return out
    out.verdict = Verdict.NOT_FIRED if expected is not None else Verdict.CLEAN
    return out


@dataclass
class Tally:
    """Many outcomes: the stress summary and whether the run passed."""

    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.outcomes.append(o)

    def count(self, *verdicts: Verdict) -> int:
        return sum(o.verdict in verdicts for o in self.outcomes)

    def by_expected(self) -> dict[str, tuple[int, int]]:
        """expected diagnosis -> (injected, detected), over the outcomes whose fault fired and whose job
        ended."""
        rows: dict[str, list[int]] = {}
        for o in self.outcomes:
            if o.verdict in (Verdict.DETECTED, Verdict.MISSED):
                row = rows.setdefault(o.expected or "", [0, 0])
                row[0] += 1
                row[1] += o.verdict is Verdict.DETECTED
        return {k: (v[0], v[1]) for k, v in sorted(rows.items())}

    @property
    def injected(self) -> int:
        return self.count(Verdict.DETECTED, Verdict.MISSED)

    @property
    def clean_runs(self) -> int:
        return self.count(Verdict.CLEAN, Verdict.FALSE_ALARM, Verdict.MISMATCH)

    @property
    def worst_latency_s(self) -> float | None:
        return max((o.latency_s for o in self.outcomes if o.latency_s is not None), default=None)

    @property
    def worst_overrun_s(self) -> float | None:
        return max((o.overrun_s for o in self.outcomes if o.overrun_s is not None and o.expected == DEADLOCK),
                   default=None)

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and not any(o.verdict in FAILING for o in self.outcomes)

    def summary(self) -> str:
        per = ", ".join(f"{k} {d}/{i}" for k, (i, d) in self.by_expected().items()) or "-"
        lat, over = self.worst_latency_s, self.worst_overrun_s
        return "\n".join([
            f"iterations          {len(self.outcomes)}",
            f"hazards injected    {self.injected}   detected {self.count(Verdict.DETECTED)}   "
            f"missed {self.count(Verdict.MISSED)}   (detected/injected: {per})",
            f"faults not fired    {self.count(Verdict.NOT_FIRED)}",
            f"clean runs          {self.clean_runs}   false alarms {self.count(Verdict.FALSE_ALARM)}   "
            f"output mismatches {self.count(Verdict.MISMATCH)}",
            f"hangs               {self.count(Verdict.HANG)}   broken jobs {self.count(Verdict.BROKEN)}",
            "worst latency       " + (f"{lat:.2f} s (fault to the first rank's diagnosis)" if lat is not None
                                      else "-"),
            "worst deadlock stop " + (f"{over:.2f} s (last rank's exit after fault + deadline)"
                                      if over is not None else "-"),
            f"result              {'PASS' if self.ok else 'FAIL'}",
        ])


def failures(outcomes: Iterable[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.verdict in FAILING]


def parse_lines(text: str) -> tuple[dict[int, dict[str, Any]], dict[str, Any] | None]:
    """The rank results in a job's stdout: each rank's own line (plus `t_exit` from its exit line), filled
    in from rank 0's gathered line where a rank's own line is missing; and the gathered line itself."""
    ranks: dict[int, dict[str, Any]] = {}
    exits: dict[int, float] = {}
    gathered = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{") or LINE_KEY not in line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        kind = rec.get(LINE_KEY)
        if kind == "rank":
            ranks[int(rec["rank"])] = rec
        elif kind == "exit":
            exits[int(rec["rank"])] = float(rec["t_exit"])
        elif kind == "gathered":
            gathered = rec
    if gathered is not None:
        for r, rec in gathered.get("results", {}).items():
            ranks.setdefault(int(r), rec)
    for r, t in exits.items():
        if r in ranks:
            ranks[r]["t_exit"] = t
    return ranks, gathered


