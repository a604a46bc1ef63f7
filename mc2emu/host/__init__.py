"""The host harness (above tiling, below ops): the options every operator call takes (`call_options.py`) and
one kernel launch on this rank with its device, observers, communication world, checkers and teardown
(`harness.py`)."""

from mc2emu.host.call_options import CallOptions, call_options
from mc2emu.host.harness import HarnessLaunch, LaunchHarness, left_behind_windows

__all__ = ["CallOptions", "HarnessLaunch", "LaunchHarness", "call_options", "left_behind_windows"]
