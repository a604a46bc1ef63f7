"""The lowest layer of mc2emu, below numerics and runtime: what the emulated NPU is (the platform table)
and the error base every layer raises (`Mc2EmuError`, `ConstraintError` and the CLI exit codes).

The host tiling depends on these two and on numerics only, so it stays pure functions of shapes and
platform; the runtime builds the device from the same table.
"""

from mc2emu.arch.errors import EXIT_BAD_INPUT, EXIT_HAZARD, EXIT_MISMATCH, ConstraintError, Mc2EmuError
from mc2emu.arch.keywords import parse_enum
from mc2emu.arch.platform import DAV_3510, KIB, CoreType, FlagMode, Pipe, PlatformSpec

__all__ = [
    "DAV_3510",
    "EXIT_BAD_INPUT",
    "EXIT_HAZARD",
    "EXIT_MISMATCH",
    "KIB",
    "ConstraintError",
    "CoreType",
    "FlagMode",
    "Mc2EmuError",
    "Pipe",
    "PlatformSpec",
    "parse_enum",
]
