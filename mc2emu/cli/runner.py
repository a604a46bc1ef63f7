"""Running planned cases on every rank: inputs, golden, the operator call, statistics, dump, the per-case
agreement, the trace gather, and the guarantees that the job ends.

Per case, on every rank, in this order: arm the watchdog; make or load the inputs (all ranks agree on
success before going on); the golden (collective for collective operators); a barrier; the operator call
with the statistics / trace observer subscribed; compare; dump; gather every rank's `RankResult` to rank
0, which prints the progress line and the errors and decides whether the run can go on.

Never a hung job:
- every wait between ranks here is a non-blocking barrier polled with a sleeping backoff (a blocking MPI
  call spins, stealing the CPU of ranks still computing on this oversubscribed machine);
- a watchdog thread per rank aborts the whole job (MPI Abort, exit 3) when a case outlives its budget
  (a rank stuck where the operator's own deadline cannot reach);
- an unexpected deadlock ends the run: rank 0 prints the table so far and aborts every rank with exit 3;
- any exception escaping this module on any rank aborts every rank (`run.py`).
"""

from __future__ import annotations

import dataclasses
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from mc2emu.cli.dump import CaseFile, DumpError, case_dirs, load_case, rank_file, read_meta, save_case
from mc2emu.cli.options import OptionError, RunOptions, window_offsets
from mc2emu.cli.report import (
    CaseReport,
    Raised,
    RankResult,
    Status,
    case_title,
    error_lines,
    exit_code,
    format_table,
    make_report,
    note_lines,
    progress_line,
    summary_line,
)
from mc2emu.cli.scenarios import (
    Case,
    Comparison,
    ExecContext,
    OperatorSpec,
    Registry,
    Shape,
    operator_cases,
    operator_options,
    shape_only,
)
from mc2emu.cli.stats import derive_stats
from mc2emu.comm.communicator import Communicator
from mc2emu.launcher import idle_barrier
from mc2emu.numerics.formats import ElemFormat
from mc2emu.numerics.payload import is_payload
from mc2emu.runtime.events import Event, HazardReported
from mc2emu.runtime.hazards import (
    EXIT_HAZARD,
    ConstraintError,
    DeadlockError,
    HazardError,
    Mc2EmuError,
    Severity,
)
from mc2emu.runtime.perturb import PerturbPolicy
from mc2emu.runtime.waiting import DEFAULT_TIMEOUT_S
from mc2emu.trace.chrome_trace import ChromeTraceRecorder, clock_offset_ns, merge_traces, write_trace

# Polling of non-blocking barriers: start short (a barrier usually completes in microseconds), back off
# to a sleep that leaves the CPU to ranks still computing.
# A case may take this many deadlines (the wait primitive may extend one once, the operator may wait
# several times in sequence) plus a fixed slack for the compute itself before the watchdog ends the job.
WATCHDOG_DEADLINES = 4
WATCHDOG_SLACK_S = 120.0
# After a deadlock on this rank, the other ranks get this many deadlines (plus slack) to end the case too.
AFTER_DEADLOCK_DEADLINES = 3
AFTER_DEADLOCK_SLACK_S = 30.0


# -- MPI helpers ------------------------------------------------------------------------------------------------
quiet_barrier = idle_barrier   # host barrier that sleeps while it waits (the watchdog bounds it)


def quiet_gather(comm: Any, obj: Any) -> list[Any] | None:
    quiet_barrier(comm)
    return comm.gather(obj, root=0)


def quiet_allgather(comm: Any, obj: Any) -> list[Any]:
    quiet_barrier(comm)
    return comm.allgather(obj)


def quiet_bcast(comm: Any, obj: Any) -> Any:
    quiet_barrier(comm)
    return comm.bcast(obj, root=0)


# What the comparison says in a protocol-only run: the checks that need bytes are off.
PROTOCOL_ONLY_NOTE = "golden off (protocol-only: no tensor bytes)"

class Watchdog:
    """Aborts every rank when the current phase outlives its budget. One daemon thread per rank."""

    def __init__(self, comm: Any, err: TextIO, abort: Callable[[int], None] | None = None) -> None:
        self.comm = comm
        self.err = err
        self._abort = abort or comm.Abort
        self._cond = threading.Condition()
        self._deadline: float | None = None
        self._what = ""
        self._budget = 0.0
        self._stop = False
        self._thread = threading.Thread(target=self._run, name="mc2emu-watchdog", daemon=True)
        self._thread.start()

    def arm(self, budget_s: float, what: str) -> None:
        with self._cond:
            self._deadline = time.monotonic() + budget_s
            self._budget = budget_s
            self._what = what
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._deadline = None
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()

    def _run(self) -> None:
        with self._cond:
            while not self._stop:
                if self._deadline is None:
                    self._cond.wait()
                    continue
                left = self._deadline - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                    continue
                self.err.write(f"mc2emu: rank {self.comm.Get_rank()}: {self._what} still running after "
                               f"{self._budget:.0f} s (a rank is stuck where no deadline reaches); aborting every "
                               f"rank with exit code {EXIT_HAZARD}\n")
                self.err.flush()
                self._abort(EXIT_HAZARD)
                self._deadline = None


# -- planning from a dump ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Planned:
    case: Case
    source: Path | None = None  # the dump directory the inputs come from (--inputs)


def plan_replay(registry: Registry, opts: RunOptions, size: int) -> list[Planned]:
    """Cases of `--inputs DIR`: the recorded case of each dump, with the user's mode options applied."""
    assert opts.inputs is not None
    if opts.m or opts.k or opts.n:
        raise OptionError("--m/--k/--n cannot be combined with --inputs: the shape comes from the dump")
    planned: list[Planned] = []
    held: list[str] = []
    try:
        dirs = case_dirs(opts.inputs)
    except DumpError as exc:
        raise OptionError(f"--inputs: {exc}") from None
    for d in dirs:
        try:
            meta = read_meta(rank_file(d, 0))
        except DumpError as exc:
            raise OptionError(f"--inputs: {exc}") from None
        rec = meta.get("case", {})
        if meta.get("ranks") != size:
            raise OptionError(f"--inputs {d}: the dump was written by {meta.get('ranks')} ranks, this run has "
                              f"{size}")
        if rec.get("op") not in registry.names():
            raise OptionError(f"--inputs {d}: operator {rec.get('op')!r} is not registered")
        spec = registry.get(rec["op"])
        if opts.op is not None and opts.op != spec.name:
            continue
        shape = Shape(*rec["shape"])
        dtype = ElemFormat(rec["dtype"]) if rec.get("dtype") else None
        cases, h = operator_cases(spec, opts, base_modes=[spec.mode_type.from_dict(rec["mode"])], shape=shape,
                                  dtype=dtype, seed=int(rec.get("seed", opts.seed)))
        planned += [Planned(c, d) for c in cases]
        held += [f"{spec.name} {m.label()}" for m in h]
    if not planned:
        if held:
            raise OptionError("the replayed modes must reproduce a hazard (" + "; ".join(held) + "): add --hazards")
        raise OptionError("--inputs: no dumped case matches the options")
    return planned


# -- one case on one rank -------------------------------------------------------------------------------------
@dataclass
class SuiteState:
    reports: list[CaseReport] = field(default_factory=list)
    trace_records: list[Event] = field(default_factory=list)


def _raised_of(exc: BaseException) -> Raised:
    if isinstance(exc, ConstraintError):
        return Raised.CONSTRAINT
    if isinstance(exc, HazardError):
        return Raised.HAZARD
    if isinstance(exc, DeadlockError):
        return Raised.DEADLOCK
    if isinstance(exc, Mc2EmuError):
        return Raised.MC2EMU
    return Raised.EXCEPTION


def _hazard_reports(reports: list[Any]) -> tuple[tuple[str, int, str], ...]:
    """(name, count, first report) per hazard name."""
    by: dict[str, list[Any]] = {}
    for h in reports:
        by.setdefault(h.hazard.value, []).append(h)
    return tuple((name, len(lst), str(lst[0])) for name, lst in sorted(by.items()))


def _hazard_events(events: list[Event]) -> set[str]:
    """Error-severity hazard names published as `HazardReported` events (they survive a DeadlockError, which
    carries none); warnings do not fail a case."""
    return {e.hazard.value for e in events if isinstance(e, HazardReported) and e.severity is not Severity.WARNING}


def _message(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, DeadlockError) and exc.report and not exc.declared_elsewhere:
        text += "\n" + exc.report   # the declaring rank's cross-rank report
    notes = getattr(exc, "__notes__", None)
    if notes:
        text += "\n" + "\n".join(notes)
    if _raised_of(exc) is Raised.EXCEPTION:
        text += "\n" + "".join(traceback.format_exception(exc)[-6:])
    return text


def _execute(spec: OperatorSpec, case: Case, inputs: dict[str, np.ndarray], ctx: ExecContext) -> tuple[Any, ...]:
    """One operator call: (output or None, Raised, message, hazard names, hazard reports)."""
    try:
        return spec.execute(case, inputs, ctx), Raised.NOTHING, "", (), ()
    except HazardError as exc:
        out = exc.output if isinstance(exc.output, np.ndarray) or is_payload(exc.output) else None
        return (out, Raised.HAZARD, str(exc).splitlines()[0], tuple(sorted(exc.names())),
                _hazard_reports(exc.hazards))
    except Exception as exc:  # every outcome is reported and judged: the CLI must not die on one rank
        return None, _raised_of(exc), _message(exc), (), ()


def _compare(spec: OperatorSpec, out: np.ndarray, golden: np.ndarray | None, golden_error: str) -> Comparison:
    if is_payload(out):   # a protocol-only run: no bytes to compare
        return Comparison(True, note=PROTOCOL_ONLY_NOTE)
    try:
        comparison = spec.compare(out, golden)
    except (ValueError, TypeError) as exc:
        comparison = Comparison(False, note=f"compare failed: {exc}")
    if golden_error:
        comparison = Comparison(False, note=golden_error)
    return comparison


class CaseRunner:
    """Runs cases on this rank; rank 0 also reports."""

    def __init__(self, registry: Registry, opts: RunOptions, comm: Any, out: TextIO, err: TextIO,
                 watchdog: Watchdog) -> None:
        self.registry = registry
        self.opts = opts
        self.comm = comm
        self.rank = comm.Get_rank()
        self.size = comm.Get_size()
        self.out = out
        self.err = err
        self.watchdog = watchdog
        self.state = SuiteState()
        self.not_applicable = 0

    def say(self, text: str) -> None:
        if self.rank == 0:
            self.out.write(text + "\n")
            self.out.flush()

    def budget(self, case: Case) -> float:
        return self.opts.repeat * (WATCHDOG_DEADLINES * (case.timeout or DEFAULT_TIMEOUT_S) + WATCHDOG_SLACK_S)

    # inputs --------------------------------------------------------------------------------------------------
    def _inputs(self, spec: OperatorSpec, planned: Planned) -> tuple[dict[str, np.ndarray], CaseFile | None]:
        if planned.source is None:
            return spec.make_inputs(planned.case, self.rank, self.size), None
        cf = load_case(rank_file(planned.source, self.rank))
        inputs = cf.of_role("input")
        wants_bias = bool(getattr(planned.case.mode, "bias", False))
        if wants_bias and "bias" not in inputs:
            raise DumpError(f"{planned.source}: the case needs a bias, the dump has none")
        if not wants_bias:
            inputs.pop("bias", None)
        return inputs, cf

    def run_case(self, index: int, total: int, planned: Planned) -> CaseReport | None:
        case = planned.case
        spec = self.registry.get(case.op)
        self.watchdog.arm(self.budget(case), f"case {index}/{total} {case.case_id}")
        try:
            inputs, dumped = self._inputs(spec, planned)
            prep_error = ""
        except (DumpError, OSError, ValueError, Mc2EmuError) as exc:
            inputs, dumped, prep_error = {}, None, f"inputs: {type(exc).__name__}: {exc}"
        prep = quiet_allgather(self.comm, prep_error)
        if any(prep):
            results = [RankResult(r, Raised.CONSTRAINT, message=msg) for r, msg in enumerate(prep) if msg]
            return self._conclude(index, total, case, results, gathered=True)

        golden: np.ndarray | None = None
        golden_error = ""
        data = not self.opts.protocol_only
        if not data:   # protocol-only: the inputs' shapes and dtypes, no bytes; no golden
            inputs = shape_only(inputs)
        try:
            golden = spec.golden(case, inputs, self.comm) if data else None
        except (Mc2EmuError, ValueError, TypeError) as exc:
            golden_error = f"golden: {type(exc).__name__}: {exc}"

        recorder = ChromeTraceRecorder()
        ctx = ExecContext(rank=self.rank, size=self.size, observers=(recorder,), check=self.opts.check,
                          timeout=case.timeout, block_dim=self.opts.block_dim,
                          perturb=PerturbPolicy(self.opts.perturb) if self.opts.perturb is not None else None,
                          options=operator_options(spec, self.opts), data=data)
        quiet_barrier(self.comm)
        out: np.ndarray | None = None
        raised, message = Raised.NOTHING, ""
        hazards: tuple[str, ...] = ()
        hazard_reports: tuple[tuple[str, int, str], ...] = ()
        t0 = time.perf_counter_ns()
        comparison: Comparison | None = None
        if self.opts.repeat > 1:
            out, raised, message, hazards, hazard_reports, comparison = self._repeat(spec, case, inputs, ctx, golden,
                                                                                     golden_error)
        else:
            out, raised, message, hazards, hazard_reports = _execute(spec, case, inputs, ctx)
        t1 = time.perf_counter_ns()

        if out is not None and comparison is None:
            comparison = (Comparison(True, note=PROTOCOL_ONLY_NOTE) if not data
                          else _compare(spec, out, golden, golden_error))
        replay_diff, same_case = self._replay_diff(case, out, dumped)
        stats = derive_stats(recorder.events)
        if raised is Raised.DEADLOCK:  # the peers' own deadlines fire within about two deadlines
            self.watchdog.arm(AFTER_DEADLOCK_DEADLINES * (case.timeout or DEFAULT_TIMEOUT_S) + AFTER_DEADLOCK_SLACK_S,
                              f"case {index}/{total} {case.case_id}: waiting for the other ranks after a deadlock")
        if self.opts.trace is not None:
            recorder.span(self.rank, case_title(case), t0, t1, case=case.case_id, raised=raised.value)
            self.state.trace_records += recorder.records()
        if self.opts.dump is not None and data:
            self._dump(case, inputs, out, golden, total)
        hazards = tuple(sorted(set(hazards) | _hazard_events(recorder.events)))
        result = RankResult(self.rank, raised, hazards, message, hazard_reports, comparison, (t1 - t0) / 1e9, stats,
                            replay_diff, same_case, notes=tuple(ctx.notes))
        return self._conclude(index, total, case, [result], gathered=False)

    def _repeat(self, spec: OperatorSpec, case: Case, inputs: dict[str, np.ndarray], ctx: ExecContext,
                golden: np.ndarray | None, golden_error: str) -> tuple[Any, ...]:
        """`--repeat N`: the case N times back to back, on one `Communicator` for a collective operator (no
        host barrier between the iterations), each iteration compared with the golden; the communicator's
        closing check (happens-before over the N launches) adds its hazards. The first failing iteration is
        named; an exception ends the loop at its iteration."""
        n = self.opts.repeat
        comm_obj = Communicator(self.comm, check=self.opts.check, timeout=case.timeout,
                                window_offsets=window_offsets(self.opts), data=ctx.data) if spec.collective else None
        ctx = dataclasses.replace(ctx, comm=comm_obj)
        out: np.ndarray | None = None
        raised, message = Raised.NOTHING, ""
        names: set[str] = set()
        reports: list[tuple[str, int, str]] = []
        worst: Comparison | None = None
        first_bad: int | None = None
        for it in range(n):
            out, r, msg, hz, reps = _execute(spec, case, inputs, ctx)
            names |= set(hz)
            reports += [(name, count, f"iteration {it}: {text}") for name, count, text in reps]
            if out is not None:
                cmp = _compare(spec, out, golden, golden_error)
                if first_bad is None and (not cmp.ok or worst is None or (cmp.max_ulp or 0) > (worst.max_ulp or 0)):
                    worst = cmp
                    first_bad = None if cmp.ok else it
            if r is not Raised.NOTHING and raised is Raised.NOTHING:
                raised, message = r, f"iteration {it} of {n}: {msg}"
            if r not in (Raised.NOTHING, Raised.HAZARD):
                break
        if comm_obj is not None:
            if raised in (Raised.NOTHING, Raised.HAZARD):
                try:
                    closing = comm_obj.close()
                except Exception as exc:  # the closing barrier failed: report it, as any other outcome
                    raised, message = _raised_of(exc), f"Communicator.close: {_message(exc)}"
                    closing = []
                names |= {h.hazard.value for h in closing if h.severity is not Severity.WARNING}
                reports += [(name, count, f"across the {n} launches: {text}")
                            for name, count, text in _hazard_reports(closing)]
                if names and raised is Raised.NOTHING:
                    raised, message = Raised.HAZARD, f"the loop of {n} launches reported {sorted(names)}"
            else:
                comm_obj.fail(message.splitlines()[0] if message else "a failed iteration")
                comm_obj.close()
        if worst is not None:
            where = f"iteration {first_bad} of {n} differs first" if first_bad is not None else f"all {n} iterations"
            worst = Comparison(worst.ok, worst.max_abs, worst.max_ulp, note=f"{where}; {worst.note}".strip("; "))
        return out, raised, message, tuple(sorted(names)), tuple(reports), worst

    def _replay_diff(self, case: Case, out: np.ndarray | None, dumped: CaseFile | None) -> tuple[int | None, bool]:
        if dumped is None or out is None:
            return None, False
        ref = dumped.of_role("output").get("out")
        if ref is None:
            return None, False
        rec = dumped.meta.get("case", {})
        same = {k: v for k, v in rec.items() if k != "seed"} == {k: v for k, v in case.as_dict().items()
                                                                   if k != "seed"}
        a = np.ascontiguousarray(out)
        if a.shape != ref.shape or a.dtype.itemsize != ref.dtype.itemsize:
            return int(max(a.size, ref.size)), same
        width = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[a.dtype.itemsize]
        return int(np.count_nonzero(a.view(width) != np.ascontiguousarray(ref).view(width))), same

    def _dump(self, case: Case, inputs: dict[str, np.ndarray], out: np.ndarray | None,
              golden: np.ndarray | None, total: int) -> None:
        assert self.opts.dump is not None
        directory = self.opts.dump if total == 1 else self.opts.dump / case.case_id
        arrays: dict[str, tuple[np.ndarray, str]] = {k: (v, "input") for k, v in inputs.items()}
        if out is not None:
            arrays["out"] = (np.asarray(out), "output")
        if golden is not None:
            arrays["golden"] = (np.asarray(golden), "golden")
        save_case(rank_file(directory, self.rank), arrays,
                  {"case": case.as_dict(), "case_id": case.case_id, "rank": self.rank, "ranks": self.size})

    def _conclude(self, index: int, total: int, case: Case, results: list[RankResult], *,
                  gathered: bool) -> CaseReport | None:
        """`gathered`: `results` already hold what every rank knows (else this rank's one result)."""
        all_results = (results if self.rank == 0 else None) if gathered else quiet_gather(self.comm, results[0])
        self.watchdog.disarm()
        report = None
        if self.rank == 0:
            assert all_results is not None
            report = make_report(index, total, case, sorted(all_results, key=lambda r: r.rank),
                                 check=self.opts.check)
            self.state.reports.append(report)
            self.say(progress_line(report))
            if report.status is not Status.PASS:
                for line in error_lines(report):
                    self.say(line)
        return report

    # the whole suite -----------------------------------------------------------------------------------------
    def run(self, plan: list[Planned], not_applicable: int = 0) -> int:
        """Every planned case, then the table; `not_applicable`: the cases left out at this world size (counted
        in the summary line)."""
        self.not_applicable = not_applicable
        total = len(plan)
        for i, planned in enumerate(plan, 1):
            report = self.run_case(i, total, planned)
            fatal = report is not None and report.status is Status.DEADLOCK
            if quiet_bcast(self.comm, fatal):
                self.finish(aborting=True)
                return EXIT_HAZARD
        return self.finish(aborting=False)

    def finish(self, *, aborting: bool) -> int:
        """Trace, table, summary; on `aborting`, rank 0 then ends every rank with MPI Abort."""
        if self.opts.trace is not None and not aborting:
            self._write_trace()
        code = exit_code(self.state.reports) if self.rank == 0 else 0
        if self.rank == 0:
            self.say("")
            self.say(format_table(self.state.reports))
            for line in note_lines(self.state.reports):
                self.say(line)
            self.say(summary_line(self.state.reports, self.not_applicable, self.size))
            if aborting:
                self.say("an unexpected deadlock: the operator state of the ranks is undefined; aborting every "
                         f"rank with exit code {EXIT_HAZARD}")
                self.err.flush()
                self.comm.Abort(EXIT_HAZARD)
        elif aborting:
            quiet_barrier(self.comm)  # rank 0 aborts the job while this rank sleeps here
        return int(quiet_bcast(self.comm, code))

    def _write_trace(self) -> None:
        assert self.opts.trace is not None
        self.watchdog.arm(WATCHDOG_SLACK_S, "gathering the trace")
        gathered = quiet_gather(self.comm, (self.rank, clock_offset_ns(), self.state.trace_records))
        if self.rank == 0:
            assert gathered is not None
            trace = merge_traces({r: recs for r, _, recs in gathered}, {r: off for r, off, _ in gathered},
                                 metadata={"ranks": self.size,
                                           "cases": [rep.case.case_id for rep in self.state.reports]})
            path = write_trace(self.opts.trace, trace)
            n = len(trace["traceEvents"])
            self.say(f"trace: {path} ({n} events, {trace['otherData']['flows']} flows; open in ui.perfetto.dev)")
        self.watchdog.disarm()


def validate_plan(registry: Registry, plan: list[Planned], size: int) -> list[str]:
    """Reasons the planned cases cannot run at this world size (identical on every rank)."""
    return [f"{why} ({len(ids)} case(s))" if len(ids) > 1 else f"{why} ({ids[0]})"
            for why, ids in split_plan(registry, plan, size).not_applicable.items()]


@dataclass(frozen=True)
class PlanSplit:
    """A plan at one world size: the cases that run, how many do not (`skipped`), and per rule (operator:
    reason) the ids of those (a case breaking two rules is under both)."""

    runnable: list[Planned]
    skipped: int
    not_applicable: dict[str, list[str]]

    def lines(self, size: int) -> list[str]:
        """One line per rule: "not applicable at R = 16: op: AG-3 R <= 8 (seed protocol): 16 ranks: 6 case(s)"."""
        return [f"not applicable at R = {size}: {why}: " + (f"{len(ids)} case(s)" if len(ids) > 1 else ids[0])
                for why, ids in self.not_applicable.items()]


def split_plan(registry: Registry, plan: list[Planned], size: int) -> PlanSplit:
    """The planned cases the operators accept at this world size, and the rest grouped by rule (identical on
    every rank). A case is not applicable when its operator's `validate(case, size)` gives a reason."""
    runnable: list[Planned] = []
    refused: dict[str, list[str]] = {}
    for p in plan:
        reasons = registry.get(p.case.op).validate(p.case, size)
        for why in reasons:
            refused.setdefault(f"{p.case.op}: {why}", []).append(p.case.case_id)
        if not reasons:
            runnable.append(p)
    return PlanSplit(runnable, len(plan) - len(runnable), refused)
