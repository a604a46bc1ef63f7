"""A structural checker of Chrome Trace Event JSON, shared by the trace tests (unit and via the CLI).

Checks what Perfetto's JSON importer relies on: required fields per phase, numeric time stamps,
B/E events matched per (pid, tid), "X" spans properly nested per (pid, tid), and every flow id with
exactly one start ("s") and one finish ("f"), each inside a slice of its own thread.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

KNOWN_PHASES = {"X", "B", "E", "i", "I", "s", "t", "f", "M", "C"}
# Rounding of µs time stamps to 3 decimals: spans may appear to overlap by this much.
EPS_US = 0.002


def check_chrome_trace(trace: dict[str, Any]) -> dict[str, int]:
    """Raise AssertionError on the first structural problem; return counts per phase."""
    assert isinstance(trace, dict) and isinstance(trace.get("traceEvents"), list), "no traceEvents list"
    counts: dict[str, int] = defaultdict(int)
    open_be: dict[tuple[int, int], list[str]] = defaultdict(list)
    slices: dict[tuple[int, int], list[tuple[float, float]]] = defaultdict(list)
    flows: dict[Any, dict[str, tuple[int, int, float]]] = defaultdict(dict)
    for e in trace["traceEvents"]:
        ph = e.get("ph")
        assert ph in KNOWN_PHASES, f"unknown phase {ph!r} in {e}"
        counts[ph] += 1
        assert isinstance(e.get("pid"), int) and isinstance(e.get("tid"), int), f"pid/tid not ints: {e}"
        if ph == "M":
            assert e["name"] in {"process_name", "thread_name", "process_sort_index", "thread_sort_index"}, e
            continue
        assert isinstance(e.get("ts"), (int, float)) and e["ts"] >= 0, f"bad ts: {e}"
        key = (e["pid"], e["tid"])
        if ph == "X":
            assert isinstance(e.get("dur"), (int, float)) and e["dur"] >= 0, f"bad dur: {e}"
            assert isinstance(e.get("name"), str), e
            slices[key].append((e["ts"], e["ts"] + e["dur"]))
        elif ph == "B":
            open_be[key].append(e.get("name", ""))
        elif ph == "E":
            assert open_be[key], f"E without B on {key}: {e}"
            open_be[key].pop()
        elif ph in {"s", "f"}:
            assert "id" in e, f"flow event without id: {e}"
            assert ph not in flows[e["id"]], f"flow id {e['id']} has two '{ph}' events"
            flows[e["id"]][ph] = (e["pid"], e["tid"], e["ts"])
    for key, stack in open_be.items():
        assert not stack, f"B without E on {key}: {stack}"
    for key, spans in slices.items():
        stack: list[tuple[float, float]] = []
        for a, b in sorted(spans, key=lambda s: (s[0], -(s[1] - s[0]))):
            while stack and stack[-1][1] <= a + EPS_US:
                stack.pop()
            assert not stack or b <= stack[-1][1] + EPS_US, f"spans {stack[-1]} and {(a, b)} overlap on {key}"
            stack.append((a, b))
    for fid, ends in flows.items():
        assert set(ends) == {"s", "f"}, f"flow {fid} has {sorted(ends)}"
        for pid, tid, ts in ends.values():
            assert any(a - EPS_US <= ts <= b + EPS_US for a, b in slices[(pid, tid)]), \
                f"flow {fid} end at {ts} on {(pid, tid)} is inside no slice"
    return dict(counts)
