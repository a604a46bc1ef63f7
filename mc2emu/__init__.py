"""mc2emu — emulate Huawei Ascend MC2 kernels (MX-quantized matmul fused with all-to-all / all-gather)
on ordinary CPUs, one MPI rank per NPU, faithfully and observably.

Layers, lowest first (lower layers never import higher ones): numerics -> runtime -> comm -> blaze ->
apace -> tiling -> ops -> check / trace -> run.
"""

__version__ = "0.1.0"
