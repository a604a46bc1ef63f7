"""`quant_batch_matmul_mx`: the QBMM MX operator on one emulated NPU (no MPI).

Emulates the CANN MX quant batch matmul as ops-tensor builds it. This module is the operator's entry:
its contract and input validation; the host program (tiling, GM, the AIC_ONLY launch of `kernel_qbmm_mx`
on a fresh `Device`, read-back) is `quant_batch_matmul_mx_host.py`.

    C = quant_batch_matmul_mx(x1, x1_scale, x2, x2_scale, *, bias=None, trans_a=False, trans_b=False, ...)

x1 (..., m, k) (transposed: (..., k, m)), x2 (..., k, n) (transposed: (..., n, k)), up to 4 batch
dimensions broadcast numpy-style (each pair equal or one of them 1); Ascend-layout E8M0 scales with the
operand's batch dimensions in front (`golden_quant_batch_matmul_mx` documents the shapes); bias (n,),
(1, n) or (batchC, 1, n) in float32 / bfloat16 / float16. Returns C (..., m, n) as a numpy array of
`out_dtype` (bfloat16 via ml_dtypes, float16 or float32). Enum keywords take the member or its string
(`mc2emu.arch.parse_enum`); common keywords: `mc2emu.host.call_options`; `return_stats=True`: (C, stats).

Errors: ConstraintError (the rule named) for shapes and dtypes the operator refuses; with `check=True`,
HazardError(hazards, output) when the launch filed error-severity hazards (e.g. ATOMIC_LEFT_SET from the
multi-batch atomic path of the default source revision). `atomic=True` selects the atomic policy: C is
accumulated onto `c_init` (zeros by default) with one RNE rounding per write-out.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from mc2emu.arch import parse_enum
from mc2emu.arch.platform import DAV_3510
from mc2emu.blaze import QbmmMxRevision
from mc2emu.host.call_options import Observer, call_options, call_result
from mc2emu.host.collective import refuse
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.numerics.constants import MXFP_DIVISOR_SIZE, SCALE_C0
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import E8M0_DTYPE
from mc2emu.numerics.payload import host_array, is_payload
from mc2emu.ops.quant_batch_matmul_mx_golden import infer_format
from mc2emu.ops.quant_batch_matmul_mx_host import QbmmLaunchInfo, QbmmProblem, run_qbmm
from mc2emu.runtime.hazards import ConstraintError
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulArgs, can_implement

if TYPE_CHECKING:
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.perturb import PerturbPolicy

MAX_BATCH_DIMS = 4  # batchA1..A4 / batchB1..B4 / batchC1..C4 of QBMMTiling
BIAS_DTYPES = ("float32", "bfloat16", "float16")  # BiasType instantiations of the MX kernels


def _operand(x: Any, fmt: ElemFormat | str | None, param: str) -> tuple[np.ndarray, ElemFormat]:
    arr = host_array(x)
    try:
        elem = (infer_format(arr, None, param) if fmt is None
                else parse_enum(ElemFormat, fmt, f"{param}_format"))
    except (MxValueError, MxTypeError) as exc:
        raise ConstraintError(f"{param}.dtype", f"{exc}; pass uint8 codes with {param}_format for E1M2") from None
    if arr.dtype.itemsize != 1:
        raise ConstraintError(f"{param}.dtype", f"{param} must hold one element code per byte (an ml_dtypes FP8/FP4 "
                              f"array or uint8 codes), got {arr.dtype}")
    if arr.ndim < 2 or arr.ndim > 2 + MAX_BATCH_DIMS:
        raise ConstraintError(f"{param}.ndim", f"{param} must be 2-D plus up to {MAX_BATCH_DIMS} batch dimensions, "
                              f"got shape {arr.shape}")
    codes = arr.view(np.uint8)
    if elem.is_fp4 and codes.size and not is_payload(codes) and int(codes.max()) >= 1 << elem.bits:
        raise ConstraintError(f"{param}", f"FP4 codes must be < 16 (one unpacked code per byte), got "
                              f"{int(codes.max())}")
    return arr, elem


def _batch4(shape: tuple[int, ...]) -> tuple[int, int, int, int]:
    dims = (1,) * (MAX_BATCH_DIMS - len(shape)) + tuple(int(d) for d in shape)
    return dims  # type: ignore[return-value]


def _check_scale(scale: Any, batch: tuple[int, ...], rows: int, k: int, pairs_first: bool, param: str) -> np.ndarray:
    s = host_array(scale)
    if s.dtype not in (np.dtype(np.uint8), E8M0_DTYPE):
        raise ConstraintError(f"{param}.dtype", f"{param} must be float8_e8m0fnu or uint8 E8M0 codes, got {s.dtype}")
    pairs = -(-k // MXFP_DIVISOR_SIZE)
    want = (*batch, pairs, rows, SCALE_C0) if pairs_first else (*batch, rows, pairs, SCALE_C0)
    if s.shape != want:
        layout = "(ceil(k/64), rows, 2)" if pairs_first else "(rows, ceil(k/64), 2)"
        raise ConstraintError(f"{param}.shape", f"{param} must have shape {want}: the operand's batch dimensions and "
                              f"the Ascend layout {layout} for k = {k}; got {s.shape}")
    return s


@overload
def quant_batch_matmul_mx(x1: Any, x1_scale: Any, x2: Any, x2_scale: Any, *, bias: Any = ..., trans_a: bool = ...,
                          trans_b: bool = ..., out_dtype: Any = ..., atomic: bool = ..., block_dim: int | None = ...,
                          x1_format: ElemFormat | str | None = ..., x2_format: ElemFormat | str | None = ...,
                          c_init: Any = ..., revision: QbmmMxRevision | str = ..., check: bool = ...,
                          timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                          observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                          data: bool = ...,
                          return_stats: Literal[False] = ...) -> np.ndarray: ...
@overload
def quant_batch_matmul_mx(x1: Any, x1_scale: Any, x2: Any, x2_scale: Any, *, bias: Any = ..., trans_a: bool = ...,
                          trans_b: bool = ..., out_dtype: Any = ..., atomic: bool = ..., block_dim: int | None = ...,
                          x1_format: ElemFormat | str | None = ..., x2_format: ElemFormat | str | None = ...,
                          c_init: Any = ..., revision: QbmmMxRevision | str = ..., check: bool = ...,
                          timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                          observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                          data: bool = ...,
                          return_stats: Literal[True]) -> tuple[np.ndarray, QbmmLaunchInfo]: ...


def quant_batch_matmul_mx(x1: Any, x1_scale: Any, x2: Any, x2_scale: Any, *, bias: Any = None,
                          trans_a: bool = False, trans_b: bool = False, out_dtype: Any = "bfloat16",
                          atomic: bool = False, block_dim: int | None = None,
                          x1_format: ElemFormat | str | None = None, x2_format: ElemFormat | str | None = None,
                          c_init: Any = None, revision: QbmmMxRevision | str = QbmmMxRevision.R106B970C,
                          check: bool = True, timeout: float | None = None, perturb: PerturbPolicy | None = None,
                          observers: Iterable[Observer] = (), faults: FaultPlan | None = None,
                          data: bool = True,
                          return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, QbmmLaunchInfo]:
    """Run the QBMM MX kernel on a fresh emulated device and return C (see the module docstring).

    The common keywords (`check`, `timeout`, `perturb`, `observers`, `faults`) are those of
    `mc2emu.host.call_options`; the operator does not communicate (no `comm`).

    block_dim: AICs to tile for and launch (default: the platform's AIC count; the launch uses the tiling's
    usedCoreNum). x1_format / x2_format: element formats for uint8 code inputs. c_init: initial C (what an
    atomic kernel adds onto; default zeros). revision: which kernel_qbmm_mx.h revision to reproduce."""
    refuse(DAV_3510.block_dim_violations(block_dim))
    rev = parse_enum(QbmmMxRevision, revision, "revision")
    a, fa = _operand(x1, x1_format, "x1")
    b, fb = _operand(x2, x2_format, "x2")
    out = parse_enum(OutDtype, out_dtype, "out_dtype")
    m, k = (a.shape[-1], a.shape[-2]) if trans_a else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if trans_b else (b.shape[-2], b.shape[-1])
    if kb != k:
        raise ConstraintError("x1.k == x2.k", f"K of x1 is {k}, K of x2 is {kb} (trans_a={trans_a}, trans_b={trans_b})")
    batchA, batchB = _batch4(a.shape[:-2]), _batch4(b.shape[:-2])
    for i, (ba, bb) in enumerate(zip(batchA, batchB, strict=True)):
        if ba != bb and 1 not in (ba, bb):
            raise ConstraintError("batch broadcast", f"batch dimension {i + 1} (4-D, left-padded): x1 has {ba}, x2 "
                                  f"has {bb}; each pair must be equal or one of them 1")
    batchC = _batch4(tuple(max(ba, bb) for ba, bb in zip(batchA, batchB, strict=True)))
    nbatch = int(np.prod(batchC))
    sa = _check_scale(x1_scale, a.shape[:-2], m, k, trans_a, "x1_scale")
    sb = _check_scale(x2_scale, b.shape[:-2], n, k, not trans_b, "x2_scale")
    reasons = can_implement(QuantMatmulArgs(int(m), int(n), int(k), 1, bool(trans_a), bool(trans_b), fa, fb))
    if reasons:
        raise ConstraintError("can_implement", "; ".join(reasons))
    bias_arr, biasThreeDim = None, 0
    if bias is not None:
        bias_arr = host_array(bias)
        if bias_arr.dtype.name not in BIAS_DTYPES:
            raise ConstraintError("bias.dtype", f"bias must be one of {BIAS_DTYPES}, got {bias_arr.dtype}")
        if bias_arr.shape in ((n,), (1, n)):
            bias_arr = bias_arr.reshape(1, n)
        elif bias_arr.shape == (nbatch, 1, n) and nbatch > 1:
            biasThreeDim = 1
        else:
            raise ConstraintError("bias.shape", f"bias must be (n,), (1, n) or (batchC, 1, n) = ({nbatch}, 1, {n}); "
                                  f"got {bias_arr.shape}")
    c_shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), m, n)
    if c_init is not None and np.shape(c_init) != c_shape:
        raise ConstraintError("c_init.shape", f"c_init must have the output shape {c_shape}, got {np.shape(c_init)}")

    opts = call_options(check=check, timeout=timeout, perturb=perturb, observers=observers, faults=faults,
                        data=data)
    problem = QbmmProblem(a, fa, b, fb, sa, sb, out, int(m), int(n), int(k), bool(trans_a), bool(trans_b), batchA,
                          batchB, batchC, c_shape, bias_arr, biasThreeDim, c_init, atomic, rev)
    c, hazards, info = run_qbmm(problem, opts, block_dim=block_dim)
    return call_result(c, info, hazards, opts, return_stats)
