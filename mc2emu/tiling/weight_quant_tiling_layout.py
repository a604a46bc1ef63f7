"""The consumers' layouts of a weight-quant tiling and the overlaps inferred from them (seed 001).

`l1_layout` is BlockMmad::Init's L1 map (`block/weight_quant_matmul_block_mmad.h`), `ub_layout` the AIV's UB
halves (`kernel/weight_quant_matmul_kernel.h`), `ub_bytes_seed_formula` the tiling's own §3 bound;
`layout_findings` checks them against the platform and names each overlap (`LayoutFinding`), the ones the
source's tiling leaves open included (see `weight_quant_tiling_swat.py`'s docstring).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from mc2emu.numerics.int_math import Align
from mc2emu.tiling.weight_quant_tiling_swat import (
    BASIC_BLOCK_SIZE_16,
    BLOCK_MMAD_BIAS_BYTES,
    DATA_SIZE_BF16,
    DATA_SIZE_FP32,
    DATA_SIZE_INT8,
    L1_BUFFER_NUM,
    UB_ALIGN_64,
    WeightQuantMatmulTilingData,
    WeightQuantPlatformInfo,
)


@dataclass(frozen=True)
class LayoutFinding:
    """One layout problem of a tiling: the rule it breaks, a message with the numbers, the raw numbers."""

    rule: str
    message: str
    details: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))


FINDING_A_OVER_BIAS = "upper A buffer over bias"
FINDING_UB_SEED = "UB over the tiling's own bound (seed §3)"
FINDING_UB_PADDING = "UB half over its bound with bOut's padding"
FINDING_UB_USABLE = "UB upper half past the usable UB"
FINDING_B_FRACTAL = "B_dequant fractal over its L1 buffer"
FINDING_A_FRACTAL = "A fractal over its L1 buffer"
FINDING_BIAS_BYTES = "bias bytes differ from BlockMmad's float"


@dataclass(frozen=True)
class L1Layout:
    """BlockMmad::Init: l1BufferBOffset_[i] = i * L1 / 2, l1BufferAOffset_[i] = that + bL1OneBuffer_,
    biasL1Offset_ = L1 - Align64(baseN * sizeof(float)) when hasBias (byte offsets)."""

    bL1OneBuffer: int
    aL1OneBuffer: int
    l1HalfSize: int
    bOffsets: tuple[int, int]
    aOffsets: tuple[int, int]
    biasL1Offset: int | None
    l1Size: int


@dataclass(frozen=True)
class UbLayout:
    """WeightQuantMatmulPrologue::Init: per half [bIn | bOut | scale | offset] at half * TOTAL_UB_SIZE / 2."""

    bInOneBuffer: int
    bOutOneBuffer: int
    scaleBuffer: int
    offsetBuffer: int
    halfUbSize: int

    @property
    def halfUsed(self) -> int:
        return self.bInOneBuffer + self.bOutOneBuffer + self.scaleBuffer + self.offsetBuffer


def l1_layout(td: WeightQuantMatmulTilingData, plat: WeightQuantPlatformInfo,
              aElemBytes: int = DATA_SIZE_BF16, dequantBElemBytes: int = DATA_SIZE_BF16) -> L1Layout:
    b_one = td.baseN * td.kL1 * dequantBElemBytes
    a_one = td.baseM * td.kL1 * aElemBytes
    half = plat.l1Size >> 1
    b_off = tuple(i * half for i in range(L1_BUFFER_NUM))
    a_off = tuple(o + b_one for o in b_off)
    bias = plat.l1Size - Align(td.baseN * BLOCK_MMAD_BIAS_BYTES, UB_ALIGN_64) if td.hasBias else None
    return L1Layout(b_one, a_one, half, b_off, a_off, bias, plat.l1Size)  # type: ignore[arg-type]


def ub_layout(td: WeightQuantMatmulTilingData, plat: WeightQuantPlatformInfo,
              weightElemBytes: int = DATA_SIZE_INT8, dequantBElemBytes: int = DATA_SIZE_BF16) -> UbLayout:
    b_in = td.kUbSize * td.nUbSize * weightElemBytes
    if td.transB:
        b_out = td.kUbSize * (td.nUbSize + 1) * dequantBElemBytes
    else:
        b_out = (td.kUbSize + 1) * td.nUbSize * dequantBElemBytes
    scale = td.nUbSize * dequantBElemBytes
    offset = td.nUbSize * dequantBElemBytes if td.hasOffset else 0
    return UbLayout(b_in, b_out, scale, offset, plat.totalUbSize >> 1)


def ub_bytes_seed_formula(td: WeightQuantMatmulTilingData, weightElemBytes: int = DATA_SIZE_INT8,
                          dequantBElemBytes: int = DATA_SIZE_BF16) -> int:
    """Seed §3 (what the tiling bounds): 2 (w + d) kUb nUb + 2 d nUb (1 + hasOffset)."""
    return (2 * (weightElemBytes + dequantBElemBytes) * td.kUbSize * td.nUbSize
            + 2 * dequantBElemBytes * td.nUbSize * (1 + td.hasOffset))


def layout_findings(td: WeightQuantMatmulTilingData, plat: WeightQuantPlatformInfo | None = None, *,
                    weightElemBytes: int = DATA_SIZE_INT8, dequantBElemBytes: int = DATA_SIZE_BF16,
                    aElemBytes: int = DATA_SIZE_BF16, biasElemBytes: int = DATA_SIZE_FP32) -> list[LayoutFinding]:
    """Every way the consumers' L1 and UB layouts for this tiling overlap or overflow (empty: none)."""
    plat = WeightQuantPlatformInfo.from_platform() if plat is None else plat
    out: list[LayoutFinding] = []
    l1 = l1_layout(td, plat, aElemBytes, dequantBElemBytes)
    a1_end = l1.aOffsets[1] + l1.aL1OneBuffer
    if l1.biasL1Offset is not None and a1_end > l1.biasL1Offset:
        out.append(LayoutFinding(
            FINDING_A_OVER_BIAS,
            f"A1 ends at L1 byte {a1_end} but the bias starts at {l1.biasL1Offset}: the AIC's A copy of "
            f"K-L1 chunk 1, 3, ... overwrites the first {a1_end - l1.biasL1Offset} bias bytes (the tiling "
            f"bounds 2 * (A + B) <= L1 - bias, the layout needs L1 / 2 + A + B <= L1 - bias)",
            MappingProxyType({"a1_end": a1_end, "bias_offset": l1.biasL1Offset, "kL1": td.kL1})))
    if td.hasBias and biasElemBytes != BLOCK_MMAD_BIAS_BYTES:
        out.append(LayoutFinding(
            FINDING_BIAS_BYTES,
            f"the tiling reserved bias at {biasElemBytes} B per element but BlockMmad's BiasType is float "
            f"({BLOCK_MMAD_BIAS_BYTES} B) and reserves Align64(baseN * 4) (seed pitfall 3)",
            MappingProxyType({"biasElemBytes": biasElemBytes})))
    k_frac = Align(td.kL1, BASIC_BLOCK_SIZE_16)
    b_extent = k_frac * Align(td.nL1, BASIC_BLOCK_SIZE_16) * dequantBElemBytes
    if b_extent > l1.bL1OneBuffer:
        out.append(LayoutFinding(
            FINDING_B_FRACTAL,
            f"a full K-L1 chunk of B_dequant fills {b_extent} B of 16 x 16 fractals (kL1 {td.kL1} -> {k_frac} "
            f"rows) but bL1OneBuffer_ is {l1.bL1OneBuffer} B: it runs into A's buffer",
            MappingProxyType({"extent": b_extent, "buffer": l1.bL1OneBuffer})))
    a_extent = Align(td.mL1, BASIC_BLOCK_SIZE_16) * k_frac * aElemBytes
    if a_extent > l1.aL1OneBuffer:
        out.append(LayoutFinding(
            FINDING_A_FRACTAL,
            f"a full K-L1 chunk of A fills {a_extent} B of fractals but aL1OneBuffer_ is {l1.aL1OneBuffer} B",
            MappingProxyType({"extent": a_extent, "buffer": l1.aL1OneBuffer})))
    ub = ub_layout(td, plat, weightElemBytes, dequantBElemBytes)
    seed_bytes = ub_bytes_seed_formula(td, weightElemBytes, dequantBElemBytes)
    if seed_bytes > plat.ubSize:
        out.append(LayoutFinding(
            FINDING_UB_SEED,
            f"kUbSize {td.kUbSize} x nUbSize {td.nUbSize} needs {seed_bytes} B by the tiling's own formula but "
            f"UB is {plat.ubSize} B: kL1 = FloorAlign16(2 * kUbSizeMax) can be 16 mod 32, and then AIV1's K "
            f"share kL1 - (kL1 / 32) * 16 = kUbSize exceeds kUbSizeMax",
            MappingProxyType({"seed_bytes": seed_bytes, "ub_size": plat.ubSize})))
    if ub.halfUsed > ub.halfUbSize:
        out.append(LayoutFinding(
            FINDING_UB_PADDING,
            f"one UB half needs {ub.halfUsed} B (bIn {ub.bInOneBuffer} + bOut with +1 bank padding "
            f"{ub.bOutOneBuffer} + scale {ub.scaleBuffer} + offset {ub.offsetBuffer}) but holds "
            f"{ub.halfUbSize} B (the tiling's bound, seed §3: {seed_bytes} B of {plat.ubSize}, leaves the "
            f"padding out): half 0 runs into half 1, half 1 past the UB",
            MappingProxyType({"half_used": ub.halfUsed, "half_size": ub.halfUbSize})))
    upper_end = ub.halfUbSize + ub.halfUsed
    if upper_end > plat.usableUbSize:
        out.append(LayoutFinding(
            FINDING_UB_USABLE,
            f"UB half 1 ends at byte {upper_end}, past the {plat.usableUbSize} B a kernel may use",
            MappingProxyType({"upper_end": upper_end, "usable": plat.usableUbSize})))
    return out
