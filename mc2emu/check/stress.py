"""Fault-injection stress of all_to_all_quant_matmul: one seeded scenario per MPI job, judged against the
diagnosis its fault must produce (`mc2emu.runtime.faults`).

- Pure helpers: `Scenario` (what one job runs), `expected_diagnosis` / `can_run` (what it must end in, and
  whether that is known), `fault_plan` (the seeded plan every rank builds alike), `judge` (one job's rank
  results -> an `Outcome`) and `Tally` (outcomes -> the summary and the exit status).
- The worker, `mpiexec -n R python -m mc2emu.check.stress --injection F --seed S ...`: every rank runs the
  operator once with the injection (after an unperturbed reference run with `--reference`) and prints its
  result line at once; rank 0 then gathers the lines within `GATHER_S` and prints them as one line; every
  rank prints an exit line and exits with its own status (0 clean, the exception's exit code otherwise,
  137 for the rank KILL_RANK shoots, which prints its line before dying).
- `launch/stress.py` draws the scenarios, runs the jobs under a hard timeout and prints the tally.

Rank result line (`{"mc2emu_stress": "rank", ...}`; times are epoch seconds, the ranks share the clock):

| key | meaning |
|---|---|
| status | ok, hazard, deadlock, constraint, error, killed |
| names | hazard names of the HazardError, ["DEADLOCK"] for a DeadlockError |
| events | error hazards filed during the call (HAZARD events; kept when a deadlock follows) |
| fired, t_fault | this rank's fault plan fired, and when |
| t_start, t_end | the injected call began; its verdict was known on this rank (t_exit: the rank exited) |
| sha, ref_sha | hash of C's bytes (a HazardError's `.output`), and of the unperturbed reference run's C |
| ulp | bf16 ULP distance of a clean C to the CANN golden (`--golden`) |
| unresponsive | ranks a deadlock report lists as not answering |
| exit_code | the status the rank exits with |
"""

from __future__ import annotations

import argparse
import enum
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from mc2emu.ops.all_to_all_quant_matmul import HcclServerModel, Impl
from mc2emu.runtime.faults import KILLED_EXIT_CODE, Fault, FaultPlan
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


class Injection(enum.Enum):
    """What a scenario injects: one named fault, seeded perturbation only, or nothing (a source hazard)."""

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

    @property
    def fault(self) -> Fault | None:
        return next((f for f in Fault if f.value == self.value), None)


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
    hccl_server: HcclServerModel = HcclServerModel.CCU
    ori_m: int = 96
    ka: int = 128
    n: int = 64
    head_tile_size: int = 32
    block_dim: int = 4
    seed: int = 1
    timeout: float = DEFAULT_TIMEOUT_S
    reference: bool = False   # run unperturbed first; the injected run must match it bitwise
    golden: bool = False      # a clean C must be within 1 bf16 ULP of the CANN golden

    @property
    def total_tiles(self) -> int:
        return -(-self.ori_m // self.head_tile_size)

    @property
    def hcomm_lm2(self) -> bool:
        """hcomm with localMatmul 2: the source's own Wait-beyond-Commit (SPEC §6), run uninjected."""
        return self.impl is Impl.HCOMM and self.local_matmul == 2

    def label(self) -> str:
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
               str(self.block_dim), "--seed", str(self.seed), "--timeout", str(self.timeout)]
        return out + (["--reference"] if self.reference else []) + (["--golden"] if self.golden else [])


def is_valid_config(impl: Impl, local_matmul: int, wait_order: WaitOrder,
                    hccl_server: HcclServerModel = HcclServerModel.CCU, block_dim: int = 1) -> bool:
    """The configurations that compute C correctly whatever the timing: udma x lm{0,1,2} x {mask,
    in_order}; hcomm x lm{0,1} x in_order, under AICPU with one AIC only. (hcomm lm 2 is the source's Wait
    beyond Commit; under AICPU block 0 may Finalize while other AICs still Wait and whether they then hang
    depends on timing; hcomm mask reads repeat handles before their data: SPEC §6.)"""
    if impl is Impl.UDMA:
        return local_matmul in (0, 1, 2)
    return (local_matmul in (0, 1) and wait_order is WaitOrder.IN_ORDER
            and (hccl_server is HcclServerModel.CCU or block_dim == 1))


def expected_diagnosis(s: Scenario) -> str | None:
    """The diagnosis `s` must end in (a hazard name or DEADLOCK); None for a run that must stay clean."""
    if s.hcomm_lm2:
        return DEADLOCK if s.hccl_server is HcclServerModel.CCU else "HCCL_WAIT_BEYOND_COMMIT"
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
        return DEADLOCK if s.hccl_server is HcclServerModel.CCU else "HCCL_UNWAITED_COMMIT"
    if inj is Injection.SWAP_WAIT_ORDER:
        return "READ_BEFORE_WAIT"
    if inj is Injection.WRONG_SPLITK:
        return "SPLITK_SEQUENCE"
    if inj is Injection.NO_ATOMIC_ADD:
        return "LOCAL_WITHOUT_ATOMIC"
    if inj is Injection.AIV_JOINS_AIC_KERNEL:
        return "AIV_RUNS_AIC_KERNEL"
    return None


def can_run(s: Scenario) -> list[str]:
    """Reasons `s` has no timing-independent expectation (empty: it is a sound stress scenario)."""
    out = []
    inj = s.injection
    if s.hcomm_lm2:
        if inj is not Injection.NONE or s.wait_order is not WaitOrder.IN_ORDER:
            out.append("hcomm local_matmul 2 (the source's own hazard) runs uninjected and in_order only")
        if s.hccl_server is HcclServerModel.AICPU and s.block_dim != 1:
            out.append("hcomm AICPU with several AICs: block 0's Finalize race may add a hang (timing)")
    elif not is_valid_config(s.impl, s.local_matmul, s.wait_order, s.hccl_server, s.block_dim):
        out.append(f"{s.impl.value} lm{s.local_matmul} {s.wait_order.value} {s.hccl_server.value} block_dim "
                   f"{s.block_dim} is not a timing-independent configuration")
    if inj is Injection.NONE and not s.hcomm_lm2:
        out.append("injection none: only for hcomm local_matmul 2")
    if inj in (Injection.DROP_SET_FLAG, Injection.EXTRA_SET_FLAG) and s.impl is not Impl.UDMA:
        out.append(f"{inj.value}: only the UDMA kernel uses cross-core flags")
    if (inj is Injection.SKIP_WAIT_TILE and s.impl is Impl.HCOMM and s.hccl_server is HcclServerModel.CCU
            and s.block_dim < 2):
        out.append("skip_wait_tile on hcomm/CCU hangs the other AICs: block_dim >= 2")
    if inj is Injection.SWAP_WAIT_ORDER and s.impl is not Impl.HCOMM:
        out.append("swap_wait_order: READ_BEFORE_WAIT is the expectation for HCCL handles only")
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
    if fault is Fault.WRONG_SPLITK:   # SetupParams once per pass: two passes when a LOCAL pass comes first
        return 2 if s.local_matmul == 1 or (s.impl is Impl.HCOMM and s.local_matmul != 0) else 1
    if fault in (Fault.DROP_SET_FLAG, Fault.EXTRA_SET_FLAG, Fault.SKIP_WAIT_TILE):
        return s.total_tiles         # one Set per round per AIV; every AIC waits every tile once
    if fault is Fault.SWAP_WAIT_ORDER:
        return s.total_tiles - 1     # the last tile has no successor to swap with
    return MAX_NTH + 1               # checkpoints: many per core; the others fire at every occurrence


def pinned_core(s: Scenario) -> str | None:
    """The core the fault must hit for its expectation to hold (None: any core of the rank). A wrong
    splitKNum or a swapped wait changes nothing on a core without output tiles (on hardware either), and
    small shapes leave the last AICs idle; the hcomm skip must hit the working block (expected_diagnosis)."""
    fault = s.injection.fault
    if fault in (Fault.WRONG_SPLITK, Fault.SWAP_WAIT_ORDER) or (
            fault is Fault.SKIP_WAIT_TILE and s.impl is Impl.HCOMM):
        return WORKING_BLOCK
    return None


def fault_plan(s: Scenario, plan_cls: type[FaultPlan] = FaultPlan) -> FaultPlan | None:
    """The seeded plan of `s`, the same on every rank (FaultPlan.seeded with the scenario's core and
    occurrence range)."""
    fault = s.injection.fault
    if fault is None:
        return None
    max_nth = max(0, min(MAX_NTH, hook_occurrences(s) - 1))
    base = FaultPlan.seeded(fault, s.seed, s.ranks, core=pinned_core(s), max_nth=max_nth)
    return plan_cls(base.fault, base.rank, base.core, base.nth)


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
    if expected is not None and (fired or s.injection is Injection.NONE):
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


# -- the worker (one rank) -------------------------------------------------------------------------------------
def _emit(rec: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
    sys.stdout.flush()


class TimedFaultPlan(FaultPlan):
    """A FaultPlan that notes when it fired. KILL_RANK: the dying rank prints its line and tells the other
    ranks' gathers (over `notify`, the worker's own communicator) not to wait for it."""

    t_fault: float | None = None
    notify: Any = None

    def fires(self, hook: str, rank: int, core: str) -> bool:
        hit = super().fires(hook, rank, core)
        if hit and self.t_fault is None:
            self.t_fault = time.time()
            if self.fault is Fault.KILL_RANK:
                _emit({LINE_KEY: "rank", "rank": rank, "status": "killed", "names": [], "fired": True,
                       "t_fault": self.t_fault, "t_start": self.t_fault, "t_end": self.t_fault,
                       "t_exit": self.t_fault, "exit_code": KILLED_EXIT_CODE, "core": core})
                if self.notify is not None:
                    comm = self.notify
                    _settle([comm.isend(rank, dest=q, tag=TAG_DEAD) for q in range(comm.Get_size()) if q != rank])
        return hit


def _settle(reqs: list[Any], timeout: float = SETTLE_S) -> None:
    """Let small sends complete (mpi4py keeps the pickled buffer with the request: it must outlive the
    send), without ever blocking on a peer that is gone."""
    deadline = time.monotonic() + timeout
    while reqs and time.monotonic() < deadline:
        reqs = [r for r in reqs if not r.test()[0]]
        if reqs:
            time.sleep(GATHER_POLL_S)


_UNRESPONSIVE = re.compile(r"rank (\d+): no answer")


def output_hash(c: Any) -> str | None:
    if c is None:
        return None
    import numpy as np

    return hashlib.sha256(np.ascontiguousarray(c).tobytes()).hexdigest()[:16]


def _golden_ulp(s: Scenario, rank: int, c: Any, data_seed: int) -> int:
    from mc2emu.numerics import bf16_ulp_distance
    from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs, golden_a2a

    inps = [gen_st_inputs(q, s.ranks, s.ori_m, s.ka, s.n, seed=data_seed) for q in range(s.ranks)]
    ref = golden_a2a([i["x1"] for i in inps], [i["x1_scale"] for i in inps], inps[rank]["x2"],
                     inps[rank]["x2_scale"], rank, "e4m3")
    return int(bf16_ulp_distance(c, ref))


def _call(rec: dict[str, Any], fn: Any) -> Any:
    """Run one operator call, filing its verdict in `rec`; C (or the HazardError's output) or None."""
    from mc2emu.runtime import ConstraintError, DeadlockError, HazardError

    try:
        c = fn()
        rec.update(status="ok", exit_code=0)
        return c
    except HazardError as exc:
        rec.update(status="hazard", names=sorted(exc.names()), exit_code=exc.exit_code, message=str(exc)[:2000])
        return exc.output
    except DeadlockError as exc:
        text = exc.report or str(exc)
        rec.update(status="deadlock", names=[DEADLOCK], exit_code=exc.exit_code, message=text[:4000],
                   declared_elsewhere=exc.declared_elsewhere,
                   unresponsive=sorted({int(m) for m in _UNRESPONSIVE.findall(text)}))
    except ConstraintError as exc:
        rec.update(status="constraint", exit_code=exc.exit_code, message=str(exc))
    except Exception as exc:   # the worker always reports: any other failure is a finding
        rec.update(status="error", exit_code=1, message=f"{type(exc).__name__}: {exc}"[:2000])
    return None


def run_rank(s: Scenario, comm: Any, data_seed: int, notify: Any = None) -> dict[str, Any]:
    """Run the scenario on this rank (collective over `comm`); the rank's result record."""
    from mc2emu.ops.all_to_all_quant_matmul import all_to_all_quant_matmul
    from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
    from mc2emu.runtime import EventKind, PerturbPolicy, Severity

    rank = comm.Get_rank()
    inp = gen_st_inputs(rank, s.ranks, s.ori_m, s.ka, s.n, seed=data_seed)
    args = (inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"])
    kw = dict(impl=s.impl, local_matmul=s.local_matmul, wait_order=s.wait_order, hccl_server=s.hccl_server,
              block_dim=s.block_dim, head_tile_size=s.head_tile_size, timeout=s.timeout, comm=comm)
    rec: dict[str, Any] = {LINE_KEY: "rank", "rank": rank, "size": s.ranks, "names": [], "fired": False,
                           "t_fault": None}
    if s.reference:
        ref = _call(rec, lambda: all_to_all_quant_matmul(*args, **kw))
        if rec["status"] != "ok":   # the unperturbed run itself failed: that is the finding
            rec.update(phase="reference", t_start=time.time(), t_end=time.time(), sha=None)
            return rec
        rec["ref_sha"] = output_hash(ref)
    plan = fault_plan(s, TimedFaultPlan)
    if plan is not None:
        plan.notify = notify
    perturb = PerturbPolicy(s.seed) if s.injection is Injection.PERTURB else None
    filed: set[str] = set()   # error hazards as they are filed: a later deadlock drops the HazardError list

    def on_event(e: Any) -> None:
        if e.kind is EventKind.HAZARD and e.value == Severity.ERROR.value:
            filed.add(e.obj)

    rec["t_start"] = time.time()
    c = _call(rec, lambda: all_to_all_quant_matmul(*args, **kw, faults=plan, perturb=perturb,
                                                   observers=(on_event,)))
    rec["t_end"] = time.time()
    if plan is not None and plan.t_fault is not None:
        rec.update(fired=True, t_fault=plan.t_fault)
    rec["events"] = sorted(filed)
    rec["sha"] = output_hash(c)
    if s.golden and rec["status"] == "ok":
        rec["ulp"] = _golden_ulp(s, rank, c, data_seed)
    return rec


def gather_results(comm: Any, rec: dict[str, Any], timeout: float = GATHER_S) -> dict[str, Any] | None:
    """Bounded gather to rank 0 over point-to-point messages on the worker's own communicator. Rank 0
    prints and returns the gathered record; the others wait for its ack, so that no rank exits (which may
    make a launcher end the job) before rank 0 printed. Nobody waits past `timeout`, nor for a rank that a
    deadlock report found not answering or that announced its death (KILL_RANK)."""
    from mpi4py import MPI

    rank, size = comm.Get_rank(), comm.Get_size()
    deadline = time.monotonic() + timeout
    dead = set(rec.get("unresponsive", []))
    obit = comm.irecv(source=MPI.ANY_SOURCE, tag=TAG_DEAD)

    def check_obit() -> None:
        done, who = obit.test()
        if done and isinstance(who, int):
            dead.add(who)

    if rank != 0:
        sent = comm.isend(rec, dest=0, tag=TAG_RESULT)
        ack = comm.irecv(source=0, tag=TAG_ACK)
        while time.monotonic() < deadline and 0 not in dead and not ack.test()[0]:
            check_obit()
            time.sleep(GATHER_POLL_S)
        _settle([sent])
        return None
    reqs = {q: comm.irecv(source=q, tag=TAG_RESULT) for q in range(1, size)}
    results: dict[str, Any] = {"0": rec}
    while set(reqs) - dead and time.monotonic() < deadline:
        for q in list(reqs):
            done, val = reqs[q].test()
            if done:
                results[str(q)] = val
                dead.update(val.get("unresponsive", []))
                del reqs[q]
        check_obit()
        if reqs:
            time.sleep(GATHER_POLL_S)
    gathered = {LINE_KEY: "gathered", "results": results, "missing": sorted(reqs)}
    _emit(gathered)
    _settle([comm.isend(True, dest=q, tag=TAG_ACK) for q in range(1, size) if str(q) in results])
    return gathered


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mc2emu.check.stress",
                                description="One fault-injection stress job of all_to_all_quant_matmul; run "
                                            "it under mpiexec. Prints one JSON result line per rank.")
    p.add_argument("--injection", "--fault", dest="injection", default=Injection.PERTURB.value,
                   choices=[i.value for i in Injection])
    p.add_argument("--impl", default="udma", choices=[m.value for m in Impl])
    p.add_argument("--local-matmul", type=int, default=0, choices=[0, 1, 2])
    p.add_argument("--wait-order", default="mask", choices=[m.value for m in WaitOrder])
    p.add_argument("--hccl-server", default="ccu", choices=[m.value for m in HcclServerModel])
    p.add_argument("--ori-m", type=int, default=96)
    p.add_argument("--ka", type=int, default=128)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--head-tile-size", type=int, default=32)
    p.add_argument("--block-dim", type=int, default=4)
    p.add_argument("--seed", type=int, default=1, help="fault plan / perturbation seed")
    p.add_argument("--data-seed", type=int, default=42, help="input generator seed (CANN ST: 42)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="emulator wait deadline, s")
    p.add_argument("--reference", action="store_true", help="run unperturbed first; compare C bitwise")
    p.add_argument("--golden", action="store_true", help="compare a clean C with the CANN golden")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    s = Scenario(Injection(a.injection), world.Get_size(), Impl(a.impl), a.local_matmul, WaitOrder(a.wait_order),
                 HcclServerModel(a.hccl_server), a.ori_m, a.ka, a.n, a.head_tile_size, a.block_dim, a.seed,
                 a.timeout, a.reference, a.golden)
    gather_comm = world.Dup()   # the operator's own messages never match the gather's
    try:
        rec = run_rank(s, world, a.data_seed, notify=gather_comm)
    except Exception as exc:   # a worker bug: report it like any result; never end in MPI_Finalize
        now = time.time()
        rec = {LINE_KEY: "rank", "rank": world.Get_rank(), "size": s.ranks, "status": "error", "names": [],
               "exit_code": 1, "t_start": now, "t_end": now, "message": f"{type(exc).__name__}: {exc}"[:2000]}
    _emit(rec)
    try:
        gather_results(gather_comm, rec)
    except Exception as exc:   # the gather is a convenience: every rank's own line is out already
        sys.stderr.write(f"[mc2emu stress] rank {rec['rank']}: gather failed: {type(exc).__name__}: {exc}\n")
    _emit({LINE_KEY: "exit", "rank": rec["rank"], "t_exit": time.time()})
    sys.stderr.flush()
    # After a deadlock the emulator's windows stay locked and peers may be gone: MPI_Finalize could block.
    os._exit(int(rec["exit_code"]))


if __name__ == "__main__":
    sys.exit(main())
