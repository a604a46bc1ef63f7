"""`all_gather_quant_matmul` — the MC2 all-gather + MX quant matmul operator, one call per rank (collective).

Every rank calls it with its own inputs and gets its own C (SPEC §7.1):

    x1        float8_e4m3fn / float8_e5m2   (m, K)                 this rank's rows of A
    x1_scale  float8_e8m0fnu                (m, ceil(K/64), 2)
    x2        float8                        (N, K)                 B stored transposed (transB)
    x2_scale  float8_e8m0fnu                (N, ceil(K/64), 2)
    C         bf16 (fp16, fp32)             (R * m, N)             C[r*m:(r+1)*m] = deq(x1 of r) @ deq(x2)^T

`protocol` "seed" is the UDMA impl (5778144076: every round in its own window rows), `wait_order` "mask" (before
the in-order fix) or "in_order"; "slot_ring" is the URMA impl's window reuse (67a83540d75e): `slot_num` data
slots (0 or >= commTurn: no reuse), in-order waits only (with "mask": refused). `bias` ((N,) fp32, added once)
on the slot ring only (its kernel passes `isBias`; the seed kernel's mmad has none). `block_dim` None launches
max(usedCoreNum, R) blocks, a given one as given (as the ST launcher): below R some peers are never served, as
on the device (PEER_NOT_SERVED). `kernel_variant`: a reproduced hazard. Error hazards raise `HazardError`
(`.output`: C) with `check=True`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Literal, overload

import numpy as np

from mc2emu.apace.all_gather_qbmm_mx_kernel import AgKernelVariant
from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.arch import parse_enum
from mc2emu.arch.platform import DAV_3510
from mc2emu.host.call_options import Observer, call_options, call_result
from mc2emu.host.collective import refuse_on_every_rank, world_comm
from mc2emu.numerics import OutDtype
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.ops.all_gather_quant_matmul_host import AgLaunchInfo, AgProblem, AgProtocol, run_ag
from mc2emu.ops.mx_operands import mx_operand_violations
from mc2emu.tiling.all_gather_quant_matmul_tiling import ag_constraint_violations

TILE_M_ALIGN = 16  # a `tile_m` override is whole 16-row fractals (the tail pads to 16 rows likewise)

if TYPE_CHECKING:
    from mc2emu.runtime.faults import FaultPlan
    from mc2emu.runtime.perturb import PerturbPolicy

__all__ = ["AgLaunchInfo", "AgProblem", "AgProtocol", "all_gather_quant_matmul", "validate"]

PAIR_K = 64


def validate(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *, rank: int,
             rank_size: int, wait_order: Any, protocol: Any, slot_num: int, bias: Any, out_dtype: Any,
             kernel_variant: Any, tile_m: int | None = None) -> tuple[AgProblem | None, list[tuple[str, str]]]:
    """Every input rule as (rule, reason) pairs; the problem when there are none."""
    errs: list[tuple[str, str]] = []
    proto = parse_enum(AgProtocol, protocol, "protocol", errs)
    order = parse_enum(WaitOrder, wait_order if wait_order is not None else
                       (WaitOrder.IN_ORDER if proto is AgProtocol.SLOT_RING else WaitOrder.MASK), "wait_order", errs)
    if proto is AgProtocol.SLOT_RING and order is WaitOrder.MASK:
        errs.append(("AG-6 slot_ring waits in order", "protocol 'slot_ring' with wait_order 'mask': the slot ring "
                     "(all_gather_qbmm_mx_kernel.h at 67a83540d75e) acquires rounds in order only; a per-flag mask "
                     "cannot tell round r from round r + slot_num on a shared flag id"))
    if isinstance(slot_num, bool) or not isinstance(slot_num, (int, np.integer)) or slot_num < 0:
        errs.append(("slot_num", f"slot_num={slot_num!r} must be an integer >= 0 (0 or >= commTurn: no reuse)"))
    elif slot_num != 0 and proto is AgProtocol.SEED:
        errs.append(("slot_num", f"slot_num={slot_num!r}: the seed protocol has no slots (protocol 'slot_ring' "
                                 f"takes slot_num)"))
    if tile_m is not None and (isinstance(tile_m, bool) or not isinstance(tile_m, (int, np.integer))
                               or tile_m < TILE_M_ALIGN or tile_m % TILE_M_ALIGN):
        errs.append(("tile_m", f"tile_m={tile_m!r} must be a positive multiple of {TILE_M_ALIGN} rows (None: the ST "
                               f"host's min(512, m))"))
    variant = parse_enum(AgKernelVariant, kernel_variant, "kernel_variant", errs)
    if variant is AgKernelVariant.SKIP_RELEASE_WAIT and proto is not AgProtocol.SLOT_RING:
        errs.append(("kernel_variant", "kernel_variant 'skip_release_wait' is a slot_ring variant (the seed "
                                       "protocol never reuses a window row)"))
    out = parse_enum(OutDtype, out_dtype, "out_dtype", errs)
    if bias is not None and proto is not AgProtocol.SLOT_RING:
        errs.append(("bias", "protocol 'seed': the kernel (ops-transformer 5778144076 all_gather_qbmm_mx_kernel.h:313, "
                             "340) runs mmadFrag.Init(..., isBias = false) with a null bias tensor (the slot ring, "
                             "67a83540d75e, takes a (N,) fp32 bias)"))
    elems, operand_errs, ranks_ok = mx_operand_violations(x1, x1_scale, x2, x2_scale,
                                                          why="(the kernel's C0 is the FP8 one)")
    errs += operand_errs
    if not ranks_ok:
        return None, errs
    m, k = x1.shape
    n, k2 = x2.shape
    if k2 != k:
        errs.append(("x2 shape", f"x2 must be (N, K) = (N, {k}) (transB), got {x2.shape}"))
    pairs = CeilDiv(k, PAIR_K)
    if x1_scale.shape != (m, pairs, 2):
        errs.append(("x1_scale shape", f"x1_scale must be (m, ceil(K/64), 2) = {(m, pairs, 2)}, got {x1_scale.shape}"))
    if x2_scale.shape != (n, pairs, 2):
        errs.append(("x2_scale shape", f"x2_scale must be (N, ceil(K/64), 2) = {(n, pairs, 2)}, got {x2_scale.shape}"))
    errs += ag_constraint_violations(m, k, n, rank_size, slot_ring=proto is AgProtocol.SLOT_RING)
    if bias is not None and proto is AgProtocol.SLOT_RING and np.shape(bias) not in ((n,), (1, n)):
        errs.append(("bias shape", f"bias must be (N,) = ({n},) float32 (the URMA impl loads (1, N) fp32 slices), "
                                   f"got {np.shape(bias)}"))
    if errs:
        return None, errs
    assert out is not None and order is not None and variant is not None and proto is not None
    return AgProblem(rank, rank_size, m, k, n, elems[0], elems[1], out, order, variant, proto, int(slot_num),
                     bias is not None, None if tile_m is None else int(tile_m)), errs


@overload
def all_gather_quant_matmul(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                            bias: np.ndarray | None = ..., out_dtype: Any = ...,
                            wait_order: str | WaitOrder | None = ..., protocol: str | AgProtocol = ...,
                            slot_num: int = ..., block_dim: int | None = ..., tile_m: int | None = ...,
                            kernel_variant: str | AgKernelVariant = ..., check: bool = ...,
                            timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                            observers: Iterable[Observer] = ..., faults: FaultPlan | None = ..., comm: Any = ...,
                            data: bool = ...,
                            return_stats: Literal[False] = ...) -> np.ndarray: ...
@overload
def all_gather_quant_matmul(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                            bias: np.ndarray | None = ..., out_dtype: Any = ...,
                            wait_order: str | WaitOrder | None = ..., protocol: str | AgProtocol = ...,
                            slot_num: int = ..., block_dim: int | None = ..., tile_m: int | None = ...,
                            kernel_variant: str | AgKernelVariant = ..., check: bool = ...,
                            timeout: float | None = ..., perturb: PerturbPolicy | None = ...,
                            observers: Iterable[Observer] = ..., faults: FaultPlan | None = ..., comm: Any = ...,
                            data: bool = ...,
                            return_stats: Literal[True]) -> tuple[np.ndarray, AgLaunchInfo]: ...


def all_gather_quant_matmul(x1: np.ndarray, x1_scale: np.ndarray, x2: np.ndarray, x2_scale: np.ndarray, *,
                            bias: np.ndarray | None = None, out_dtype: Any = "bfloat16",
                            wait_order: str | WaitOrder | None = None, protocol: str | AgProtocol = "seed",
                            slot_num: int = 0, block_dim: int | None = None, tile_m: int | None = None,
                            kernel_variant: str | AgKernelVariant = "source", check: bool = True,
                            timeout: float | None = None, perturb: PerturbPolicy | None = None,
                            observers: Iterable[Observer] = (), faults: FaultPlan | None = None, comm: Any = None,
                            data: bool = True,
                            return_stats: bool = False) -> np.ndarray | tuple[np.ndarray, AgLaunchInfo]:
    """Run the operator on this rank (collective over `comm`, default MPI.COMM_WORLD) and return C (with
    its `AgLaunchInfo` when `return_stats`).

    The common keywords (`check`, `timeout`, `perturb`, `observers`, `faults`, `comm`) are those of
    `mc2emu.host.call_options`. Extras: `kernel_variant` (a reproduced hazard of the kernel,
    `AgKernelVariant`), `tile_m` (replaces the ST host's 512 in tileM = min(512, m): scaled replays).
    `wait_order` None: the protocol's (seed "mask", slot_ring "in_order")."""
    comm = world_comm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    problem, errs = validate(x1, x1_scale, x2, x2_scale, rank=rank, rank_size=size, wait_order=wait_order,
                             protocol=protocol, slot_num=slot_num, bias=bias, out_dtype=out_dtype,
                             kernel_variant=kernel_variant, tile_m=tile_m)
    errs = DAV_3510.block_dim_violations(block_dim) + errs
    refuse_on_every_rank(comm, errs)
    assert problem is not None
    opts = call_options(check=check, timeout=timeout, perturb=perturb, observers=observers, faults=faults, comm=comm,
                        data=data)
    c, hazards, info = run_ag(problem, x1, x1_scale, x2, x2_scale, opts, block_dim=block_dim, bias=bias)
    return call_result(c, info, hazards, opts, return_stats)
