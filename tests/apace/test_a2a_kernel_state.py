"""QuantMatmulMxKernel's members as the source leaves them (ops-transformer
`mc2/common/op_kernel/apace/kernel/all_to_all_quant_matmul/quant_matmul_mx_kernel.h`, libochao-huawei
commit bb298b1c5): `Init` returns first on an AIV (isAtomicAdd_, isBias_ and the GM addresses stay unset)
and, on an AIC, resets `needUpdateTail_` (the impls run the LOCAL and REMOTE passes on one kernel)."""

import numpy as np

from mc2emu.apace.comm_policy import UdmaCommWaitPolicy
from mc2emu.apace.quant_matmul_mx_kernel import (
    UNSET_GM_ADDR,
    BiasMode,
    LocalParams,
    MatmulMode,
    Params,
    QuantMatmulMxKernel,
)
from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx
from mc2emu.blaze.gemm.block.block_mmad_mx import Params as BlockMmadParams
from mc2emu.blaze.gemm.block.block_scheduler_qbmm import BlockSchedulerQuantBatchMatmulV3
from mc2emu.blaze.gemm.dispatch_policy import NONE_FULL_LOAD_MODE, MatmulWithScaleMx
from mc2emu.blaze.gemm.kernel.kernel_qbmm_mx import QBMMTiling
from mc2emu.blaze.tensor_api.layout import DNExtLayoutPtn, NDExtLayoutPtn
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.runtime import Device


def _params(dev, mode, local_matmul):
    a, sa, b, sb, c, bias, la, lsa = (dev.gm.alloc(64, name) for name in
                                      ("win_a", "win_sa", "b", "sb", "c", "bias", "a", "sa"))
    mp = BlockMmadParams(aGmAddr=a, bGmAddr=b, cGmAddr=c, biasGmAddr=bias, scaleAGmAddr=sa, scaleBGmAddr=sb)
    lp = LocalParams(0, 2, 16, la, lsa, local_matmul, 1, mode, 16)
    q = QBMMTiling(baseM=16, baseN=16, baseK=64, dbL0C=1, isBias=BiasMode.BIAS_ENABLED)
    return Params((16, 16, 64, 1), mp, None, None, q, lp)


def test_init_resets_need_update_tail_on_aic_and_leaves_the_aiv_alone():
    dev = Device(timeout=10)
    BlockMmad = BlockMmadMx.template(MatmulWithScaleMx(NONE_FULL_LOAD_MODE, False), ElemFormat.E4M3, NDExtLayoutPtn,
                                     ElemFormat.E4M3, DNExtLayoutPtn, OutDtype.BF16)
    Scheduler = BlockSchedulerQuantBatchMatmulV3.template(NONE_FULL_LOAD_MODE, NDExtLayoutPtn, DNExtLayoutPtn,
                                                          ElemFormat.E4M3)
    params = _params(dev, MatmulMode.REMOTE, 1)

    def kernel(ctx):
        k = QuantMatmulMxKernel(ctx, BlockMmad, Scheduler, UdmaCommWaitPolicy(ctx))
        k.needUpdateTail_ = True            # as a previous pass on this kernel may have left it
        ran = k.Init(params)
        return (ran, k.needUpdateTail_, k.isAtomicAdd_, k.isBias_, k.aGmAddr_ is UNSET_GM_ADDR,
                k.cGmAddr_ == params.mmadParams.cGmAddr)

    res = dev.launch(kernel, 1, "MIX_AIC_1_1")
    assert res.returns["AIC0"] == (True, False, True, True, False, True)
    assert res.returns["AIV0"] == (False, True, False, False, True, False)
    assert not dev.hazards.take()
    np.testing.assert_array_equal(np.zeros(0, np.uint8), UNSET_GM_ADDR.alloc.buf)
