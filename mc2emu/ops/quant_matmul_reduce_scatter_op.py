"""`quant_matmul_reduce_scatter` — the compute-first MC2 operator: MX quant matmul, then a reduce-scatter of
the products along M (seed 000 §4.6-4.8 / §7.2, SPEC §7.2), one call per rank (collective).

    x1        float8_e4m3fn / float8_e5m2   (M, K)      this rank's full A (split="m") or K slice (split="k")
    x1_scale  float8_e8m0fnu                (M, ceil(K/64), 2)
    x2        float8                        (N, K)      this rank's B stored transposed (transB)
    x2_scale  float8_e8m0fnu                (N, ceil(K/64), 2)
    y         bf16                          (M/R, N)    y_r = bf16(sum_{j ascending} fp32(C_j[r-th M segment])),
                                                        C_j = bf16(deq(x1_j) deq(x2_j)^T)

`impl`: "rounds" (default) the design-spec kernel (`apace.quant_matmul_reduce_scatter_rounds_impl`, T rounds
of headMSize rows); "per_block" the shipped kernel (`apace.quant_matmul_reduce_scatter_impl`), which always
ends with one unconsumed flag-9 round per AIC (UNCONSUMED_FLAG, so with `check=True` it raises HazardError
carrying y; kernel_variant "final_wait" adds the missing wait). `split`: "m" (seed 000 §4.7 "完整输入") or
"k" (tensor parallel; ceil(K_slice / 64) must be even). Bias, float32 (N,), by both kernels: the first L0C
value of every tile, so y_r sums R biases; rounds refuses a tiling with no L1 room for it (RS-9).
`kernel_variant` reproduces a hazard; `weight_format="NZ"`: per_block's NZ B. Enum keywords take the member
or its string (`mc2emu.arch.parse_enum`); common keywords: `mc2emu.host.call_options`. With `check=True` error
hazards raise `HazardError` (its `.output` holds y); bad input raises `ConstraintError` naming the rule.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from mc2emu.apace.quant_matmul_reduce_scatter_impl import PerBlockVariant
from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import RsKernelVariant
from mc2emu.arch import parse_enum
from mc2emu.arch.platform import DAV_3510
from mc2emu.host.call_options import Observer, call_options, call_result
from mc2emu.host.collective import refuse_on_every_rank, world_comm
from mc2emu.numerics import OutDtype
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.numerics.nz_format import nz_storage_shape
from mc2emu.numerics.payload import host_array
from mc2emu.ops.mx_operands import mx_operand_violations
from mc2emu.ops.quant_matmul_reduce_scatter_host import (
    QmrsImpl,
    QmrsLaunchInfo,
    QmrsProblem,
    QmrsSplit,
    WeightFormat,
    run_qmrs,
)
from mc2emu.tiling.quant_matmul_reduce_scatter_tiling import (
    make_rs_comm_tiling,
    qmrs_shape_violations,
    rounds_alignment_violations,
    rounds_violations,
)

if TYPE_CHECKING:
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.perturb import PerturbPolicy

__all__ = ["QmrsImpl", "QmrsLaunchInfo", "QmrsProblem", "QmrsSplit", "WeightFormat", "quant_matmul_reduce_scatter",
           "validate"]

PAIR_K = 64
NZ_WEIGHT_DIMS = 4  # FRACTAL_NZ storage of a 2-D B: (ceil(N/32), ceil(K/16), 16, 32)


def validate(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *, rank: int,
             rank_size: int, bias: Any, split: Any, impl: Any, head_m_size: int | None, out_dtype: Any,
             kernel_variant: Any, weight_format: Any = "ND", ragged_n: bool = False
             ) -> tuple[QmrsProblem | None, list[tuple[str, str]]]:
    """Every input rule as (rule, reason) pairs; the problem when there are none."""
    errs: list[tuple[str, str]] = []
    imp = parse_enum(QmrsImpl, impl, "impl", errs)
    spl = parse_enum(QmrsSplit, split, "split", errs)
    variant_cls: type[RsKernelVariant | PerBlockVariant] = (PerBlockVariant if imp is QmrsImpl.PER_BLOCK
                                                            else RsKernelVariant)
    variant = parse_enum(variant_cls, kernel_variant.value if isinstance(kernel_variant, enum.Enum) else kernel_variant,
                         "kernel_variant", errs)
    if head_m_size is not None and imp is QmrsImpl.PER_BLOCK:
        errs.append(("head_m_size", "head_m_size sets the rounds of impl='rounds'; the per-block kernel has none"))
    out = parse_enum(OutDtype, out_dtype, "out_dtype", errs)
    if out is not None and out is not OutDtype.BF16:
        errs.append(("out_dtype", f"out_dtype={out_dtype!r}: the staging and y are bf16 in both kernels"))
    if head_m_size is not None and (not isinstance(head_m_size, (int, np.integer)) or head_m_size <= 0):
        errs.append(("head_m_size", f"head_m_size={head_m_size!r} must be a positive integer or None"))
    if not isinstance(ragged_n, (bool, np.bool_)):
        errs.append(("ragged_n", f"ragged_n={ragged_n!r} must be a bool"))
    wf = parse_enum(WeightFormat, weight_format, "weight_format", errs)
    nz = wf is WeightFormat.NZ
    if nz and imp is not QmrsImpl.PER_BLOCK:
        errs.append(("QMRS-NZ weight_format NZ: per_block only",
                     "an NZ B is the shipped kernel's (its launcher's LayoutB = nz_layout_ptn, b993c14f); the rounds "
                     "kernel's design spec reads B as (N, K) (development.md §5.8)"))
    # an NZ x2 is checked as a 2-D operand for its dtype
    x2_codes = np.asarray(x2).reshape(-1, np.shape(x2)[-1]) if nz and np.ndim(x2) == NZ_WEIGHT_DIMS else x2
    elems, operand_errs, ranks_ok = mx_operand_violations(x1, x1_scale, x2_codes, x2_scale)
    errs += operand_errs
    if not ranks_ok:
        return None, errs
    m, k = x1.shape
    pairs = CeilDiv(k, PAIR_K)
    if nz:
        # the launcher's buffers (ubmem main.cpp 0f2296ba3e): B {ceil(N/32), ceil(K/16), 16, 32}, scaleB
        # {ceil(K/64), N, 2}; N is read from scaleB (the NZ storage pads it)
        n = int(np.shape(x2_scale)[1])
        want = nz_storage_shape((k, n), elems[1]) if len(elems) == 2 else None
        if want is not None and np.shape(x2) != want:
            errs.append(("x2 shape", f"an NZ x2 must be the FRACTAL_NZ storage of B (K, N) = ({k}, {n}), "
                                     f"(ceil(N/32), ceil(K/16), 16, 32) = {want}, got {np.shape(x2)}"))
        if x2_scale.shape != (pairs, n, 2):
            errs.append(("x2_scale shape", f"with an NZ x2, x2_scale must be (ceil(K/64), N, 2) = {(pairs, n, 2)} "
                                           f"(the launcher's scaleB), got {x2_scale.shape}"))
    else:
        n, k2 = x2.shape
        if k2 != k:
            errs.append(("x2 shape", f"x2 must be (N, K) = (N, {k}) (transB), got {x2.shape}"))
        if x2_scale.shape != (n, pairs, 2):
            errs.append(("x2_scale shape", f"x2_scale must be (N, ceil(K/64), 2) = {(n, pairs, 2)}, got "
                                           f"{x2_scale.shape}"))
    if x1_scale.shape != (m, pairs, 2):
        errs.append(("x1_scale shape", f"x1_scale must be (M, ceil(K/64), 2) = {(m, pairs, 2)}, got {x1_scale.shape}"))
    if bias is not None and (host_array(bias).dtype != np.float32 or np.shape(bias) not in ((n,), (1, n))):
        errs.append(("bias", f"bias must be float32 of shape (N,) = ({n},) (the kernel's (1, N) BiasType "
                             f"float tensor), got {host_array(bias).dtype} {np.shape(bias)}"))
    shape_errs = qmrs_shape_violations(m, k, n, rank_size)
    if spl is QmrsSplit.K:
        # §4.7 item 4: the TP reading also needs k % R == 0 and ceil(k / R / 64) even for the logical k = R * K.
        shape_errs = [(r.replace("QMRS-3 ceil(K/64) even", "QMRS-TP ceil(k/R/64) even"), s) for r, s in shape_errs]
    errs += shape_errs
    if not errs and imp is QmrsImpl.ROUNDS:
        if not ragged_n:
            errs += rounds_alignment_violations(n)
        errs += rounds_violations(make_rs_comm_tiling(m, rank_size, head_m_size, n), n, rank_size, None)
    if errs:
        return None, errs
    assert out is not None and variant is not None and imp is not None and spl is not None
    return QmrsProblem(rank, rank_size, m, k, n, elems[0], elems[1], out, imp, spl,
                       None if head_m_size is None else int(head_m_size), variant, nz), errs


@overload
def quant_matmul_reduce_scatter(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                                bias: np.ndarray | None = ..., split: str | QmrsSplit = ...,
                                impl: str | QmrsImpl = ..., head_m_size: int | None = ..., out_dtype: Any = ...,
                                block_dim: int | None = ..., weight_format: str | WeightFormat = ...,
                                ragged_n: bool = ...,
                                kernel_variant: str | RsKernelVariant | PerBlockVariant = ..., check: bool = ...,
                                timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                                observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                                comm: Any = ..., data: bool = ...,
                                return_stats: Literal[False] = ...) -> np.ndarray: ...
@overload
def quant_matmul_reduce_scatter(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                                bias: np.ndarray | None = ..., split: str | QmrsSplit = ...,
                                impl: str | QmrsImpl = ..., head_m_size: int | None = ..., out_dtype: Any = ...,
                                block_dim: int | None = ..., weight_format: str | WeightFormat = ...,
                                ragged_n: bool = ...,
                                kernel_variant: str | RsKernelVariant | PerBlockVariant = ..., check: bool = ...,
                                timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                                observers: Iterable[Observer] = ..., faults: FaultPlan | None = ...,
                                comm: Any = ..., data: bool = ...,
                                return_stats: Literal[True]) -> tuple[np.ndarray, QmrsLaunchInfo]: ...


def quant_matmul_reduce_scatter(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                                bias: np.ndarray | None = None, split: str | QmrsSplit = "m",
                                impl: str | QmrsImpl = "rounds", head_m_size: int | None = None,
                                out_dtype: Any = "bfloat16", block_dim: int | None = None,
                                weight_format: str | WeightFormat = "ND", ragged_n: bool = False,
                                kernel_variant: str | RsKernelVariant | PerBlockVariant = "source",
                                check: bool = True, timeout: float | None = None,
                                perturb: PerturbPolicy | None = None, observers: Iterable[Observer] = (),
                                faults: FaultPlan | None = None, comm: Any = None,
                                data: bool = True,
                                return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, QmrsLaunchInfo]:
    """Run the operator on this rank (collective over `comm`, default MPI.COMM_WORLD) and return y (M/R, N)
    (with its `QmrsLaunchInfo` when `return_stats`).

    The common keywords (`check`, `timeout`, `perturb`, `observers`, `faults`, `comm`) are those of
    `mc2emu.host.call_options`. Extra: `kernel_variant` (`RsKernelVariant` / `PerBlockVariant`), and
    `weight_format` "ND" (default, x2 (N, K)) or "NZ" (impl "per_block": the ST launcher's B, ubmem main.cpp
    0f2296ba3e / b993c14f): x2 the FRACTAL_NZ storage of B (K, N), (ceil(N/32), ceil(K/16), 16, 32)
    (`mc2emu.numerics.nz_format.nd_to_nz(x2_nd.T)`), x2_scale (ceil(K/64), N, 2); the golden takes the ND x2.
    `ragged_n=True` runs impl "rounds" at N % 16 != 0 past the design spec's host check #2 (RS-12,
    development.md §3.1 #2), to study the kernel there: the emulated kernel copies exact bytes, and
    kernel_variant "tail_copy_rounded" shows the window / y corruption the check exists for."""
    comm = world_comm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    problem, errs = validate(x1, x1_scale, x2, x2_scale, rank=rank, rank_size=size, bias=bias, split=split,
                             impl=impl, head_m_size=head_m_size, out_dtype=out_dtype, kernel_variant=kernel_variant,
                             weight_format=weight_format, ragged_n=ragged_n)
    errs = DAV_3510.block_dim_violations(block_dim) + errs
    refuse_on_every_rank(comm, errs)
    assert problem is not None
    opts = call_options(check=check, timeout=timeout, perturb=perturb, observers=observers, faults=faults, comm=comm,
                        data=data)
    y, hazards, info = run_qmrs(problem, x1, x1_scale, x2, x2_scale, opts, block_dim=block_dim, bias=bias)
    return call_result(y, info, hazards, opts, return_stats)
