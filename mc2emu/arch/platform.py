"""Platform table of the emulated NPU: DAV_3510 (Ascend 950PR / "A5") by default.

Every capacity and protocol limit the runtime and the host tiling use lives here, with where it comes
from (the MX and fractal-layout constants, the same on every platform, are in
`mc2emu/numerics/constants.py`). Sources:
- [ARCH] asc-devkit `docs/zh/guide/编程指南/高级编程/硬件实现/架构规格/NPU架构版本3510.md` (memory sizes,
  AIC:AIV ratio, pipes);
- [SYNC] asc-devkit 核间同步 (`CrossCoreSetFlag` / `CrossCoreWaitFlag`, `SyncAll`) and its DAV_3510
  implementation (16 flag ids, counter limit 15, the SyncAll ids, `IsSplitCubePipe`);
- [CATLASS] catlass `arch/cross_core_sync.hpp` (`MAX_REVERSE_DEPTH = 15`).
"Assumption" marks a value no public source settles; every field can be overridden per launch with
`dataclasses.replace(DAV_3510, ...)`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

import numpy as np

KIB = 1024


class CoreType(enum.Enum):
    """The two kinds of core in one AI core: the cube core (AIC) and the vector core (AIV)."""

    AIC = "AIC"
    AIV = "AIV"


class Pipe(enum.Enum):
    """Ascend C pipeline names used as the `pipe` template argument of the cross-core flag calls."""

    PIPE_S = "S"
    PIPE_V = "V"
    PIPE_M = "M"
    PIPE_MTE1 = "MTE1"
    PIPE_MTE2 = "MTE2"
    PIPE_MTE3 = "MTE3"
    PIPE_FIX = "FIX"
    PIPE_ALL = "ALL"


class FlagMode(enum.IntEnum):
    """The `mode` template argument of `CrossCoreSetFlag<mode, pipe>` / `CrossCoreWaitFlag<mode, pipe>`
    (asc-devkit 核间同步, SPEC §2). Kernels pass the source's literal (`CrossCoreSetFlag(2, ...)`); the
    flag API converts it to a member once, at its boundary, and prints it as the number."""

    ALL_CORES_OF_TYPE = 0  # a round: every AIC (or every AIV) of the launch Set the id
    AIVS_OF_GROUP = 1      # a round: every AIV of one group (MIX 1:2) Set the id
    AIC_AIV_OF_GROUP = 2   # AIV -> AIC (every AIV of the group) and AIC -> each AIV of its group
    MIX_1_2 = 4            # MIX 1:2 only: its own counters, AIC ids 0-31, AIV ids 0-15

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:
        return format(self.value, spec)


@dataclass(frozen=True)
class PlatformSpec:
    """Capacities and protocol limits of one emulated NPU (one MPI rank)."""

    name: str
    # [ARCH] public 950PR examples report 32 AIC / 64 AIV; some SKUs report 28 / 56 (override).
    aic_count: int = 32
    aiv_count: int = 64
    # [ARCH] per AIC core.
    l1_size: int = 512 * KIB
    l0a_size: int = 64 * KIB
    l0b_size: int = 64 * KIB
    l0c_size: int = 256 * KIB
    bias_table_size: int = 4 * KIB
    # [ARCH] says 4 KiB; the asc-devkit CPU-debug model says 16 KiB. Conflict: the architecture page wins.
    fixpipe_buffer_size: int = 4 * KIB
    # [ARCH] UB is 256 KiB per AIV; 248 KiB are usable by default (8 KiB reserved by the runtime).
    ub_size: int = 256 * KIB
    # What a kernel may use: asc-devkit `AscendC::TOTAL_UB_SIZE = 248 * 1024` (`impl/basic_api/utils/
    # kernel_utils_constants.h`, `__NPU_ARCH__ == 3510`, hicann/asc-devkit @28e7aba2), and what the host's
    # `GetCoreMemSize(UB)` returns (the platform ini's `ub_size=253952`; 910B alone subtracts a KFC reserve).
    ub_usable_size: int = 248 * KIB
    # [SYNC] each AIC and each AIV has 16 cross-core counters (ids 0-15), shared by modes 0, 1 and 2.
    flag_id_count: int = 16
    # [SYNC][CATLASS] a counter holds at most 15 pending Sets (MAX_REVERSE_DEPTH = 15); a 16th is a
    # hardware error.
    flag_counter_max: int = 15
    # [SYNC] mode 4 (MIX 1:2): AIC ids 0-31 (0-15 talk to AIV0, 16-31 to AIV1), AIV ids 0-15.
    mode4_aic_id_count: int = 32
    mode4_aiv_id_count: int = 16
    # [SYNC] ids used by SyncAll's hardware implementation; kernels should not use 11-14 alongside it.
    syncall_aiv_only_id: int = 14
    syncall_mix_aiv_set_id: int = 12
    syncall_mix_aic_set_id: int = 13
    syncall_mix_barrier_id: int = 11
    reserved_flag_ids: tuple[int, ...] = (11, 12, 13, 14)
    # [SYNC] soft SyncAll keeps one 32-byte epoch slot per block in GM.
    soft_syncall_slot_bytes: int = 32
    # [ARCH][SYNC] pipes each core type has; a flag call on another pipe compiles to nothing on DAV_3510
    # (`IsSplitCubePipe`).
    aic_pipes: frozenset[Pipe] = field(
        default_factory=lambda: frozenset({Pipe.PIPE_S, Pipe.PIPE_MTE1, Pipe.PIPE_MTE2, Pipe.PIPE_FIX,
                                           Pipe.PIPE_M}))
    aiv_pipes: frozenset[Pipe] = field(
        default_factory=lambda: frozenset({Pipe.PIPE_S, Pipe.PIPE_V, Pipe.PIPE_MTE2, Pipe.PIPE_MTE3}))
    # Assumption: cross-core counts left at launch end persist into the next launch (intra-core flags are
    # documented to); they are reported either way.
    flags_persist_across_launches: bool = True

    def block_dim_violations(self, block_dim: object) -> list[tuple[str, str]]:
        """The launch rule every operator's `block_dim` keyword obeys before its own: None (the tiling's
        count) or a whole number of blocks in [1, aic_count] (`<<<blockDim>>>` is a count of AI cores)."""
        if block_dim is None:
            return []
        whole = isinstance(block_dim, (int, np.integer)) and not isinstance(block_dim, bool)
        if whole and 1 <= int(block_dim) <= self.aic_count:  # type: ignore[call-overload]
            return []
        return [("block_dim", f"block_dim must be None or an integer in [1, {self.aic_count}] (AI cores of "
                              f"{self.name}), got {block_dim!r}")]

    def pipes_of(self, core_type: CoreType) -> frozenset[Pipe]:
        return self.aic_pipes if core_type is CoreType.AIC else self.aiv_pipes


DAV_3510 = PlatformSpec(name="DAV_3510")
