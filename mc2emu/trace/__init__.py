"""Observers that turn the device's event stream into traces (Chrome Trace Event JSON for Perfetto)."""

from mc2emu.trace.chrome_trace import (
    DEFAULT_KINDS,
    ChromeTraceRecorder,
    ScenarioSpan,
    clock_offset_ns,
    merge_traces,
    write_trace,
)

__all__ = ["DEFAULT_KINDS", "ChromeTraceRecorder", "ScenarioSpan", "clock_offset_ns", "merge_traces", "write_trace"]
