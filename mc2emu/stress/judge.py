"""Judging the fault-injection stress: one job's rank results -> an `Outcome` with its `Verdict`, and the
`Tally` of many outcomes (the summary and the exit status); `parse_lines` reads a job's stdout (pure: no MPI).
The scenarios are `mc2emu.stress.scenario`."""

from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from mc2emu.stress.scenario import AG_VARIANTS, DEADLOCK, LINE_KEY, Injection, Scenario, expected_diagnosis


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


