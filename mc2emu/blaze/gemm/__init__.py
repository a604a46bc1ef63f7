"""Blaze GEMM (ops-tensor `include/blaze/gemm`): policies, block components, tiles, kernels.

Import map (one component per module, named after the header it emulates):

- `common_utils`: ProblemShape / BlockShape / BlockCoord, MNK_* and IDX_* slots, CeilDiv / Align*;
- `dispatch_policy`: MatmulWithScaleMx, NONE_FULL_LOAD_MODE, A_FULL_LOAD_MODE;
- `block.block_mmad_mx`: BlockMmadMx (template: BlockMmadMxType), Params, L1Params;
- `block.block_scheduler_qbmm`: BlockSchedulerQuantBatchMatmulV3 (= BlockSchedulerQbmm), its Params;
- `tile.tile_mmad_mx`: MX dequantization of an L1 chunk;
- `kernel.kernel_qbmm_mx`: GemmUniversalQbmmMx, QBMMTiling, QbmmMxParams, kernel_qbmm_mx.
"""
