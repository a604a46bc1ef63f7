"""Fault-injection stress of all_to_all_quant_matmul and all_gather_quant_matmul (`--op`): one seeded scenario
per MPI job, judged against the diagnosis its fault must produce (`mc2emu.runtime.faults`).

- Pure helpers: `Scenario` (what one job runs), `expected_diagnosis` / `can_run` (what it must end in, and
  whether that is known), `fault_plan` (the seeded plan every rank builds alike), `judge` (one job's rank
  results -> an `Outcome`) and `Tally` (outcomes -> the summary and the exit status).
- The worker, `mpiexec -n R python -m mc2emu.stress.worker --injection F --seed S ...`: every rank runs the
  operator once with the injection (after an unperturbed reference run with `--reference`) and prints its
  result line at once; rank 0 then gathers the lines within `GATHER_S` and prints them as one line; every
  rank prints an exit line and exits with its own status (0 clean, the exception's exit code otherwise,
  137 for the rank KILL_RANK shoots, which prints its line before dying).
- `launch/stress.py` draws the scenarios, runs the jobs under a hard timeout and prints the tally.

Rank result line (`{"mc2emu_stress": "rank", ...}`; times in epoch seconds, the ranks share the clock):
status (ok, hazard, deadlock, constraint, error, killed), names, events, fired, t_fault, t_start, t_end,
sha / ref_sha (hash of C, and of the unperturbed reference run's C), ulp (to the CANN golden),
unresponsive (ranks a deadlock report lists as not answering), exit_code.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.ops.all_to_all_quant_matmul_op import Impl
from mc2emu.runtime.faults import KILLED_EXIT_CODE, Fault, FaultHook, FaultPlan
from mc2emu.stress.scenario import (
    AG_SLOT_RING,
    DEADLOCK,
    DEFAULT_TIMEOUT_S,
    GATHER_POLL_S,
    GATHER_S,
    LINE_KEY,
    SETTLE_S,
    TAG_ACK,
    TAG_DEAD,
    TAG_RESULT,
    Injection,
    Scenario,
    StressOp,
    fault_plan,
)


# -- the worker (one rank) -------------------------------------------------------------------------------------
def _emit(rec: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(rec, sort_keys=True) + "\n")
    sys.stdout.flush()


class TimedFaultPlan(FaultPlan):
    """A FaultPlan that notes when it fired. KILL_RANK: the dying rank prints its line and tells the other
    ranks' gathers (over `notify`, the worker's own communicator) not to wait for it."""

    t_fault: float | None = None
    notify: Any = None

    def fires(self, hook: FaultHook, rank: int, core: str) -> bool:
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
    from mc2emu.numerics.compare import ulp_distance

    if s.op is StressOp.AG:
        from mc2emu.ops.all_gather_quant_matmul_golden import gen_ag_st_inputs, golden_all_gather_quant_matmul

        ag = [gen_ag_st_inputs(s.ori_m, s.ka, s.n, q, seed_base=data_seed) for q in range(s.ranks)]
        ref = golden_all_gather_quant_matmul([i["x1"] for i in ag], [i["x1_scale"] for i in ag], ag[rank]["x2"],
                                             ag[rank]["x2_scale"])
        return ulp_distance(c, ref)
    from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs, golden_a2a

    inps = [gen_st_inputs(q, s.ranks, s.ori_m, s.ka, s.n, seed=data_seed) for q in range(s.ranks)]
    ref = golden_a2a([i["x1"] for i in inps], [i["x1_scale"] for i in inps], inps[rank]["x2"],
                     inps[rank]["x2_scale"], rank, "e4m3")
    return ulp_distance(c, ref)


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
    from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
    from mc2emu.ops.all_to_all_quant_matmul_op import all_to_all_quant_matmul
    from mc2emu.runtime import PerturbPolicy, Severity
    from mc2emu.runtime.events import HazardReported

    rank = comm.Get_rank()
    if s.op is StressOp.AG:
        from mc2emu.ops.all_gather_quant_matmul_golden import gen_ag_st_inputs
        from mc2emu.ops.all_gather_quant_matmul_op import all_gather_quant_matmul

        inp = gen_ag_st_inputs(s.ori_m, s.ka, s.n, rank, seed_base=data_seed)
        op: Any = all_gather_quant_matmul
        kw: dict[str, Any] = dict(wait_order=s.wait_order, block_dim=s.block_dim, timeout=s.timeout, comm=comm,
                                  kernel_variant=s.injection.ag_variant or "source")
        slots = AG_SLOT_RING.get(s.injection)
        if slots is not None:   # the slot ring waits in order only
            kw.update(protocol="slot_ring", slot_num=slots, wait_order=None)
    else:
        inp = gen_st_inputs(rank, s.ranks, s.ori_m, s.ka, s.n, seed=data_seed)
        op = all_to_all_quant_matmul
        kw = dict(impl=s.impl, local_matmul=s.local_matmul, wait_order=s.wait_order, hccl_server=s.hccl_server,
                  block_dim=s.block_dim, head_tile_size=s.head_tile_size, timeout=s.timeout, comm=comm)
    args = (inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"])
    rec: dict[str, Any] = {LINE_KEY: "rank", "rank": rank, "size": s.ranks, "names": [], "fired": False,
                           "t_fault": None}
    if s.reference:
        ref = _call(rec, lambda: op(*args, **kw))
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
        if isinstance(e, HazardReported) and e.severity is Severity.ERROR:
            filed.add(e.hazard.value)

    rec["t_start"] = time.time()
    c = _call(rec, lambda: op(*args, **kw, faults=plan, perturb=perturb, observers=(on_event,)))
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
    p = argparse.ArgumentParser(prog="python -m mc2emu.stress.worker",
                                description="One fault-injection stress job of all_to_all_quant_matmul; run "
                                            "it under mpiexec. Prints one JSON result line per rank.")
    p.add_argument("--injection", "--fault", dest="injection", default=Injection.PERTURB.value,
                   choices=[i.value for i in Injection])
    p.add_argument("--impl", default="udma", choices=[m.value for m in Impl])
    p.add_argument("--local-matmul", type=int, default=0, choices=[0, 1, 2])
    p.add_argument("--wait-order", default="mask", choices=[m.value for m in WaitOrder])
    p.add_argument("--hccl-server", default="ccu", choices=[m.value for m in HcclServerType])
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
    p.add_argument("--op", default=StressOp.A2A.value, choices=[o.value for o in StressOp],
                   help="the operator (all_gather_quant_matmul reads --ori-m as m per rank, --ka as K)")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    s = Scenario(Injection(a.injection), world.Get_size(), Impl(a.impl), a.local_matmul, WaitOrder(a.wait_order),
                 HcclServerType(a.hccl_server), a.ori_m, a.ka, a.n, a.head_tile_size, a.block_dim, a.seed,
                 a.timeout, a.reference, a.golden, StressOp(a.op))
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
