"""Apace MC2 layer (ops-transformer `mc2/common/op_kernel/apace`): the fused communication + matmul kernels, their
orchestration impls (UDMA / URMA puts, HCCL), comm components and fragment tensors. Above blaze; below host / ops."""
