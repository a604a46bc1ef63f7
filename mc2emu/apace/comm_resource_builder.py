"""The HCCL communication resources of the apace UBMEM kernels: `HcclCombinOpParam` and its address helpers.

Emulates ops-transformer `mc2/common/op_kernel/apace/utils/comm_resource_builder.h` (hicann/ops-transformer
8fbd92b1d1): every rank's window `windowsIn[r]` holds a state area and, after A5_MTE_STATE_WIN_SIZE bytes, the
data area; both start at an owner-dependent offset r * EP_RANK_OFFSET_STEP:

    GetBaseWindAddrByRankId(ctx, r)      = windowsIn[r] + A5_MTE_STATE_WIN_SIZE + r * EP_RANK_OFFSET_STEP
    GetBaseWindStateAddrByRankId(ctx, r) = windowsIn[r] + r * EP_RANK_OFFSET_STEP

Here `windowsIn[r]` is the same symmetric window on every rank (the emulator's HCCL buffer); an address on rank
r is this rank's window address at that offset together with the target rank (`RankAddr`), which the kernels
hand to `Shmem` puts and signals (pe = r), or read locally when r is the own rank.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mc2emu.comm.shmem import Shmem
    from mc2emu.runtime.gm import GmAddr

# `HCCL_MTE_MAX_RANK_NUM`: the windowsIn / windowsOut arrays.
HCCL_MTE_MAX_RANK_NUM = 64
# `EP_RANK_OFFSET_STEP`: each owner rank's areas start r * 1024 bytes into its window.
EP_RANK_OFFSET_STEP = 1024
# `A5_MTE_STATE_WIN_SIZE`: the state area before the data area (1 MiB).
A5_MTE_STATE_WIN_SIZE = 1024 * 1024


@dataclass(frozen=True)
class RankAddr:
    """A window address on rank `rank` (GM_ADDR of `windowsIn[rank] + offset`)."""

    rank: int
    addr: GmAddr

    def __add__(self, nbytes: int) -> RankAddr:
        return RankAddr(self.rank, self.addr + nbytes)


@dataclass(frozen=True)
class HcclOpParam:
    """`HcclCombinOpParam` as the kernels read it: rankId, rankDim and the window (windowsIn[*])."""

    rankId: int
    rankDim: int
    windowBase: GmAddr
    shmem: Shmem

    @staticmethod
    def window_bytes(rank_dim: int, data_bytes: int) -> int:
        """The window size the host reserves: the state area plus the last rank's offset plus the data."""
        return A5_MTE_STATE_WIN_SIZE + (rank_dim - 1) * EP_RANK_OFFSET_STEP + data_bytes


def GetRankId(winContext: HcclOpParam) -> int:
    return winContext.rankId


def GetRankDim(winContext: HcclOpParam) -> int:
    return winContext.rankDim


def GetBaseWindAddrByRankId(winContext: HcclOpParam, rankId: int) -> RankAddr:
    return RankAddr(rankId, winContext.windowBase + A5_MTE_STATE_WIN_SIZE + rankId * EP_RANK_OFFSET_STEP)


def GetBaseWindStateAddrByRankId(winContext: HcclOpParam, rankId: int) -> RankAddr:
    return RankAddr(rankId, winContext.windowBase + rankId * EP_RANK_OFFSET_STEP)
