"""The device self-check "operator": on every rank, a MIX 1:2 launch that exercises the cross-core flag
modes 1 and 2 and both SyncAll forms; the output is the number of flag rounds each core completed.
With more than one rank it then checks the window protocols on the job's MPI transport
(`mc2emu.comm.transport_check`: put_signal byte-exact, progress into a busy rank, TeamBarrier) and fails
with a `TransportError` naming what broke: the one command to run on a new cluster.

It needs only the runtime, so the suite runs before any MC2 operator exists.
Shape: m = flag rounds per core. Block dim: `--block-dim` or `SELF_CHECK_BLOCK_DIM`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mc2emu.cli.scenarios import Arrays, Case, Comparison, ExecContext, NoMode, OperatorSpec, Shape
from mc2emu.comm.errors import TransportError
from mc2emu.comm.transport_check import check_window_protocols
from mc2emu.host import LaunchHarness, call_options
from mc2emu.runtime import Device, HazardError, Pipe
from mc2emu.runtime.kernel_type import KernelType

SELF_CHECK_BLOCK_DIM = 4
SELF_CHECK_ROUNDS = 200
SELF_CHECK_QUICK_ROUNDS = 100
# Flag ids cycled by the AIV -> AIC handshake; the AIC answers on id + ROUND_IDS (both below 16).
ROUND_IDS = 4
# The AIV <-> AIV (mode 1) id.
GROUP_ID = 9


def self_check_kernel(ctx: Any, rounds: int) -> int:
    done = 0
    for t in range(rounds):
        fid = t % ROUND_IDS
        if ctx.ASCEND_IS_AIV:
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, fid)               # AIV -> AIC round (both AIVs)
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, fid + ROUND_IDS)  # AIC -> AIV
            ctx.CrossCoreSetFlag(1, Pipe.PIPE_V, GROUP_ID)             # AIV <-> AIV of the group
            ctx.CrossCoreWaitFlag(1, Pipe.PIPE_V, GROUP_ID)
        else:
            ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, fid)
            ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, fid + ROUND_IDS)
        done += 1
    ctx.SyncAll(True)
    ctx.SyncAll(False)
    return done


def _block_dim(ctx: ExecContext) -> int:
    return ctx.block_dim or SELF_CHECK_BLOCK_DIM


def _make_inputs(case: Case, rank: int, size: int) -> Arrays:
    return {"rounds": np.array([case.shape.m], dtype=np.int64)}


def _execute(case: Case, inputs: Arrays, ctx: ExecContext) -> np.ndarray:
    opts = call_options(check=ctx.check, timeout=ctx.timeout, perturb=ctx.perturb, observers=ctx.observers,
                        data=ctx.data)
    with LaunchHarness("self_check", opts, rank=ctx.rank) as h:
        res = h.launch(self_check_kernel, _block_dim(ctx), KernelType.MIX_AIC_1_2, int(inputs["rounds"][0]))
    out = np.array([res.returns[label] for label in sorted(res.returns)], dtype=np.int64)
    if h.hazards:
        raise HazardError(h.hazards, out)
    if ctx.size > 1:
        transport = check_window_protocols(Device(ctx.rank, check=ctx.check, timeout=ctx.timeout), ctx.comm)
        if not transport.ok:
            raise TransportError("the MPI transport breaks the window protocols: " + "; ".join(transport.problems()))
    return out


def _golden(case: Case, inputs: Arrays, comm: Any) -> np.ndarray | None:
    return inputs["rounds"].copy()  # every core must complete every round


def _compare(out: np.ndarray, golden: np.ndarray | None) -> Comparison:
    want = int(golden[0]) if golden is not None and golden.size else int(out.max(initial=0))
    ok = out.size > 0 and bool(np.all(out == want))
    return Comparison(ok, note=f"{out.size} cores x {want} rounds" if ok else f"rounds per core {out.tolist()}, "
                                                                                f"expected {want}")


SPEC = OperatorSpec(
    name="selfcheck",
    summary="device self-check: cross-core flags (modes 1, 2) and SyncAll<true>/<false>, MIX 1:2; with 2+ "
            "ranks the window protocols on the MPI transport",
    mode_type=NoMode,
    make_inputs=_make_inputs,
    golden=_golden,
    execute=_execute,
    compare=_compare,
    default_shape=Shape(SELF_CHECK_ROUNDS),
    quick_shape=Shape(SELF_CHECK_QUICK_ROUNDS),
    input_names=("rounds",),
)
