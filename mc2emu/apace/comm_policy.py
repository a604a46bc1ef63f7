"""CommPolicies of QuantMatmulMxKernel: how the AIC waits for communication tile `tileIdx`.

Emulates the two policies of ops-transformer `mc2/common/op_kernel/apace/kernel/all_to_all_quant_matmul/`
(seed 000 §3): a policy must provide `WaitTile(tileIdx)` (and, for the protocol every MC2 kernel shares,
`NotifyTile` and `Drain`, no-ops here); the kernel refuses one that does not when it is built (the C++
fails to compile). The wait orders (`MaskWaitOrder`, `InOrderWaitOrder`) and fault injection
(`FaultInjectingCommPolicy`) wrap the policy instead of branching in the kernel.

| policy                | file (same folder)                        | WaitTile(t)                              |
|-----------------------|-------------------------------------------|------------------------------------------|
| `UdmaCommWaitPolicy`  | `all_to_all_mx_quant_matmul_udma_impl.h`  | `CrossCoreWaitFlag<0x2, PIPE_MTE2>(t)`:  |
|                       |                                           | the AIVs Set flag t once round t landed  |
| `HcommCommWaitPolicy` | `all_to_all_mx_quant_matmul_hcomm_impl.h` | t == 0: `Wait(scaleHandle)`; then        |
|                       |                                           | `Wait(dataHead)` if t < headTileCnt,     |
|                       |                                           | else `Wait(dataTail)`                    |

An HCCL Wait returns when the next committed repeat of the handle completes, never a chosen one: waiting
tile 3 first through the head handle proves only that repeat 0 arrived (the mask wait order's hazard).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mc2emu.arch.platform import Pipe
from mc2emu.runtime.events import FaultFired
from mc2emu.runtime.faults import Fault, FaultHook
from mc2emu.runtime.hazards import KernelError

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext


class CommPolicy(Protocol):
    """The AIC side of an MC2 kernel's communication protocol, in one place. A kernel calls, per tile or
    round, `WaitTile` before its mmads read communicated data and `NotifyTile` after its write-out (e.g.
    compute-first's `CrossCoreSetFlag<2, PIPE_FIX>` per round, AllGather's slot release), and `Drain` once
    at the end. The kernel refuses a policy that lacks one of them when it is built (`check_comm_policy`)."""

    def WaitTile(self, tileIdx: int) -> None: ...

    def NotifyTile(self, tileIdx: int) -> None: ...

    def Drain(self) -> None: ...


COMM_POLICY_METHODS = ("WaitTile", "NotifyTile", "Drain")


def check_comm_policy(policy: object, kernel: str) -> None:
    """The C++ instantiation check: a CommPolicy without one of the protocol's methods does not compile."""
    missing = [m for m in COMM_POLICY_METHODS if not callable(getattr(policy, m, None))]
    if missing:
        raise KernelError(f"CommPolicy {type(policy).__name__} has no {', '.join(f'{m}(...)' for m in missing)}: "
                          f"{kernel} requires {', '.join(COMM_POLICY_METHODS)} (the C++ does not compile)")


class NoNotify:
    """A2A's policies notify nothing after a tile and drain nothing at the end (the final drain of the
    unwaited tiles is the wait order's, through WaitTile)."""

    def NotifyTile(self, tileIdx: int) -> None:
        return None

    def Drain(self) -> None:
        return None


# -- wait orders: how QuantMatmulMxKernel turns a tile's dependency into WaitTile calls --------------------------
# The seed's `waitedMask` is a uint32: one bit per communication tile.
MAX_MASK_TILES = 32


class WaitOrder(enum.Enum):
    """How the AIC waits for communication tiles (SPEC §6)."""

    MASK = "mask"          # seed: waitedMask dedupe in any order, then a final drain of unwaited tiles
    IN_ORDER = "in_order"  # later source: while ready < dep: WaitTile(++ready); drain to totalTiles - 1

    @property
    def max_tiles(self) -> int | None:
        """The most communication tiles the order can track: the mask's bits; the in-order wait keeps one
        index (the tiling checks it: A2A-4)."""
        return MAX_MASK_TILES if self is WaitOrder.MASK else None


@dataclass
class TileWaitState:
    """The kernel's wait bookkeeping of one ProcessSingleBatch: the seed's uint32 `waitedMask` and the later
    source's `ready` (the last tile waited in order)."""

    waitedMask: int = 0
    ready: int = -1


class MaskWaitOrder:
    """Seed: each dependency tile once, in any order (`waitedMask`), then a final drain of unwaited tiles."""

    def __init__(self, policy: CommPolicy, state: TileWaitState) -> None:
        self.policy, self.state = policy, state

    def WaitDep(self, dep: int) -> None:
        st = self.state
        if not (st.waitedMask >> dep) & 1:
            st.waitedMask |= 1 << dep
            self.policy.WaitTile(dep)

    def Drain(self, totalTiles: int) -> None:
        st = self.state
        for t in range(totalTiles):
            if not (st.waitedMask >> t) & 1:
                st.waitedMask |= 1 << t
                self.policy.WaitTile(t)


class InOrderWaitOrder:
    """Later source: `while (ready < dep) WaitTile(++ready)`; the drain waits up to totalTiles - 1."""

    def __init__(self, policy: CommPolicy, state: TileWaitState) -> None:
        self.policy, self.state = policy, state

    def WaitDep(self, dep: int) -> None:
        st = self.state
        while st.ready < dep:
            st.ready += 1
            self.policy.WaitTile(st.ready)

    def Drain(self, totalTiles: int) -> None:
        self.WaitDep(totalTiles - 1)


WAIT_ORDERS: dict[WaitOrder, type[MaskWaitOrder] | type[InOrderWaitOrder]] = {
    WaitOrder.MASK: MaskWaitOrder, WaitOrder.IN_ORDER: InOrderWaitOrder}


class FaultInjectingCommPolicy:
    """Wraps the kernel's CommPolicy with the `wait_tile` fault hook: a planned fault skips one WaitTile or
    swaps it with the next tile's (which is then marked waited). Without a fault plan it only forwards."""

    def __init__(self, inner: CommPolicy, ctx: CoreContext, state: TileWaitState, totalTiles: int) -> None:
        self.inner, self.ctx, self.state, self.totalTiles = inner, ctx, state, totalTiles

    def WaitTile(self, tileIdx: int) -> None:
        ctx, st, t = self.ctx, self.state, tileIdx
        faults = ctx.device.faults
        if faults is not None and faults.fires(FaultHook.WAIT_TILE, ctx.rank, ctx.label):
            ctx.emit(FaultFired, fault=faults.fault, at=t)
            if faults.fault is Fault.SKIP_WAIT_TILE:
                return
            if faults.fault is Fault.SWAP_WAIT_ORDER and t + 1 < self.totalTiles and not (st.waitedMask >> (t + 1)) & 1:
                self.inner.WaitTile(t + 1)
                st.waitedMask |= 1 << (t + 1)
                st.ready = max(st.ready, t + 1)
        self.inner.WaitTile(t)

    def NotifyTile(self, tileIdx: int) -> None:
        self.inner.NotifyTile(tileIdx)

    def Drain(self) -> None:
        self.inner.Drain()


class UdmaCommWaitPolicy(NoNotify):
    """`CrossCoreWaitFlag<0x2, PIPE_MTE2>(tileIdx)`: one flag id per communication round."""

    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        self.waited: list[int] = []

    def WaitTile(self, tileIdx: int) -> None:
        self.ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, tileIdx)
        self.waited.append(tileIdx)


@dataclass
class HcommCommState:
    """`commState_`: the HCCL client and the handles the hcomm impl prepared (bound via GetCommPolicy)."""

    hccl_: Any
    scaleHandle_: int
    dataHeadHandle_: int | None
    dataTailHandle_: int | None
    headTileCnt_: int


class HcommCommWaitPolicy(NoNotify):
    """Waits on HCCL handles: the scale all-to-all before the first data tile, then head or tail repeats."""

    def __init__(self, ctx: CoreContext) -> None:
        self.ctx = ctx
        self.state_: HcommCommState | None = None
        self.waited: list[int] = []
        self.returns: list[int] = []

    def WaitTile(self, tileIdx: int) -> None:
        st = self.state_
        if st is None:
            raise RuntimeError("HcommCommWaitPolicy used before the impl bound commState_ (GetCommPolicy)")
        if tileIdx == 0:
            self.returns.append(st.hccl_.Wait(st.scaleHandle_))
        if tileIdx < st.headTileCnt_:
            self.returns.append(st.hccl_.Wait(st.dataHeadHandle_))
        else:
            self.returns.append(st.hccl_.Wait(st.dataTailHandle_))
        self.waited.append(tileIdx)
