"""mc2emu — emulate Huawei Ascend MC2 kernels (MX-quantized matmul fused with all-to-all / all-gather)
on ordinary CPUs, one MPI rank per NPU, faithfully and observably.

Layers, lowest first (lower layers never import higher ones; the import-linter contract in pyproject.toml,
docs/architecture.md): arch -> numerics -> cases -> runtime -> comm -> blaze -> tiling -> apace -> check |
trace -> host -> ops -> predict | stress -> launcher -> cli -> run.
"""

__version__ = "0.1.0"
