"""Rank-to-rank communication over MPI: symmetric windows, SHMEM-like puts and signals, the apace
TeamBarrier and the HCCL device client with its per-rank server (SPEC §3).

Layering: comm uses the runtime (device, GM, the wait primitive, events, hazards) and nothing above it.
"""

from mc2emu.comm.communicator import HCCL_BUFFSIZE_ENV, CarvedWindow, Communicator, hccl_buffsize_bytes
from mc2emu.comm.errors import CommClosedError, HostBarrierFailed, SymmetryError, WindowError
from mc2emu.comm.hccl import Hccl, HcclCall
from mc2emu.comm.hccl_server import HcclServer
from mc2emu.comm.hccl_session import HcclSessionFailed
from mc2emu.comm.hccl_task import (
    HCCL_FAILED,
    HCCL_MAX_HANDLE_ID,
    HCCL_SUCCESS,
    INVALID_HANDLE_ID,
    HcclCMDType,
    HcclReduceOp,
    HcclServerType,
)
from mc2emu.comm.shmem import Cmp, Shmem, SignalOp, SignalRead
from mc2emu.comm.team_barrier import BarrierMode, TeamBarrier
from mc2emu.comm.window import RemoteAddr, Window
from mc2emu.comm.world import CommWorld

__all__ = [
    "HCCL_BUFFSIZE_ENV",
    "HCCL_FAILED",
    "HCCL_MAX_HANDLE_ID",
    "HCCL_SUCCESS",
    "INVALID_HANDLE_ID",
    "BarrierMode",
    "CarvedWindow",
    "Cmp",
    "CommClosedError",
    "CommWorld",
    "Communicator",
    "Hccl",
    "HcclCMDType",
    "HcclCall",
    "HcclReduceOp",
    "HcclServer",
    "HcclServerType",
    "HcclSessionFailed",
    "HostBarrierFailed",
    "RemoteAddr",
    "Shmem",
    "SignalOp",
    "SignalRead",
    "SymmetryError",
    "TeamBarrier",
    "Window",
    "WindowError",
    "hccl_buffsize_bytes",
]
