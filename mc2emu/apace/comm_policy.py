"""CommPolicies of QuantMatmulMxKernel: how the AIC waits for communication tile `tileIdx`.

Emulates the two policies of ops-transformer `mc2/common/op_kernel/apace/kernel/all_to_all_quant_matmul/`
(seed 000 §3): a policy must provide `WaitTile(tileIdx)`; the kernel refuses one that does not when it is
built (the C++ fails to compile).

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

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mc2emu.arch.platform import Pipe

if TYPE_CHECKING:
    from mc2emu.runtime.core import CoreContext


class CommPolicy(Protocol):
    def WaitTile(self, tileIdx: int) -> None: ...


class UdmaCommWaitPolicy:
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
    dataHeadHandle_: int
    dataTailHandle_: int | None
    headTileCnt_: int


class HcommCommWaitPolicy:
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
