"""Shared inputs, references and a one-core BlockMmad harness for tests/blaze (no MPI)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import ml_dtypes
import numpy as np

from mc2emu.blaze import (
    DNExtLayoutPtn,
    FrameLayoutFormat,
    L1Params,
    MakeMemPtr,
    MakeTensor,
    MatmulWithScaleMx,
    NDExtLayoutPtn,
    ProblemShape,
    ScaleADNLayoutPtn,
    ScaleANDLayoutPtn,
    ScaleBDNLayoutPtn,
    ScaleBNDLayoutPtn,
)
from mc2emu.blaze.gemm.block.block_mmad_mx import BlockMmadMx
from mc2emu.blaze.tensor_api.tensor import element_dtype
from mc2emu.numerics import (
    ElemFormat,
    encode_elements,
    quantize_mx,
    to_ascend_scale_a,
    to_ascend_scale_b,
)
from mc2emu.numerics.constants import MX_GROUP_SIZE
from mc2emu.numerics.formats import E8M0_DTYPE
from mc2emu.numerics.golden import golden_decode_elements, golden_decode_scales
from mc2emu.runtime import Device, EventRecorder

ST_LOW, ST_HIGH = 1.0, 8.0  # CANN ST elements uniform(1, 8)
AG_SCALE_EXPONENTS = 2  # CANN AG ST scales: 2^0 or 2^1
E8M0_BIAS = 127
SIGNED_SIGMA = 4.0  # spread of the signed random test data before MX quantization


@dataclass
class MxOperands:
    """Stored operands of one MX matmul: x1 (m, k) or (k, m); x2 (k, n) or (n, k); Ascend-layout scales."""

    x1: np.ndarray
    x1_scale: np.ndarray
    x2: np.ndarray
    x2_scale: np.ndarray
    fa: ElemFormat
    fb: ElemFormat
    trans_a: bool
    trans_b: bool
    m: int
    n: int
    k: int
    extra: dict[str, Any] = field(default_factory=dict)


def _codes_storage(codes: np.ndarray, fmt: ElemFormat) -> np.ndarray:
    return codes.view(fmt.storage_dtype)


def st_operands(m: int, n: int, k: int, fa: ElemFormat | str = "e4m3", fb: ElemFormat | str | None = None, *,
                trans_a: bool = False, trans_b: bool = False, seed: int = 42) -> MxOperands:
    """CANN ST style: elements uniform(1, 8) encoded RNE, scales 2^0 / 2^1 (per 32 along K)."""
    fa = ElemFormat.parse(fa)
    fb = fa if fb is None else ElemFormat.parse(fb)
    rng = np.random.default_rng(seed)
    nb = -(-k // MX_GROUP_SIZE)
    a = encode_elements(rng.uniform(ST_LOW, ST_HIGH, (m, k)).astype(np.float32), fa)
    b = encode_elements(rng.uniform(ST_LOW, ST_HIGH, (k, n)).astype(np.float32), fb)
    sa = (rng.integers(0, AG_SCALE_EXPONENTS, (m, nb)) + E8M0_BIAS).astype(np.uint8).view(E8M0_DTYPE)
    sb = (rng.integers(0, AG_SCALE_EXPONENTS, (nb, n)) + E8M0_BIAS).astype(np.uint8).view(E8M0_DTYPE)
    return _pack(a, sa, b, sb, fa, fb, trans_a, trans_b)


def signed_operands(m: int, n: int, k: int, fa: ElemFormat | str = "e4m3", fb: ElemFormat | str | None = None, *,
                    trans_a: bool = False, trans_b: bool = False, seed: int = 7) -> MxOperands:
    """Signed random data, MX-quantized (quantize_mx, OCP rule): realistic cancellation in the sums."""
    fa = ElemFormat.parse(fa)
    fb = fa if fb is None else ElemFormat.parse(fb)
    rng = np.random.default_rng(seed)
    qa = quantize_mx((rng.standard_normal((m, k)) * SIGNED_SIGMA).astype(np.float32), fa, axis=1)
    qb = quantize_mx((rng.standard_normal((k, n)) * SIGNED_SIGMA).astype(np.float32), fb, axis=0)
    return _pack(qa.codes, qa.scale, qb.codes, qb.scale, fa, fb, trans_a, trans_b)


def _pack(a: np.ndarray, sa: np.ndarray, b: np.ndarray, sb: np.ndarray, fa: ElemFormat, fb: ElemFormat,
          trans_a: bool, trans_b: bool) -> MxOperands:
    """a (m, k) codes, sa (m, nb); b (k, n) codes, sb (nb, n) -> stored operands and Ascend scales."""
    m, k = a.shape
    n = b.shape[1]
    a_codes = np.ascontiguousarray(a.view(np.uint8).T if trans_a else a.view(np.uint8))
    b_codes = np.ascontiguousarray(b.view(np.uint8).T if trans_b else b.view(np.uint8))
    x1_scale = to_ascend_scale_a(np.ascontiguousarray(sa.T) if trans_a else sa, trans=trans_a)
    x2_scale = to_ascend_scale_b(np.ascontiguousarray(sb.T) if trans_b else sb, trans=trans_b)
    return MxOperands(_codes_storage(a_codes, fa), x1_scale, _codes_storage(b_codes, fb), x2_scale, fa, fb,
                      trans_a, trans_b, m, n, k, {"a": a.view(np.uint8), "sa": sa, "b": b.view(np.uint8), "sb": sb})


def dequant_logical(ops: MxOperands) -> tuple[np.ndarray, np.ndarray]:
    """float32 dequantized A (m, k) and B (k, n), independently of the code under test: elements through
    ml_dtypes / np.ldexp and scales through np.ldexp (`numerics.golden`), repeated x32 with np.repeat."""
    sa = np.repeat(golden_decode_scales(ops.extra["sa"]), MX_GROUP_SIZE, 1)[:, :ops.k]
    sb = np.repeat(golden_decode_scales(ops.extra["sb"]), MX_GROUP_SIZE, 0)[:ops.k]
    a = golden_decode_elements(ops.extra["a"], ops.fa) * sa
    b = golden_decode_elements(ops.extra["b"], ops.fb) * sb
    return a.astype(np.float32), b.astype(np.float32)


def ref_float64(ops: MxOperands, bias: np.ndarray | None = None) -> np.ndarray:
    a, b = dequant_logical(ops)
    c = a.astype(np.float64) @ b.astype(np.float64)
    return c if bias is None else c + np.asarray(bias, dtype=np.float64).reshape(1, -1)


def abs_bound64(ops: MxOperands) -> np.ndarray:
    """|A| @ |B| in float64: the scale of the rounding error of any FP32 summation order."""
    a, b = dequant_logical(ops)
    return np.abs(a).astype(np.float64) @ np.abs(b).astype(np.float64)


# -- a one-core BlockMmad harness ------------------------------------------------------------------------------
@dataclass
class Tile:
    """One BlockMmad call: the C tile (mPos, nPos, curM, curN), its splitKIdx and which K segment it reads."""

    mPos: int
    nPos: int
    curM: int
    curN: int
    splitKIdx: int = 0
    segment: int = 0


@dataclass
class HarnessResult:
    c: np.ndarray
    hazards: list
    events: list


def run_block_mmad(ops: MxOperands, tiles: list[Tile], *, out_dtype: Any = ml_dtypes.bfloat16, baseM: int = 64,
                   baseN: int = 64, baseK: int = 64, kL1: int = 128, scaleKL1: int | None = None,
                   l1BufNum: int = 2, dbL0C: bool = True, splitKNum: int = 1, segments: int = 1,
                   bias: np.ndarray | None = None, fullLoadMode: Any = 0, atomic: bool = False,
                   c_init: np.ndarray | None = None, check: bool = True, record: bool = False) -> HarnessResult:
    """Run `tiles` through one core's BlockMmadMx (Init once); K is cut into `segments` equal parts, the
    problem K of Init being one segment (the splitK pattern of the A2A kernel)."""
    dev = Device(check=check, timeout=30.0)
    gm = dev.gm
    la = DNExtLayoutPtn if ops.trans_a else NDExtLayoutPtn
    lb = DNExtLayoutPtn if ops.trans_b else NDExtLayoutPtn
    a_addr = gm.alloc(-(-ops.x1.size // 2) if ops.fa.is_fp4 else ops.x1.size, "A")
    gm.write(a_addr, ops.x1.view(np.uint8).view(element_dtype(ops.fa)))
    b_addr = gm.alloc(-(-ops.x2.size // 2) if ops.fb.is_fp4 else ops.x2.size, "B")
    gm.write(b_addr, ops.x2.view(np.uint8).view(element_dtype(ops.fb)))
    sa_addr = gm.alloc(0, "scaleA", data=ops.x1_scale.view(np.uint8))
    sb_addr = gm.alloc(0, "scaleB", data=ops.x2_scale.view(np.uint8))
    out = np.dtype(out_dtype)
    init = np.zeros((ops.m, ops.n), out) if c_init is None else np.asarray(c_init, out)
    c_addr = gm.alloc(0, "C", data=init)
    bias_addr = gm.alloc(0, "bias", data=np.asarray(bias, np.float32).reshape(1, -1)) if bias is not None else None
    T = BlockMmadMx.template(MatmulWithScaleMx(fullLoadMode, atomic), ops.fa, la, ops.fb, lb, out)
    kseg = ops.k // segments
    scale_len = -(-ops.k // 64) * 2
    seg_scale = -(-kseg // 64) * 2
    recorder = EventRecorder()
    if record:
        dev.events.subscribe(recorder)

    def kernel(ctx: Any) -> None:
        if atomic:
            ctx.SetAtomicAdd(out)   # C's type, as apace's SetAtomicAdd<CType> (another type: ATOMIC_DTYPE_MISMATCH)
        gmA = MakeTensor(MakeMemPtr(a_addr, ops.fa), FrameLayoutFormat(la)(ops.m, ops.k), name="A")
        gmB = MakeTensor(MakeMemPtr(b_addr, ops.fb), FrameLayoutFormat(lb)(ops.k, ops.n), name="B")
        ls_a = FrameLayoutFormat(ScaleADNLayoutPtn if ops.trans_a else ScaleANDLayoutPtn, 2)
        ls_b = FrameLayoutFormat(ScaleBDNLayoutPtn if ops.trans_b else ScaleBNDLayoutPtn, 2)
        gmSA = MakeTensor(MakeMemPtr(sa_addr, E8M0_DTYPE), ls_a(ops.m, scale_len))
        gmSB = MakeTensor(MakeMemPtr(sb_addr, E8M0_DTYPE), ls_b(scale_len, ops.n))
        gmC = MakeTensor(MakeMemPtr(c_addr, out), FrameLayoutFormat(NDExtLayoutPtn)(ops.m, ops.n), name="C")
        gmBias = (MakeTensor(MakeMemPtr(bias_addr, np.float32), FrameLayoutFormat(NDExtLayoutPtn)(1, ops.n))
                  if bias_addr is not None else None)
        mm = T(ctx)
        mm.Init(ProblemShape(ops.m, ops.n, kseg, 1), (baseM, baseN, baseK, 0),
                L1Params(kL1, scaleKL1 if scaleKL1 is not None else kL1, l1BufNum), bias is not None, dbL0C,
                splitKNum)
        for t in tiles:
            k0 = t.segment * kseg
            s0 = t.segment * seg_scale
            mm(gmA.Slice((t.mPos, k0), (t.curM, kseg)), gmB.Slice((k0, t.nPos), (kseg, t.curN)),
               gmSA.Slice((t.mPos, s0), (t.curM, seg_scale)), gmSB.Slice((s0, t.nPos), (seg_scale, t.curN)),
               gmBias.Slice((0, t.nPos), (1, t.curN)) if gmBias is not None else None,
               gmC.Slice((t.mPos, t.nPos), (t.curM, t.curN)), (t.curM, t.curN, 0, 0), t.splitKIdx)
        mm.Destroy()
        if atomic:
            ctx.SetAtomicNone()

    res = dev.launch(kernel, 1, "AIC_ONLY", name="block_mmad_harness")
    c = gm.view(c_addr, out, (ops.m, ops.n)).copy()
    return HarnessResult(c, res.hazards, recorder.events)


def grid_tiles(m: int, n: int, tm: int, tn: int, splitKNum: int = 1) -> list[Tile]:
    """Every (tm, tn) tile of an (m, n) C, each called splitKIdx 0..splitKNum-1 on K segments 0..n-1."""
    out = []
    for mp in range(0, m, tm):
        for np_ in range(0, n, tn):
            for s in range(splitKNum):
                out.append(Tile(mp, np_, min(tm, m - mp), min(tn, n - np_), s, s))
    return out
