"""Fault-injection stress of all_to_all_quant_matmul: one scenario per MPI job, judged against the diagnosis
the fault must produce (`mc2emu.runtime.faults`).

Three layers, each usable alone:
- pure helpers: `Scenario` (what one job runs), `expected_diagnosis`, `judge` (one job's rank results ->
  an `Outcome`) and `Tally` (outcomes -> the summary and the exit status);
- the worker, `python -m mc2emu.check.stress ...` under mpiexec: every rank runs the operator once with
  the seeded fault (optionally after an unperturbed reference run) and prints one JSON line; then rank 0
  gathers the lines within `GATHER_S` and prints one more, and every rank exits with its own status
  (0 clean, the exception's exit code otherwise, 137 for the rank KILL_RANK shoots);
- `run_job`: the host side of one job, with a hard timeout after which the job is killed (only the
  processes it started, by pid) and counted as a hang.

Rank result line (`{"mc2emu_stress": "rank", ...}`):

| key | meaning |
|---|---|
| status | ok, hazard, deadlock, constraint, error, killed |
| names | hazard names (HazardError), ["DEADLOCK"] for a deadlock |
| fired / t_fault | this rank's fault plan fired, and when (epoch seconds; ranks share the clock) |
| t_start / t_end | the faulted call began / this rank's verdict was known |
| sha | sha256 of C's bytes (HazardError: of the output it carries); ref_sha: of the reference run |
| ulp | bf16 ULP distance to the CANN golden (clean runs with --golden) |
| unresponsive | ranks a deadlock report lists as not answering |
| exit_code | the status the rank exits with |
"""

from __future__ import annotations

import argparse
import contextlib
import enum
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from mc2emu.runtime.faults import KILLED_EXIT_CODE, Fault, FaultPlan

# Marker key of the worker's JSON lines (other output of the ranks is ignored).
LINE_KEY = "mc2emu_stress"
# How long rank 0 collects the other ranks' results (and they wait for its ack) before exiting anyway.
# Covers the spread of verdicts after a deadlock: the requester collects 3 s, every rank lingers 3 s.
GATHER_S = 10.0
GATHER_POLL_S = 0.01
TAG_RESULT, TAG_ACK = 7201, 7202
# Extra environment of every rank (the BLAS thread pins come from `mpiexec_command`).
RANK_ENV_EXTRA = {"UCX_LOG_LEVEL": "error", "PYTHONUNBUFFERED": "1"}
# Default emulator wait deadline of a stress job: short, so a hang is diagnosed in seconds.
DEFAULT_TIMEOUT_S = 2.0
# Worst spread allowed between the deadline and the end of every rank (the tests' acceptance rule).
END_SLACK_S = 10.0
# Hydra (MPICH) flag: keep the other ranks running when one exits non-zero (KILL_RANK's survivors report).
HYDRA_NO_CLEANUP = "-disable-auto-cleanup"
# SIGTERM first, SIGKILL after this grace when a hung job has to be ended.
KILL_GRACE_S = 2.0


class Injection(enum.Enum):
    """What a scenario injects: one named fault, seeded perturbation only, or nothing (a source hazard)."""

    DROP_SET_FLAG = "drop_set_flag"
    EXTRA_SET_FLAG = "extra_set_flag"
    SKIP_WAIT_TILE = "skip_wait_tile"
    SWAP_WAIT_ORDER = "swap_wait_order"
    WRONG_SPLITK = "wrong_splitk"
    DELAY_RANK = "delay_rank"
    KILL_RANK = "kill_rank"
    PERTURB = "perturb"
    NONE = "none"

    @property
    def fault(self) -> Fault | None:
        try:
            return Fault(self.value)
        except ValueError:
            return None


class Verdict(enum.Enum):
    DETECTED = "DETECTED"          # the fault fired and the expected diagnosis came
    MISSED = "MISSED"              # the fault fired, the expected diagnosis did not come
    NOT_FIRED = "NOT_FIRED"        # the fault's hook point never reached its occurrence: a clean run
    CLEAN = "CLEAN"                # clean run, no hazard, outputs as required
    FALSE_ALARM = "FALSE_ALARM"    # clean run with a diagnosis
    MISMATCH = "MISMATCH"          # clean run, outputs not bitwise identical to the reference / golden
    HANG = "HANG"                  # the job outlived its hard timeout
    BROKEN = "BROKEN"              # a rank gave no result and was not the killed one, or a worker error


FAILING = frozenset({Verdict.MISSED, Verdict.FALSE_ALARM, Verdict.MISMATCH, Verdict.HANG, Verdict.BROKEN})
DEADLOCK = "DEADLOCK"


@dataclass(frozen=True)
class Scenario:
    """One stress job: configuration, shape and the injection (seeded: replayable)."""

    injection: Injection
    ranks: int
    impl: str = "udma"
    local_matmul: int = 0
    wait_order: str = "mask"
    hccl_server: str = "ccu"
    ori_m: int = 96
    ka: int = 128
    n: int = 64
    head_tile_size: int = 32
    block_dim: int = 4
    seed: int = 1
    timeout: float = DEFAULT_TIMEOUT_S
    reference: bool = False   # run unperturbed first; the faulted run must match it bitwise
    golden: bool = False      # compare a clean C with the CANN golden (<= 1 bf16 ULP)

    @property
    def total_tiles(self) -> int:
        return -(-self.ori_m // self.head_tile_size)

    def label(self) -> str:
        cfg = f"{self.impl}/lm{self.local_matmul}/{self.wait_order}"
        if self.impl == "hcomm":
            cfg += f"/{self.hccl_server}"
        return (f"{self.injection.value:<15} R={self.ranks} {cfg:<26} m{self.ori_m} k{self.ka} n{self.n} "
                f"h{self.head_tile_size} b{self.block_dim} seed {self.seed}")

    def argv(self) -> list[str]:
        """The worker's argv tail (after `python`)."""
        out = ["-m", "mc2emu.check.stress", "--injection", self.injection.value, "--impl", self.impl,
               "--local-matmul", str(self.local_matmul), "--wait-order", self.wait_order,
               "--hccl-server", self.hccl_server, "--ori-m", str(self.ori_m), "--ka", str(self.ka),
               "--n", str(self.n), "--head-tile-size", str(self.head_tile_size), "--block-dim",
               str(self.block_dim), "--seed", str(self.seed), "--timeout", str(self.timeout)]
        return out + (["--reference"] if self.reference else []) + (["--golden"] if self.golden else [])


def is_valid_config(impl: str, local_matmul: int, wait_order: str) -> bool:
    """The configurations the operator computes correctly: udma x lm{0,1,2} x {mask, in_order};
    hcomm x lm{0,1} x in_order (hcomm lm 2 reproduces a source hang / Wait beyond Commit)."""
    if impl == "udma":
        return local_matmul in (0, 1, 2) and wait_order in ("mask", "in_order")
    return impl == "hcomm" and local_matmul in (0, 1) and wait_order == "in_order"


def expected_diagnosis(s: Scenario) -> str | None:
    """The diagnosis `s` must end in (a hazard name or DEADLOCK), None for a run that must stay clean."""
    if s.impl == "hcomm" and s.local_matmul == 2:
        return DEADLOCK if s.hccl_server == "ccu" else "HCCL_WAIT_BEYOND_COMMIT"
    inj = s.injection
    if inj in (Injection.DROP_SET_FLAG, Injection.KILL_RANK):
        return DEADLOCK
    if inj is Injection.EXTRA_SET_FLAG:
        return "UNCONSUMED_FLAG"
    if inj is Injection.SKIP_WAIT_TILE:
        return "UNCONSUMED_FLAG" if s.impl == "udma" else DEADLOCK
    if inj is Injection.SWAP_WAIT_ORDER:
        return "READ_BEFORE_WAIT"
    if inj is Injection.WRONG_SPLITK:
        return "SPLITK_SEQUENCE"
    return None


def can_run(s: Scenario) -> list[str]:
    """Reasons `s` is not a stress scenario with a known expectation (empty: fine)."""
    out = []
    hcomm_lm2 = s.impl == "hcomm" and s.local_matmul == 2
    if hcomm_lm2:
        if s.injection is not Injection.NONE or s.wait_order != "in_order":
            out.append("hcomm local_matmul 2 runs only uninjected, in_order (it is the source's own hazard)")
    elif not is_valid_config(s.impl, s.local_matmul, s.wait_order):
        out.append(f"{s.impl} lm{s.local_matmul} {s.wait_order} is not a valid configuration")
    inj = s.injection
    if inj in (Injection.DROP_SET_FLAG, Injection.EXTRA_SET_FLAG) and s.impl != "udma":
        out.append(f"{inj.value}: only UDMA uses cross-core flags")
    if inj is Injection.SKIP_WAIT_TILE and s.impl == "hcomm" and s.hccl_server != "ccu":
        out.append("skip_wait_tile on hcomm: only the CCU server model has a known expectation (hang)")
    if inj is Injection.SWAP_WAIT_ORDER and s.impl != "hcomm":
        out.append("swap_wait_order: the expectation (READ_BEFORE_WAIT) holds for HCCL handles only")
    if inj is Injection.NONE and not hcomm_lm2:
        out.append("injection none: only for hcomm local_matmul 2")
    if s.impl == "udma" and s.block_dim < s.ranks:
        out.append(f"udma block_dim {s.block_dim} < {s.ranks} ranks (A2A-5)")
    return out


def hook_occurrences(s: Scenario) -> int:
    """How often (at least) the fault's hook point runs on each core that consults it, so that the seeded
    occurrence `nth` can be drawn in range and the fault fires."""
    fault = s.injection.fault
    if fault is Fault.WRONG_SPLITK:   # SetupParams: once per pass; two passes when a LOCAL pass runs first
        return 2 if (s.local_matmul == 1 or (s.impl == "hcomm" and s.local_matmul != 0)) else 1
    if fault in (Fault.DROP_SET_FLAG, Fault.EXTRA_SET_FLAG, Fault.SKIP_WAIT_TILE, Fault.SWAP_WAIT_ORDER):
        # one Set per round per AIV; each AIC waits every tile once (deps, then the drain)
        n = s.total_tiles
        return n - 1 if fault is Fault.SWAP_WAIT_ORDER else n   # the last tile has no successor to swap with
    return 3


def fault_plan(s: Scenario, plan_cls: type[FaultPlan] = FaultPlan) -> FaultPlan | None:
    """The seeded plan of `s` (the same on every rank), its occurrence drawn among those that happen."""
    fault = s.injection.fault
    if fault is None:
        return None
    max_nth = max(0, min(2, hook_occurrences(s) - 1))
    base = FaultPlan.seeded(fault, s.seed, s.ranks, max_nth=max_nth)
    return plan_cls(base.fault, base.rank, base.core, base.nth)


# -- judging ------------------------------------------------------------------------------------------------
@dataclass
class JobRun:
    """What the host saw of one job."""

    results: dict[int, dict[str, Any]]   # rank -> its result line
    returncode: int | None               # None: hung and killed
    wall_s: float
    stderr_tail: str = ""


@dataclass
class Outcome:
    scenario: Scenario
    verdict: Verdict
    expected: str | None
    seen: list[str]
    latency_s: float | None = None    # fault (or call start) to the first expected diagnosis
    stopped_s: float | None = None    # fault (or call start) to the last rank's verdict
    wall_s: float = 0.0
    note: str = ""

    @property
    def injected(self) -> bool:
        return self.expected is not None and self.verdict not in (Verdict.NOT_FIRED,)

    def line(self) -> str:
        lat = f" latency {self.latency_s:5.2f}s" if self.latency_s is not None else ""
        exp = self.expected or "clean"
        seen = ",".join(self.seen) or "-"
        return (f"{self.verdict.value:<11} {self.scenario.label()}  expect {exp} seen {seen}{lat} "
                f"wall {self.wall_s:4.1f}s" + (f"  ({self.note})" if self.note else ""))


def _seen(results: dict[int, dict[str, Any]]) -> list[str]:
    names: set[str] = set()
    for r in results.values():
        names.update(r.get("names", []))
        if r.get("status") in ("constraint", "error"):
            names.add(r["status"].upper())
    return sorted(names)


def judge(s: Scenario, run: JobRun) -> Outcome:
    """Turn one job's rank results into a verdict (pure: the tests feed it synthetic results)."""
    expected = expected_diagnosis(s)
    res = run.results
    seen = _seen(res)
    out = Outcome(s, Verdict.BROKEN, expected, seen, wall_s=run.wall_s)
    if run.returncode is None:
        out.verdict, out.note = Verdict.HANG, f"killed after {run.wall_s:.0f} s"
        return out
    killed = sorted(r for r, v in res.items() if v.get("status") == "killed")
    fired = bool(killed) or any(v.get("fired") for v in res.values())
    t_fault = min((v["t_fault"] for v in res.values() if v.get("t_fault") is not None), default=None)
    t0 = t_fault if t_fault is not None else min((v.get("t_start", 0.0) for v in res.values()), default=0.0)
    missing = [r for r in range(s.ranks) if r not in res]
    survivors = [v for r, v in res.items() if r not in killed]
    if survivors:
        out.stopped_s = max(v["t_end"] for v in survivors) - t0
    if missing:
        out.note = f"no result from rank(s) {missing}"
        return out
    errors = [f"rank {r}: {v.get('message', '')[:120]}" for r, v in res.items() if v.get("status") == "error"]
    if errors:
        out.note = "; ".join(errors)
        return out
    if expected is not None and (fired or s.injection in (Injection.NONE,)):
        hits = [v["t_end"] for v in survivors if expected in v.get("names", [])]
        if expected == DEADLOCK and killed:
            # the report must name the killed rank as not answering
            hits = [v["t_end"] for v in survivors if set(killed) & set(v.get("unresponsive", []))]
        if hits:
            out.verdict, out.latency_s = Verdict.DETECTED, min(hits) - t0
        else:
            out.verdict, out.note = Verdict.MISSED, "no rank reported it"
        return out
    # a clean run (or a fault that never fired): nothing may be reported, outputs must hold
    if seen:
        out.verdict = Verdict.FALSE_ALARM
        return out
    bad = [r for r, v in res.items() if v.get("ref_sha") is not None and v.get("ref_sha") != v.get("sha")]
    bad_ulp = [r for r, v in res.items() if v.get("ulp") is not None and v["ulp"] > 1]
    if bad or bad_ulp:
        out.verdict = Verdict.MISMATCH
        out.note = (f"not bitwise equal to the reference on ranks {bad} " if bad else "") + (
            f"> 1 ULP from the golden on ranks {bad_ulp}" if bad_ulp else "")
        return out
    out.verdict = Verdict.NOT_FIRED if expected is not None else Verdict.CLEAN
    return out


@dataclass
class Tally:
    """Aggregate of many outcomes: the stress summary and its exit status."""

    outcomes: list[Outcome] = field(default_factory=list)

    def add(self, o: Outcome) -> None:
        self.outcomes.append(o)

    def count(self, *verdicts: Verdict) -> int:
        return sum(o.verdict in verdicts for o in self.outcomes)

    @property
    def injected(self) -> int:
        return sum(o.expected is not None and o.verdict not in (Verdict.NOT_FIRED, Verdict.HANG, Verdict.BROKEN)
                   for o in self.outcomes)

    @property
    def clean_runs(self) -> int:
        return self.count(Verdict.CLEAN, Verdict.FALSE_ALARM, Verdict.MISMATCH)

    @property
    def worst_latency_s(self) -> float | None:
        return max((o.latency_s for o in self.outcomes if o.latency_s is not None), default=None)

    @property
    def ok(self) -> bool:
        return bool(self.outcomes) and not any(o.verdict in FAILING for o in self.outcomes)

    def by_expected(self) -> dict[str, tuple[int, int]]:
        """expected diagnosis -> (injected, detected)."""
        out: dict[str, list[int]] = {}
        for o in self.outcomes:
            if o.expected is None or o.verdict in (Verdict.NOT_FIRED, Verdict.HANG, Verdict.BROKEN):
                continue
            row = out.setdefault(o.expected, [0, 0])
            row[0] += 1
            row[1] += o.verdict is Verdict.DETECTED
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}

    def summary(self) -> str:
        worst = self.worst_latency_s
        per = ", ".join(f"{k} {d}/{i}" for k, (i, d) in self.by_expected().items()) or "-"
        lines = [
            f"iterations          {len(self.outcomes)}",
            f"hazards injected    {self.injected}   detected {self.count(Verdict.DETECTED)}   "
            f"missed {self.count(Verdict.MISSED)}   ({per})",
            f"faults not fired    {self.count(Verdict.NOT_FIRED)} (hook occurrence not reached: ran clean)",
            f"clean runs          {self.clean_runs}   false alarms {self.count(Verdict.FALSE_ALARM)}   "
            f"output mismatches {self.count(Verdict.MISMATCH)}",
            f"hangs               {self.count(Verdict.HANG)}   broken jobs {self.count(Verdict.BROKEN)}",
            "worst latency       " + (f"{worst:.2f} s (fault to diagnosis)" if worst is not None else "-"),
            f"result              {'PASS' if self.ok else 'FAIL'}",
        ]
        return "\n".join(lines)


# -- host side of one job --------------------------------------------------------------------------------------
def parse_lines(text: str) -> tuple[dict[int, dict[str, Any]], dict[str, Any] | None]:
    """The rank result lines (and rank 0's gathered line) in a job's stdout."""
    ranks: dict[int, dict[str, Any]] = {}
    gathered = None
    for line in text.splitlines():
        line = line.strip()
        if not line.startswith("{") or LINE_KEY not in line:
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue
        if rec.get(LINE_KEY) == "rank":
            ranks[int(rec["rank"])] = rec
        elif rec.get(LINE_KEY) == "gathered":
            gathered = rec
    if gathered is not None:
        for r, rec in gathered.get("results", {}).items():
            ranks.setdefault(int(r), rec)
    return ranks, gathered


def _descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (from /proc), deepest last."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        for c in children.get(p, []):
            out.append(c)
            todo.append(c)
    return out


def _end_job(proc: subprocess.Popen) -> None:
    """End a job we started: its process group (mpiexec's own session) and any descendant that left it."""
    pids = [proc.pid, *_descendants(proc.pid)]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, sig)
        for p in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        try:
            proc.wait(timeout=KILL_GRACE_S)
            break
        except subprocess.TimeoutExpired:
            continue


def run_job(s: Scenario, hard_timeout: float) -> JobRun:
    """Run `s` under mpiexec; a job still running after `hard_timeout` seconds is killed (returncode None)."""
    from mc2emu.launcher import mpiexec_command

    cmd, env = mpiexec_command(s.ranks, s.argv())
    env.update(RANK_ENV_EXTRA)
    if "open" not in os.path.realpath(cmd[0]).lower():
        # Hydra ends every rank as soon as one exits non-zero; the survivors of KILL_RANK must live to
        # print their diagnosis. Ending a job that stays up is `run_job`'s hard timeout's business.
        cmd.insert(1, HYDRA_NO_CLEANUP)
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=hard_timeout)
        rc: int | None = proc.returncode
    except subprocess.TimeoutExpired:
        _end_job(proc)
        out, err = proc.communicate()
        rc = None
    finally:
        # hydra may leave a rank behind when another died: make sure nothing we started survives
        for p in _descendants(proc.pid) if proc.poll() is None else []:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, signal.SIGKILL)
    results, _ = parse_lines(out)
    return JobRun(results, rc, time.monotonic() - t0, err[-4000:])


def run_scenario(s: Scenario, hard_timeout: float) -> Outcome:
    return judge(s, run_job(s, hard_timeout))


# -- the worker (one rank) -------------------------------------------------------------------------------------
def _emit(rec: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
    sys.stdout.flush()


class TimedFaultPlan(FaultPlan):
    """A FaultPlan that notes when it fired; KILL_RANK prints the dying rank's line first."""

    t_fault: float | None = None

    def fires(self, hook: str, rank: int, core: str) -> bool:
        hit = super().fires(hook, rank, core)
        if hit and self.t_fault is None:
            self.t_fault = time.time()
            if self.fault is Fault.KILL_RANK:
                _emit({LINE_KEY: "rank", "rank": rank, "status": "killed", "names": [], "fired": True,
                       "t_fault": self.t_fault, "t_start": self.t_fault, "t_end": self.t_fault,
                       "exit_code": KILLED_EXIT_CODE, "core": core})
        return hit


_UNRESPONSIVE = re.compile(r"rank (\d+): no answer")


def _sha(c: Any) -> str | None:
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


def run_rank(s: Scenario, comm: Any, data_seed: int) -> dict[str, Any]:
    """Run the scenario on this rank; the result record (never raises for emulator errors)."""
    from mc2emu.ops.all_to_all_quant_matmul import all_to_all_quant_matmul
    from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
    from mc2emu.runtime import ConstraintError, DeadlockError, HazardError, PerturbPolicy

    rank = comm.Get_rank()
    inp = gen_st_inputs(rank, s.ranks, s.ori_m, s.ka, s.n, seed=data_seed)
    kw = dict(impl=s.impl, local_matmul=s.local_matmul, wait_order=s.wait_order, hccl_server=s.hccl_server,
              block_dim=s.block_dim, head_tile_size=s.head_tile_size, timeout=s.timeout, comm=comm)
    rec: dict[str, Any] = {LINE_KEY: "rank", "rank": rank, "names": [], "fired": False, "t_fault": None}
    args = (inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"])
    if s.reference:
        rec["ref_sha"] = _sha(all_to_all_quant_matmul(*args, **kw))
    plan = fault_plan(s, TimedFaultPlan)
    perturb = PerturbPolicy(s.seed) if s.injection is Injection.PERTURB else None
    c = None
    rec["t_start"] = time.time()
    try:
        c = all_to_all_quant_matmul(*args, **kw, faults=plan, perturb=perturb)
        rec.update(status="ok", exit_code=0)
    except HazardError as exc:
        c = exc.output
        rec.update(status="hazard", names=sorted(exc.names()), exit_code=exc.exit_code,
                   message=str(exc)[:2000])
    except DeadlockError as exc:
        text = exc.report or str(exc)
        rec.update(status="deadlock", names=[DEADLOCK], exit_code=exc.exit_code, message=text[:4000],
                   declared_elsewhere=exc.declared_elsewhere,
                   unresponsive=sorted({int(m) for m in _UNRESPONSIVE.findall(text)}))
    except ConstraintError as exc:
        rec.update(status="constraint", exit_code=exc.exit_code, message=str(exc))
    except Exception as exc:   # a worker must always report; any other failure is a finding
        rec.update(status="error", exit_code=1, message=f"{type(exc).__name__}: {exc}"[:2000])
    rec["t_end"] = time.time()
    if plan is not None and plan.fired:
        rec.update(fired=True, t_fault=plan.t_fault)
    rec["sha"] = _sha(c)
    if s.golden and rec["status"] == "ok":
        rec["ulp"] = _golden_ulp(s, rank, c, data_seed)
    return rec


def gather_results(comm: Any, rec: dict[str, Any], timeout: float = GATHER_S) -> dict[str, Any] | None:
    """Bounded gather to rank 0 over point-to-point messages (a dead or stuck rank only costs the timeout).
    Rank 0 returns the gathered record; the others wait for its ack so that no rank's exit can make the
    launcher end the job before rank 0 printed."""
    rank, size = comm.Get_rank(), comm.Get_size()
    deadline = time.monotonic() + timeout
    if rank != 0:
        comm.isend(rec, dest=0, tag=TAG_RESULT)
        ack = comm.irecv(source=0, tag=TAG_ACK)
        while time.monotonic() < deadline and 0 not in rec.get("unresponsive", []):
            done, _ = ack.test()
            if done:
                break
            time.sleep(GATHER_POLL_S)
        return None
    reqs = {q: comm.irecv(source=q, tag=TAG_RESULT) for q in range(1, size)}
    results: dict[str, Any] = {"0": rec}
    dead = set(rec.get("unresponsive", []))   # ranks a deadlock report found not answering: never wait for them
    while set(reqs) - dead and time.monotonic() < deadline:
        for q in list(reqs):
            done, val = reqs[q].test()
            if done:
                results[str(q)] = val
                dead.update(val.get("unresponsive", []))
                del reqs[q]
        if reqs:
            time.sleep(GATHER_POLL_S)
    gathered = {LINE_KEY: "gathered", "results": results, "missing": sorted(reqs)}
    _emit(gathered)
    for q in range(1, size):
        if str(q) in results:
            comm.isend(True, dest=q, tag=TAG_ACK)
    time.sleep(0.1)   # let the acks leave before this process exits
    return gathered


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mc2emu.check.stress",
                                description="One fault-injection stress job (run under mpiexec).")
    p.add_argument("--injection", "--fault", dest="injection", default="perturb",
                   choices=[i.value for i in Injection])
    p.add_argument("--impl", default="udma", choices=["udma", "hcomm"])
    p.add_argument("--local-matmul", type=int, default=0, choices=[0, 1, 2])
    p.add_argument("--wait-order", default="mask", choices=["mask", "in_order"])
    p.add_argument("--hccl-server", default="ccu", choices=["ccu", "aicpu"])
    p.add_argument("--ori-m", type=int, default=96)
    p.add_argument("--ka", type=int, default=128)
    p.add_argument("--n", type=int, default=64)
    p.add_argument("--head-tile-size", type=int, default=32)
    p.add_argument("--block-dim", type=int, default=4)
    p.add_argument("--seed", type=int, default=1, help="fault plan / perturbation seed")
    p.add_argument("--data-seed", type=int, default=42, help="input generator seed (CANN ST: 42)")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="emulator wait deadline, s")
    p.add_argument("--reference", action="store_true", help="run unperturbed first and compare bitwise")
    p.add_argument("--golden", action="store_true", help="compare a clean C with the CANN golden")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    s = Scenario(Injection(a.injection), world.Get_size(), a.impl, a.local_matmul, a.wait_order, a.hccl_server,
                 a.ori_m, a.ka, a.n, a.head_tile_size, a.block_dim, a.seed, a.timeout, a.reference, a.golden)
    gather_comm = world.Dup()   # the operator's own messages never match the gather's
    rec = run_rank(s, world, a.data_seed)
    rec["size"] = s.ranks
    _emit(rec)
    gather_results(gather_comm, rec)
    sys.stderr.flush()
    # The emulator's windows may still be locked after a deadlock: skip MPI_Finalize (it could block).
    os._exit(int(rec["exit_code"]))


def scenario_fields() -> list[str]:
    return [f.name for f in fields(Scenario)]


def scenario_dict(s: Scenario) -> dict[str, Any]:
    d = asdict(s)
    d["injection"] = s.injection.value
    return d


def iter_failures(outcomes: Iterable[Outcome]) -> list[Outcome]:
    return [o for o in outcomes if o.verdict in FAILING]


if __name__ == "__main__":
    sys.exit(main())
