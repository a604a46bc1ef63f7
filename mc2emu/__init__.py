"""mc2emu — emulate Huawei Ascend MC2 kernels (MX-quantized matmul fused with all-to-all / all-gather)
on ordinary CPUs, one MPI rank per NPU, faithfully and observably.

Layers, lowest first (lower layers never import higher ones; the import-linter contract in pyproject.toml,
docs/architecture.md): arch -> numerics -> cases -> runtime -> comm -> blaze -> tiling -> apace -> check |
trace -> host -> ops -> predict | stress | testing -> launcher -> cli -> run.

`mc2emu.run_kernel` / `mc2emu.KernelRun` (from `mc2emu.host.kernel_run`) run a user's own kernel with every
check; `mc2emu.Communicator` (from `mc2emu.comm.communicator`) is the persistent communicator of a layer loop;
`mc2emu.testing` is the pytest kit for users' tests (a pytest plugin).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from mc2emu.comm.communicator import Communicator
    from mc2emu.host.kernel_run import KernelResult, KernelRun, run_kernel
    from mc2emu.runtime.gm import MemRole

__all__ = ["Communicator", "KernelResult", "KernelRun", "MemRole", "run_kernel"]

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    """`mc2emu.run_kernel`, `mc2emu.KernelRun`, `mc2emu.KernelResult`, `mc2emu.MemRole`, `mc2emu.Communicator`:
    loaded on first use (importing the package alone loads no layer)."""
    if name in ("run_kernel", "KernelRun", "KernelResult"):
        from mc2emu.host import kernel_run

        return getattr(kernel_run, name)
    if name == "Communicator":
        from mc2emu.comm import communicator

        return communicator.Communicator
    if name == "MemRole":
        from mc2emu.runtime import gm

        return gm.MemRole
    raise AttributeError(f"module 'mc2emu' has no attribute {name!r}")
