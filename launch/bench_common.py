"""What the benches share: CPU and wall timing, the golden's page-fault warning, alternating side-by-side runs,
and the ULP figure of an output against its golden (`mc2emu.numerics.compare`, the one ULP distance).

Imported by the bench scripts of this folder (run as scripts, so this folder is on `sys.path`); it sets no
environment: each bench pins its BLAS threads before numpy loads.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable

import ml_dtypes
import numpy as np

from mc2emu.numerics.compare import ulp_distance

# The golden's system share above which it ran slowed by page faults. Its large temporaries are huge pages
# (numpy madvises them; THP "madvise"): in a fresh process with free huge pages it spends 13-18 % (AG) or 22-25 %
# (QMRS) of its CPU in the kernel; once they are scarce (after the emulator's call in the same process, or another
# job's memory) its faults compact memory and it spends 31-50 % there, at 1.2-1.7x its best CPU
# (docs/performance.md, "Method").
SLOW_GOLDEN_SYSTEM_SHARE = 0.30


def cpu_s() -> tuple[float, float]:
    """(CPU seconds, of which system) of this process, every thread: the cost under load, not the wait. The
    system share is mostly page faults of fresh memory (the golden's, see SLOW_GOLDEN_SYSTEM_SHARE, vary most
    between runs)."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime, ru.ru_stime


def golden_faults_note(golden_cpu: float, golden_system: float) -> str:
    """A warning line when the fastest golden run still spent more than SLOW_GOLDEN_SYSTEM_SHARE of its CPU in
    the kernel: its faults were slow (huge pages scarce), so both ratios flatter the emulator."""
    if golden_cpu <= 0 or golden_system / golden_cpu <= SLOW_GOLDEN_SYSTEM_SHARE:
        return ""
    return (f"  note: the golden spent {100 * golden_system / golden_cpu:.0f} % of its CPU on page faults (at its "
            f"best 13-25 %): huge pages were scarce, the ratios above flatter the emulator; rerun on a quieter "
            f"machine")


def timed(fn: Callable[[], object]) -> tuple[float, float, object]:
    """(wall seconds, process CPU seconds, result) of one call."""
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - w0, time.process_time() - c0, out


def side_by_side(emu: Callable[[], object], gold: Callable[[], object], repeat: int) -> dict[str, tuple]:
    """Alternate emulator and golden runs (after one warm-up each) so that load on the machine hits both
    alike; keep each side's best wall time and the CPU time of that run."""
    emu()
    gold()
    best: dict[str, tuple] = {"emulator": (float("inf"), 0.0, None), "golden": (float("inf"), 0.0, None)}
    for _ in range(repeat):
        for name, fn in (("emulator", emu), ("golden", gold)):
            w, c, out = timed(fn)
            if w < best[name][0]:
                best[name] = (w, c, out)
    return best


def bf16_ulp(out: object, golden: object) -> int:
    """The largest bf16 ULP distance of `out` from `golden` (both cast to bf16; +-0 are 0 apart, a sign
    crossing counts every value between, NaN by the rule of `mc2emu.numerics.compare`)."""
    return ulp_distance(np.asarray(out), np.asarray(golden), ml_dtypes.bfloat16)
