"""The host harness (above tiling, below ops): run one kernel launch on this rank with its device,
observers, communication world, checkers and teardown (`harness.py`)."""

from mc2emu.host.harness import CallOptions, HarnessLaunch, LaunchHarness, left_behind_windows

__all__ = ["CallOptions", "HarnessLaunch", "LaunchHarness", "left_behind_windows"]
