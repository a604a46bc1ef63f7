"""TilingGMM: the GroupedMatmul host tiling entry, as far as the A5 MX path goes.

Emulates ops-transformer `gmm/grouped_matmul/op_host/op_tiling/grouped_matmul_tiling.cpp` `TilingGMM`
(cannmirror/ops-transformer master 25fb6b92): on DAV_3510, x FP4 / INT4, or x and weight both one byte wide,
select the quant registry {0: GroupedQmmBasicApiTiling, 1: GroupedQmmTiling}. Template 0's
`TilingBaseClass::DoTiling` order is kept:

    GetShapeAttrsInfo -> GetPlatformInfo -> IsCapable -> DoOpTiling -> DoLibApiTiling -> GetWorkspaceSize
    -> PostTiling (block dim = aicNum, the serialized GMMQuantBasicApiTilingData) -> GetTilingKey

Only template 0 (MX) is emulated: an input it is not capable of (non-E8M0 scales, INT8 / HIFLOAT8 x) is
refused, as are the non-quant and weight-quant branches of TilingGMM.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from mc2emu.arch.errors import ConstraintError
from mc2emu.tiling.grouped_matmul_tiling_context import GeDataType, GetSizeByDataType, GmmTilingContext
from mc2emu.tiling.grouped_quant_basic_api_matmul_tiling import (
    DoLibApiTiling,
    DoOpTiling,
    GMMQuantBasicApiTilingData,
    GMMQuantParams,
    IsCapable,
    QuantBasicApiMMTiling,
)
from mc2emu.tiling.grouped_quant_matmul_shape_attrs import GetShapeAttrsInfo
from mc2emu.tiling.grouped_quant_matmul_tiling import GetTilingKey, GQmmInputInfo

SYS_WORKSPACE_SIZE = 16 * 1024 * 1024  # GetWorkspaceSize: workspaces[0]


@dataclass(frozen=True)
class GmmTilingResult:
    """What TilingGMM leaves in the context: tiling data, tiling key, block dim, workspace; plus the analyzed
    inputs (`inputParams_`) for debugging."""

    tilingData: GMMQuantBasicApiTilingData
    tilingKey: int
    blockDim: int
    workspaceSize: int
    inputParams: GQmmInputInfo

    @property
    def gmmQuantParams(self) -> GMMQuantParams:
        return self.tilingData.gmmQuantParams

    @property
    def mmTilingData(self) -> QuantBasicApiMMTiling:
        return self.tilingData.mmTilingData

    def debug_fields(self) -> dict[str, object]:
        """Seed 002 §15's debugging list, with the source's names."""
        inp, mm = self.inputParams, self.tilingData.mmTilingData
        return {
            "npuArch": "DAV_3510", "xDtype": inp.aDtype.name, "weightDtype": inp.bDtype.name,
            "yDtype": inp.cDtype.name, "scaleDtype": inp.scaleDtype.name,
            "perTokenScaleDtype": inp.perTokenScaleDtype.name, "weightFormat": inp.bFormat,
            "transA": inp.transA, "transB": inp.transB, "groupType": inp.groupType,
            "groupListType": inp.groupListType, "groupNum": inp.groupNum, "aQuantMode": inp.aQuantMode.name,
            "bQuantMode": inp.bQuantMode.name, "kernelType": inp.kernelType, "M": mm.m, "N": mm.n, "K": mm.k,
            "baseM": mm.baseM, "baseN": mm.baseN, "baseK": mm.baseK, "depthA1": mm.depthA1, "depthB1": mm.depthB1,
            "stepKa": mm.stepKa, "stepKb": mm.stepKb, "kAL1": mm.kAL1, "kBL1": mm.kBL1,
            "scaleFactorA": mm.scaleFactorA, "scaleFactorB": mm.scaleFactorB, "scaleKAL1": mm.scaleKAL1,
            "scaleKBL1": mm.scaleKBL1, "isBias": mm.isBias, "dbL0C": mm.dbL0C, "l1BufferStage": mm.l1BufferStage,
            "tilingKey": self.tilingKey, "blockDim": self.blockDim,
        }

    def as_dict(self) -> dict[str, object]:
        return {**self.tilingData.as_dict(), "tilingKey": self.tilingKey, "blockDim": self.blockDim,
                "workspaceSize": self.workspaceSize, "inputParams": {
                    k: (v.name if hasattr(v, "name") else v) for k, v in asdict(self.inputParams).items()}}


def GroupedQmmBasicApiTilingDoTiling(ctx: GmmTilingContext) -> GmmTilingResult:
    """`TilingBaseClass::DoTiling` for template 0."""
    inp = GetShapeAttrsInfo(ctx)
    info = ctx.compile_info  # GetPlatformInfo
    if not IsCapable(inp):
        raise ConstraintError("TilingGMM: template 0 (GroupedQmmBasicApiTiling) only",
                              f"x {inp.aDtype.name} with scale {inp.scaleDtype.name} needs template 1 "
                              "(GroupedQmmTiling: per-tensor / per-channel / per-token / per-block quant), "
                              "which is not emulated; MX needs FLOAT8_E8M0 scales and FP8 / FP4 x")
    params = DoOpTiling(inp)
    mm = DoLibApiTiling(inp, info.l1Size, info.l0CSize)
    return GmmTilingResult(GMMQuantBasicApiTilingData(params, mm), GetTilingKey(inp), info.aicNum,
                           SYS_WORKSPACE_SIZE, inp)


def TilingGMM(ctx: GmmTilingContext) -> GmmTilingResult:
    if ctx.compile_info.npuArch != "DAV_3510":
        raise ConstraintError("TilingGMM: npuArch", f"only DAV_3510 is emulated, got {ctx.compile_info.npuArch}")
    x, w = ctx.x_dtype, ctx.weight_dtype
    isQuant = (x in (GeDataType.DT_FLOAT4_E2M1, GeDataType.DT_INT4, GeDataType.DT_FLOAT4_E1M2)
               or (GetSizeByDataType(x) == 1 and GetSizeByDataType(w) == 1))
    if not isQuant:
        raise ConstraintError("TilingGMM: quant registry only", f"x {x.name} / weight {w.name}: the weight-quant "
                              "and non-quant GroupedMatmul tilings are not emulated")
    return GroupedQmmBasicApiTilingDoTiling(ctx)
