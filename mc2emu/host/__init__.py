"""The host harness (above tiling, below ops): the options every operator call takes (`call_options.py`) and
one kernel launch on this rank with its device, observers, communication world, checkers and teardown
(`harness.py`); a user's own kernel run with every check (`kernel_run.py`)."""

from mc2emu.host.call_options import CallOptions, call_options
from mc2emu.host.harness import HarnessLaunch, LaunchHarness, left_behind_windows
from mc2emu.host.kernel_run import KernelResult, KernelRun, run_kernel

__all__ = ["CallOptions", "HarnessLaunch", "KernelResult", "KernelRun", "LaunchHarness", "call_options",
           "left_behind_windows", "run_kernel"]
