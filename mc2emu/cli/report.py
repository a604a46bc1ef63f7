"""Results of a case on every rank, their verdict, and the text the CLI prints (rank 0 only).

A rank ends a case with a `RankResult` (its raw outcome: what it raised, its hazards, its comparison,
its statistics); rank 0 gathers them and `judge` turns them and the case's expectation into one `Status`.
Exit code of a run: the largest of its cases' (0 pass, 1 mismatch, 2 bad input, 3 hazard / deadlock).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mc2emu.cli.options import option_name
from mc2emu.cli.scenarios import Case, Comparison, OperatorMode, Registry
from mc2emu.cli.source_cases import api_note
from mc2emu.cli.stats import CaseStats, combine
from mc2emu.runtime.hazards import EXIT_BAD_INPUT, EXIT_HAZARD, EXIT_MISMATCH


class Raised(enum.Enum):
    """What the operator call did on one rank."""

    NOTHING = "returned"
    CONSTRAINT = "ConstraintError"
    HAZARD = "HazardError"
    DEADLOCK = "DeadlockError"
    MC2EMU = "mc2emu error"      # another Mc2EmuError (e.g. LaunchAborted after a peer core failed)
    EXCEPTION = "exception"      # anything else: a bug


class Status(enum.Enum):
    """Verdict of a case; value = (label, exit code)."""

    PASS = ("PASS", 0)
    EXPECTED = ("EXPECTED", 0)         # an expected hazard / deadlock was reproduced and reported
    UNCHECKED = ("UNCHECKED", 0)       # an expected hazard cannot be reported with --no-check
    MISMATCH = ("MISMATCH", EXIT_MISMATCH)
    BAD_INPUT = ("BAD INPUT", EXIT_BAD_INPUT)
    HAZARD = ("HAZARD", EXIT_HAZARD)
    DEADLOCK = ("DEADLOCK", EXIT_HAZARD)
    MISSING = ("MISSING", EXIT_HAZARD)  # an expected hazard / deadlock was not reported
    ERROR = ("ERROR", EXIT_HAZARD)

    @property
    def label(self) -> str:
        return self.value[0]

    @property
    def exit_code(self) -> int:
        return self.value[1]


@dataclass(frozen=True)
class RankResult:
    rank: int
    raised: Raised = Raised.NOTHING
    hazards: tuple[str, ...] = ()
    message: str = ""
    # per hazard name reported on this rank: (name, count, the first report as text)
    hazard_reports: tuple[tuple[str, int, str], ...] = ()
    comparison: Comparison | None = None
    wall_s: float = 0.0
    stats: CaseStats = field(default_factory=CaseStats)
    replay_diff: int | None = None   # elements differing from the dumped output (None: nothing to compare)
    replay_same_case: bool = False
    notes: tuple[str, ...] = ()      # facts of the launch the table shows (ExecContext.notes)


@dataclass(frozen=True)
class CaseReport:
    index: int
    total: int
    case: Case
    ranks: int
    status: Status
    detail: str
    results: tuple[RankResult, ...]
    stats: CaseStats

    @property
    def wall_s(self) -> float:
        return max((r.wall_s for r in self.results), default=0.0)

    @property
    def max_abs(self) -> float | None:
        vals = [r.comparison.max_abs for r in self.results if r.comparison and r.comparison.max_abs is not None]
        if any(math.isnan(v) for v in vals):
            return float("nan")
        return max(vals) if vals else None

    @property
    def notes(self) -> tuple[str, ...]:
        """Every rank's launch notes, each once, in rank order."""
        return tuple(dict.fromkeys(n for r in self.results for n in r.notes))

    @property
    def max_ulp(self) -> int | None:
        vals = [r.comparison.max_ulp for r in self.results if r.comparison and r.comparison.max_ulp is not None]
        return max(vals) if vals else None


def judge(case: Case, results: Sequence[RankResult], *, check: bool) -> tuple[Status, str]:
    """One verdict from every rank's result."""
    raised = {r.raised for r in results}
    hazards = sorted({h for r in results for h in r.hazards})
    deadlock = Raised.DEADLOCK in raised
    exp = case.expect
    if Raised.CONSTRAINT in raised:
        return Status.BAD_INPUT, _first_message(results, Raised.CONSTRAINT)
    if Raised.EXCEPTION in raised:
        return Status.ERROR, _first_message(results, Raised.EXCEPTION)
    if exp.is_hazard:
        seen = ", ".join(hazards + (["DEADLOCK"] if deadlock else []))
        missing = sorted(exp.hazard_names - set(hazards))
        if exp.deadlock and not deadlock:
            missing.append("DEADLOCK")
        if not missing or (exp.hang_ok and deadlock):
            if exp.compare:
                bad = [r for r in results if r.comparison is None or not r.comparison.ok]
                if bad:
                    notes = sorted({r.comparison.note for r in bad if r.comparison and r.comparison.note})
                    return Status.MISMATCH, (f"reported {seen}, but ranks {_ranks(bad)} differ from the golden's "
                                             f"prediction of its damage" + (f" ({'; '.join(notes)})" if notes else ""))
            return Status.EXPECTED, f"reported {seen}"
        if exp.optional and not hazards and not deadlock and Raised.MC2EMU not in raised:
            return _numerics_verdict(results, f"{exp.label()}: did not happen in this run")
        if not check and not (exp.deadlock and not deadlock):
            return Status.UNCHECKED, f"expects {exp.label()}: not reportable with --no-check"
        return Status.MISSING, f"expected {', '.join(missing)} was not reported" + (
            f" (reported: {', '.join(hazards)})" if hazards else "")
    if deadlock:
        return Status.DEADLOCK, _first_message(results, Raised.DEADLOCK)
    if hazards or Raised.HAZARD in raised:
        return Status.HAZARD, ", ".join(hazards) or _first_message(results, Raised.HAZARD)
    if Raised.MC2EMU in raised:
        return Status.ERROR, _first_message(results, Raised.MC2EMU)
    return _numerics_verdict(results, _replay_note(results))


def _numerics_verdict(results: Sequence[RankResult], note: str) -> tuple[Status, str]:
    """PASS or MISMATCH of a run that raised nothing, by the comparisons and the replay."""
    bad = [r for r in results if r.comparison is None or not r.comparison.ok]
    if bad:
        notes = sorted({r.comparison.note for r in bad if r.comparison and r.comparison.note})
        return Status.MISMATCH, f"ranks {_ranks(bad)} differ from the golden" + (f" ({'; '.join(notes)})"
                                                                                  if notes else "")
    diff = [r for r in results if r.replay_diff and r.replay_same_case]
    if diff:
        return Status.MISMATCH, f"replay differs from the dumped output on ranks {_ranks(diff)}"
    return Status.PASS, note


def _replay_note(results: Sequence[RankResult]) -> str:
    compared = [r for r in results if r.replay_diff is not None]
    if not compared:
        return ""
    same = all(r.replay_diff == 0 for r in compared)
    return "replay: bitwise identical to the dump" if same else "replay: differs from the dump (other mode)"


def _ranks(results: Sequence[RankResult]) -> str:
    return ",".join(str(r.rank) for r in results)


def _first_message(results: Sequence[RankResult], raised: Raised) -> str:
    for r in results:
        if r.raised is raised and r.message:
            return r.message.splitlines()[0]
    return raised.value


def make_report(index: int, total: int, case: Case, results: Sequence[RankResult], *, check: bool) -> CaseReport:
    status, detail = judge(case, results, check=check)
    return CaseReport(index, total, case, len(results), status, detail, tuple(results),
                      combine(r.stats for r in results))


def exit_code(reports: Sequence[CaseReport]) -> int:
    return max((r.status.exit_code for r in reports), default=0)


# -- text -------------------------------------------------------------------------------------------------------
def _fmt_bytes(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def _fmt_err(v: float | None) -> str:
    if v is None:
        return "-"
    if math.isnan(v):
        return "nan"
    return f"{v:.3g}"


def _fmt_share(s: CaseStats) -> str:
    h = s.hidden_share
    return "-" if h is None else f"{100 * h:.0f}%"


def case_title(c: Case) -> str:
    """"all_to_all_quant_matmul udma lm1 mask 32x128x128": operator, impl, mode, shape."""
    impl = c.mode.impl_name()
    return " ".join(p for p in (c.op, impl, c.mode.label() if c.mode.label() != "-" else "", c.shape.label()) if p)


def progress_line(rep: CaseReport) -> str:
    what = case_title(rep.case)
    detail = f" — {rep.detail}" if rep.detail else ""
    return f"[{rep.index:>2}/{rep.total}] {what} R{rep.ranks}: {rep.status.label} in {rep.wall_s:.2f} s{detail}"


TABLE_HEADER = ("operator", "impl", "mode", "shape", "dtype", "R", "result", "max|err|", "ulp", "wall s",
                "tiles", "waits", "puts", "bytes", "hidden", "note")


def reproduced(rep: CaseReport) -> str:
    """The expected hazards this run reported (or DEADLOCK)."""
    seen = {h for r in rep.results for h in r.hazards}
    names = sorted(rep.case.expect.hazard_names & seen)
    if any(r.raised is Raised.DEADLOCK for r in rep.results):
        names.append("DEADLOCK")
    return ", ".join(names) or rep.case.expect.label()


def numbered_notes(reports: Sequence[CaseReport]) -> dict[str, int]:
    """Every distinct launch note of the run, numbered from 1 in order of first appearance."""
    numbers: dict[str, int] = {}
    for rep in reports:
        for note in rep.notes:
            numbers.setdefault(note, len(numbers) + 1)
    return numbers


def table_rows(reports: Sequence[CaseReport]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    numbers = numbered_notes(reports)
    for rep in reports:
        c, s = rep.case, rep.stats
        result = rep.status.label
        if rep.status is Status.EXPECTED:
            result = f"EXPECTED {reproduced(rep)}"
        # no event at all: the operator offers no observers hook, so its counts are unknown, not zero
        counts = ((str(s.tiles), str(s.waits), str(s.puts), _fmt_bytes(s.bytes_moved)) if s.events
                  else ("-", "-", "-", "-"))
        rows.append((c.op, c.mode.impl_name() or "-", c.mode.label(), c.shape.label(),
                     c.dtype.value if c.dtype else "-", str(rep.ranks), result, _fmt_err(rep.max_abs),
                     "-" if rep.max_ulp is None else str(rep.max_ulp), f"{rep.wall_s:.2f}", *counts, _fmt_share(s),
                     " ".join(f"[{numbers[n]}]" for n in rep.notes)))
    return rows


def note_lines(reports: Sequence[CaseReport]) -> list[str]:
    """The notes the table's last column points to (nothing when no case has one), after a blank line."""
    numbers = numbered_notes(reports)
    if not numbers:
        return []
    lines = ["", "notes:"]
    for note, n in numbers.items():
        cases = [case_title(rep.case) for rep in reports if note in rep.notes]
        lines.append(f"  [{n}] {note} ({len(cases)} case(s): {'; '.join(cases)})")
    return lines


def format_table(reports: Sequence[CaseReport]) -> str:
    rows = [TABLE_HEADER, *table_rows(reports)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(TABLE_HEADER))]
    right = {5, 7, 8, 9, 10, 11, 12, 13, 14}
    lines = []
    for n, row in enumerate(rows):
        cells = [cell.rjust(w) if i in right else cell.ljust(w)
                 for i, (cell, w) in enumerate(zip(row, widths, strict=True))]
        lines.append("  ".join(cells).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def summary_line(reports: Sequence[CaseReport], not_applicable: int = 0, ranks: int = 0) -> str:
    """"N case(s): P pass, E expected[, X not applicable at R = r]; exit code c" (N counts both)."""
    counts: dict[str, int] = {}
    for r in reports:
        counts[r.status.label] = counts.get(r.status.label, 0) + 1
    parts = [f"{n} {label.lower()}" for label, n in counts.items()]
    if not_applicable:
        parts.append(f"{not_applicable} not applicable at R = {ranks}")
    return f"{len(reports) + not_applicable} case(s): {', '.join(parts)}; exit code {exit_code(reports)}"


# Messages that differ only in the rank, core or seconds they name are printed once.
_VARYING_RE = re.compile(r"\b(rank |AIC|AIV)\d+|\d+\.\d+ s\b")


def rank_ranges(ranks: Sequence[int]) -> str:
    """[0, 1, 2, 3, 5] -> "0-3,5"."""
    out: list[str] = []
    rs = sorted(set(ranks))
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        out.append(str(rs[i]) if i == j else f"{rs[i]}-{rs[j]}")
        i = j + 1
    return ",".join(out)


def error_lines(rep: CaseReport, body_lines: int = 12) -> list[str]:
    """Every rank's errors, once: hazards by name (count, ranks, one example), other errors grouped by
    their first line (ranks, cores and times merged), the first group with up to `body_lines` lines of
    its details (none for an expected outcome)."""
    if rep.status is Status.EXPECTED:
        body_lines = 0
    out: list[str] = []
    hz: dict[str, tuple[int, list[int], str]] = {}
    for r in rep.results:
        for name, count, example in r.hazard_reports:
            total, ranks, first = hz.get(name, (0, [], example))
            hz[name] = (total + count, [*ranks, r.rank], first)
    for name, (total, ranks, example) in sorted(hz.items()):
        out.append(f"    {name}: {total} report(s) on rank(s) {rank_ranges(ranks)}; e.g. {example}")
    groups: dict[str, tuple[str, list[int]]] = {}
    for r in rep.results:
        if r.raised in (Raised.NOTHING, Raised.HAZARD) or not r.message:
            continue
        key = _VARYING_RE.sub("#", r.message.splitlines()[0])
        groups.setdefault(key, (r.message, []))[1].append(r.rank)
    # The details shown are the cross-rank deadlock report's, when a rank holds one, else the first group's.
    detailed = next((i for i, (msg, _) in enumerate(groups.values()) if "\nDEADLOCK report of rank " in msg), 0)
    for n, (msg, ranks) in enumerate(groups.values()):
        lines = msg.splitlines() or [""]
        out.append(f"    {'rank' if len(ranks) == 1 else 'ranks'} {rank_ranges(ranks)}: {lines[0]}")
        body = body_lines if n == detailed else 0
        out += [f"      {ln}" for ln in lines[1:body + 1]]
        if body and len(lines) > body + 1:
            out.append(f"      ... {len(lines) - body - 1} more line(s)")
    return out


def format_listing(registry: Registry) -> str:
    """`--list`: every registered operator, whether it is available, its modes and its hazard showcase."""
    lines = ["operators (shapes are m x k x n; modes: impl, localMatmul, wait order, HCCL server):"]
    for spec in registry.specs():
        lines.append(f"  {spec.name}: {spec.summary}")
        options = [f for f in spec.mode_type.field_names()]
        lines.append(f"    modes: {spec.mode_type.__name__}({', '.join(options)})")
        flags = [option_name(name) + (" (mode)" if opt.mode else "")
                 for name, opt, _ in spec.options.declared()]
        if flags:
            lines.append(f"    options: {spec.options.__name__}({', '.join(flags)})")
        lines.append(f"    shape: default {spec.default_shape.label()}, --quick {spec.quick_shape.label()}"
                     + (f"; dtypes {', '.join(d.value for d in spec.dtypes)}" if spec.dtypes else ""))
        if note := api_note(spec.name):
            lines.append(f"    note: {note}")
        if any(m != spec.mode_type() for m in spec.modes):
            lines.append("    default suite:")
            lines += [f"      {_mode_text(m)}" for m in spec.modes]
        if spec.hazard_modes:
            lines.append("    --hazards showcase (each must be reported):")
            for m in spec.hazard_modes:
                rule = next((r for r in spec.rules if r.matches(m)), None)
                why_text = f"  ({rule.why})" if rule and rule.why else ""
                lines.append(f"      {_mode_text(m)} -> {spec.expectation(m).label()}{why_text}")
    return "\n".join(lines)


def _mode_text(m: OperatorMode) -> str:
    return f"{m.impl_name() or '-'} {m.label()}"
