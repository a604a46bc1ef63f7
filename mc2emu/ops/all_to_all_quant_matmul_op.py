"""`all_to_all_quant_matmul` — the MC2 all-to-all + MX quant matmul operator, one call per rank.

Collective: every rank calls it with its own inputs and gets its own C back (SPEC §6):

    x1        float8 (or float4_e2m1fn)  (R * oriM, Ka)           row block r goes to rank r
    x1_scale  float8_e8m0fnu             (R * oriM, ceil(Ka/64), 2)
    x2        float8                     (N, R * Ka)              B stored transposed (transB = true)
    x2_scale  float8_e8m0fnu             (N, R * ceil(Ka/64), 2)
    C         bf16 / fp16 / fp32         (oriM, N)                C_j = sum_s deq(A_s rows j) @ deq(B_j seg s)

`impl` selects the orchestration: "udma" (MIX_AIC_1_1: AIV puts + TeamBarrier + cross-core flags) or
"hcomm" (AIC_ONLY: HCCL AlltoAll tasks and an HCCL server). `local_matmul` 0 / 1 / 2, `wait_order` "mask"
(the seed's) or "in_order" (the later source), `hccl_server` "ccu" or "aicpu"; each enum keyword takes the
member or its string (`mc2emu.arch.parse_enum`). The common keywords are `mc2emu.host.call_options`'. With
`check=True` the hazard checkers run and error-severity hazards raise `HazardError` (its `.output` holds
the C the kernel produced); bad input raises `ConstraintError` naming the rule, on every rank.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch import parse_enum
from mc2emu.arch.platform import DAV_3510
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.host.call_options import Observer, call_options, call_result
from mc2emu.host.collective import refuse_on_every_rank, world_comm
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.ops.all_to_all_quant_matmul_host import A2ALaunchInfo, A2AProblem, Impl, LaunchMode, run_a2a
from mc2emu.ops.mx_operands import mx_operand_violations
from mc2emu.tiling.quant_matmul_tiling_swat import dtype_pair_violations

if TYPE_CHECKING:
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.perturb import PerturbPolicy

__all__ = ["A2ALaunchInfo", "A2AProblem", "Impl", "LaunchMode", "all_to_all_quant_matmul", "validate"]

LOCAL_MATMUL_VALUES = (0, 1, 2)


def validate(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *, rank: int,
             rank_size: int, impl: Any, local_matmul: Any, wait_order: Any, hccl_server: Any,
             bias: np.ndarray | None, out_dtype: Any, head_tile_size: int | None = None,
             launch: Any = LaunchMode.CONVENIENT) -> tuple[A2AProblem | None, list[tuple[str, str]]]:
    """Every input rule, as (rule, reason) pairs; the problem when there are none."""
    errs: list[tuple[str, str]] = []
    impl_e = parse_enum(Impl, impl, "impl", errs)
    order = parse_enum(WaitOrder, wait_order, "wait_order", errs)
    server = parse_enum(HcclServerType, hccl_server, "hccl_server", errs)
    launch_e = parse_enum(LaunchMode, launch, "launch", errs)
    if local_matmul not in LOCAL_MATMUL_VALUES:
        errs.append(("local_matmul", f"local_matmul={local_matmul!r} is not one of {LOCAL_MATMUL_VALUES}"))
    out = parse_enum(OutDtype, out_dtype, "out_dtype", errs)
    elems, operand_errs, ranks_ok = mx_operand_violations(
        x1, x1_scale, x2, x2_scale, elems=(ElemFormat.E4M3, ElemFormat.E5M2, ElemFormat.E2M1))
    errs += operand_errs
    if len(elems) == 2:
        errs += [("x1/x2 dtypes", reason) for reason in dtype_pair_violations(*elems)]
    if not ranks_ok:
        return None, errs
    rows, ka = x1.shape
    if rows % rank_size:
        errs.append(("x1 rows", f"x1 has {rows} rows, not a multiple of the {rank_size} ranks (R * oriM)"))
    ori_m = rows // rank_size
    n, k_total = x2.shape
    if k_total != rank_size * ka:
        errs.append(("x2 shape", f"x2 must be (N, R * Ka) = (N, {rank_size * ka}) (transB), got {x2.shape}"))
    pairs = -(-ka // 64)
    if x1_scale.shape != (rows, pairs, 2):
        errs.append(("x1_scale shape", f"x1_scale must be (R * oriM, ceil(Ka/64), 2) = {(rows, pairs, 2)}, got "
                                       f"{x1_scale.shape}"))
    if x2_scale.shape != (n, rank_size * pairs, 2):
        errs.append(("x2_scale shape", f"x2_scale must be (N, R * ceil(Ka/64), 2) = {(n, rank_size * pairs, 2)}, "
                                       f"got {x2_scale.shape}"))
    if min(ori_m, ka, n) <= 0:
        errs.append(("shapes", f"oriM, Ka and N must be positive, got {ori_m}, {ka}, {n}"))
    if bias is not None:
        if impl_e is Impl.UDMA:
            errs.append(("bias (udma)", "the UDMA implementation passes isBias = false: bias is not supported"))
        elif np.shape(bias) not in ((n,), (1, n)):
            errs.append(("bias shape", f"bias must be (N,) = ({n},) float32, got {np.shape(bias)}"))
    if errs:
        return None, errs
    assert out is not None and order is not None and impl_e is not None and server is not None
    assert launch_e is not None  # every keyword parsed when errs is empty
    return A2AProblem(rank, rank_size, ori_m, ka, n, elems[0], elems[1], out, impl_e, int(local_matmul), order,
                      server, bias is not None, head_tile_size, launch_e), errs


@overload
def all_to_all_quant_matmul(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                            impl: str | Impl = ..., local_matmul: int = ..., wait_order: str | WaitOrder = ...,
                            hccl_server: str | HcclServerType = ..., bias: np.ndarray | None = ...,
                            out_dtype: Any = ..., block_dim: int | None = ..., head_tile_size: int | None = ...,
                            launch: str | LaunchMode = ..., check: bool = ..., timeout: float | None = ...,
                            perturb: PerturbPolicy | None = ..., observers: Iterable[Observer] = ...,
                            faults: FaultPlan | None = ..., comm: Any = ..., data: bool = ...,
                            return_stats: Literal[False] = ...
                            ) -> np.ndarray: ...
@overload
def all_to_all_quant_matmul(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                            impl: str | Impl = ..., local_matmul: int = ..., wait_order: str | WaitOrder = ...,
                            hccl_server: str | HcclServerType = ..., bias: np.ndarray | None = ...,
                            out_dtype: Any = ..., block_dim: int | None = ..., head_tile_size: int | None = ...,
                            launch: str | LaunchMode = ..., check: bool = ..., timeout: float | None = ...,
                            perturb: PerturbPolicy | None = ..., observers: Iterable[Observer] = ...,
                            faults: FaultPlan | None = ..., comm: Any = ..., data: bool = ...,
                            return_stats: Literal[True]
                            ) -> tuple[np.ndarray, A2ALaunchInfo]: ...


def all_to_all_quant_matmul(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                            impl: str | Impl = "udma", local_matmul: int = 0, wait_order: str | WaitOrder = "mask",
                            hccl_server: str | HcclServerType = "ccu", bias: np.ndarray | None = None,
                            out_dtype: Any = "bfloat16", block_dim: int | None = None,
                            head_tile_size: int | None = None, launch: str | LaunchMode = "convenient",
                            check: bool = True, timeout: float | None = None, perturb: PerturbPolicy | None = None,
                            observers: Iterable[Observer] = (), faults: FaultPlan | None = None, comm: Any = None,
                            data: bool = True,
                            return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, A2ALaunchInfo]:
    """Run the operator on this rank (collective over `comm`, default MPI.COMM_WORLD) and return C (with
    its `A2ALaunchInfo` when `return_stats`).

    The common keywords (`check`, `timeout`, `perturb`, `observers`, `faults`, `comm`) are those of
    `mc2emu.host.call_options`. Extras beyond the CANN operator: `head_tile_size` (override the ST
    head-tile rule), `launch` (`LaunchMode`: what the UDMA host launches when `block_dim` is not given)."""
    comm = world_comm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    problem, errs = validate(x1, x1_scale, x2, x2_scale, rank=rank, rank_size=size, impl=impl,
                             local_matmul=local_matmul, wait_order=wait_order, hccl_server=hccl_server, bias=bias,
                             out_dtype=out_dtype, head_tile_size=head_tile_size, launch=launch)
    errs = DAV_3510.block_dim_violations(block_dim) + errs
    refuse_on_every_rank(comm, errs)
    assert problem is not None
    opts = call_options(check=check, timeout=timeout, perturb=perturb, observers=observers, faults=faults, comm=comm,
                        data=data)
    c, hazards, info = run_a2a(problem, x1, x1_scale, x2, x2_scale, bias, opts, block_dim=block_dim)
    return call_result(c, info, hazards, opts, return_stats)
