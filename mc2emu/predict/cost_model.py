"""Cost model of one DAV_3510 NPU (Ascend 950PR) and its links: a modelled duration for every recorded event.

Every figure is a named constant with its source:
- [HC25] Huawei Connect 2025 keynote (Xu Zhijun, Shanghai), as reported publicly (e.g.
  reportify.ai/social-media/721147635404288): Ascend 950PR FP8 / MXFP8 / HiF8 1 PFLOPS, MXFP4 2 PFLOPS;
  HiBL 1.0 memory 128 GB at 1.6 TB/s; interconnect 2 TB/s.
- [HC19] Ascend 910 launch (Hot Chips 2019): one Da Vinci AI core does 4096 MACs per cycle (16 x 16 x 16).
- [MX] the cube fractal (`mc2emu/numerics/constants.py`): CUBE_BLOCK = 16, K in C0 = 32 (8-bit) / 64 (4-bit).
- [ARCH] the platform table (`mc2emu/arch/platform.py`): 32 AIC / 64 AIV.
"Assumption" marks what no public source settles (clock, latencies, bandwidth sharing, topology): each is a
`CostModel` field to override (`dataclasses.replace`, `CostModel.with_overrides`). The numbers compare the
modes of one operator on one shape; they are not a datasheet.

Durations (dependencies: `mc2emu/predict/replay.py`): MMAD ceil(m/16) * ceil(n/16) * ceil(k/C0) fractal
steps at `clock_hz`; MTE2 / MTE3 / FIXPIPE bytes over the core's even share of GM (at most its MTE port,
+ `mte_latency_s`); a put `put_issue_s`, then bytes / `link_bw` on the source's egress and target's ingress,
landing `put_latency_s` later (own rank: a local copy); cross-core flag `flag_latency_s`; TeamBarrier
store -> observation and signal post -> wait `put_latency_s`; barriers the last arrival +
`barrier_latency_s`; HCCL Commit -> first put `hccl_commit_latency_s`, a Wait `put_latency_s` after the last
block of its repeat landed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from mc2emu.arch.errors import ConstraintError
from mc2emu.arch.platform import DAV_3510, PlatformSpec
from mc2emu.numerics.constants import C0_SIZE_B4, C0_SIZE_B8, CUBE_BLOCK

# [HC25] Ascend 950PR peak dense throughput per chip (FLOP/s, 2 FLOP per MAC).
ASCEND_950PR_MXFP8_FLOPS = 1.0e15
ASCEND_950PR_MXFP4_FLOPS = 2.0e15
# [HC25] Ascend 950PR memory (HiBL 1.0) bandwidth, bytes/s.
ASCEND_950PR_GM_BANDWIDTH = 1.6e12
# [HC25] Ascend 950 interconnect bandwidth per chip, bytes/s. Assumption: per direction, and all of it
# available to one peer at a time (a switched / full-mesh supernode fabric); the model shares it between
# concurrent transfers by queuing them on the source's egress and the target's ingress.
ASCEND_950_LINK_BANDWIDTH = 2.0e12

# [MX][HC19] cube MACs per cycle per AI core: one fractal step (16 x C0 x 16) per cycle. The 910's FP16
# cube is 16 x 16 x 16 = 4096 [HC19]; on DAV_3510 the 32-byte C0 row holds 32 FP8 or 64 FP4 elements.
CUBE_MACS_PER_CYCLE_FP16 = CUBE_BLOCK * CUBE_BLOCK * CUBE_BLOCK
CUBE_MACS_PER_CYCLE_MXFP8 = CUBE_BLOCK * C0_SIZE_B8 * CUBE_BLOCK
CUBE_MACS_PER_CYCLE_MXFP4 = CUBE_BLOCK * C0_SIZE_B4 * CUBE_BLOCK
# K elements per fractal step per element format (the C0 of its L0 layout).
K0_OF_FORMAT: Mapping[str, int] = {
    "e4m3": C0_SIZE_B8, "e5m2": C0_SIZE_B8, "hif8": C0_SIZE_B8, "int8": C0_SIZE_B8,
    "e2m1": C0_SIZE_B4, "e1m2": C0_SIZE_B4,
    "bfloat16": CUBE_BLOCK, "float16": CUBE_BLOCK,
    "float32": CUBE_BLOCK // 2,   # assumption: FP32 (HF32) at half the FP16 rate
}
# Bytes per element of the C types a fixpipe writes (event `dtype` strings).
C_BYTES: Mapping[str, int] = {"bfloat16": 2, "float16": 2, "float32": 4, "int32": 4, "int8": 1}
DEFAULT_C_BYTES = 2

# Assumption: the AI core clock, derived from [HC25] and the cube size: 1 PFLOPS MXFP8 over 32 AIC at
# 8192 MACs/cycle is 1e15 / (2 * 8192 * 32) = 1.907 GHz; the same clock gives MXFP4's 2 PFLOPS exactly.
DAV_3510_CLOCK_HZ = ASCEND_950PR_MXFP8_FLOPS / (2 * CUBE_MACS_PER_CYCLE_MXFP8 * DAV_3510.aic_count)

# Assumptions (no public figure; overridable). Orders of magnitude of comparable hardware.
PUT_LATENCY_S = 2.0e-6           # one-sided put / remote atomic: issue to visible at the peer
PUT_ISSUE_S = 0.1e-6             # the issuing core's (or HCCL server's) time per put descriptor
FLAG_LATENCY_S = 64 / DAV_3510_CLOCK_HZ   # cross-core flag Set to the partner's Wait seeing it (64 cycles)
BARRIER_LATENCY_S = 1.0e-6       # a barrier after its last arrival (host barrier, CrossCore, soft SyncAll)
HCCL_COMMIT_LATENCY_S = 2.0e-6   # CCU: a Commit message to the server's first transfer of that repeat
HCCL_CALL_S = 0.2e-6             # a Prepare / Commit / Query / Init / Finalize message on the client core
MTE_LATENCY_S = 0.0              # fixed cost per MTE2 / MTE3 DataCopy (bytes dominate at these tile sizes)
# Assumption: the chip's GM bandwidth is shared evenly by the cores of one type that run in the launch (no L2
# reuse: pessimistic for B tiles many cores read); AIC and AIV each get the whole chip's share. When the
# records do not say how many ran, this many share it.
GM_SHARE_CORES = DAV_3510.aic_count
# Assumption: one core's MTE2 / MTE3 / fixpipe port moves at most this many bytes per cycle (a core alone
# cannot take the whole chip's bandwidth); 128 B/cycle at 1.907 GHz is 244 GB/s.
MTE_PORT_BYTES_PER_CYCLE = 128


@dataclass(frozen=True)
class CostModel:
    """Durations of recorded events on DAV_3510 (see the module docstring). Override any field:
    `CostModel().with_overrides(link_bw=4e12)`; `scaled(...)` multiplies bandwidths."""

    platform: PlatformSpec = DAV_3510
    clock_hz: float = DAV_3510_CLOCK_HZ
    k0_of_format: Mapping[str, int] = field(default_factory=lambda: dict(K0_OF_FORMAT))
    default_format: str = "e4m3"          # MMAD events that do not name their A format
    gm_bw: float = ASCEND_950PR_GM_BANDWIDTH
    gm_share_cores: int = GM_SHARE_CORES
    mte_port_bytes_per_cycle: float = MTE_PORT_BYTES_PER_CYCLE
    link_bw: float = ASCEND_950_LINK_BANDWIDTH
    put_latency_s: float = PUT_LATENCY_S
    put_issue_s: float = PUT_ISSUE_S
    flag_latency_s: float = FLAG_LATENCY_S
    barrier_latency_s: float = BARRIER_LATENCY_S
    hccl_commit_latency_s: float = HCCL_COMMIT_LATENCY_S
    hccl_call_s: float = HCCL_CALL_S
    mte_latency_s: float = MTE_LATENCY_S

    def __post_init__(self) -> None:
        for name in ("clock_hz", "gm_bw", "link_bw", "mte_port_bytes_per_cycle"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise ConstraintError(f"CostModel.{name}", f"must be a positive, finite number, got {v!r}")
        if self.gm_share_cores < 1:
            raise ConstraintError("CostModel.gm_share_cores", f"must be >= 1, got {self.gm_share_cores}")
        for name in ("put_latency_s", "put_issue_s", "flag_latency_s", "barrier_latency_s",
                     "hccl_commit_latency_s", "hccl_call_s", "mte_latency_s"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and v >= 0 and math.isfinite(v)):
                raise ConstraintError(f"CostModel.{name}", f"must be a finite number >= 0, got {v!r}")
        if self.default_format not in self.k0_of_format:
            raise ConstraintError("CostModel.default_format", f"{self.default_format!r} has no K0 entry")

    def with_overrides(self, **changes: Any) -> CostModel:
        """A copy with `changes` (field names of this class; an unknown name is a ConstraintError)."""
        names = {f.name for f in dataclasses.fields(self)}
        unknown = sorted(set(changes) - names)
        if unknown:
            raise ConstraintError("CostModel", f"unknown field(s) {unknown}; fields: {sorted(names)}")
        return dataclasses.replace(self, **changes)

    def scaled(self, *, gm: float = 1.0, link: float = 1.0) -> CostModel:
        """Bandwidths multiplied by `gm` (GM and the cores' MTE ports: MTE2 / MTE3 / fixpipe) and `link`
        (inter-NPU)."""
        return dataclasses.replace(self, gm_bw=self.gm_bw * gm, link_bw=self.link_bw * link,
                                   mte_port_bytes_per_cycle=self.mte_port_bytes_per_cycle * gm)

    # -- derived rates ------------------------------------------------------------------------------------
    @property
    def core_gm_bw(self) -> float:
        """Bytes/s one core's MTE2 / MTE3 / fixpipe moves to or from GM when `gm_share_cores` cores share GM."""
        return self.core_gm_bw_of(None)

    def core_gm_bw_of(self, active: int | None) -> float:
        """Bytes/s of one core when `active` cores of its type run (None: `gm_share_cores`): its even share of
        the chip's GM bandwidth, at most its MTE port."""
        n = self.gm_share_cores if active is None else max(1, int(active))
        return min(self.mte_port_bytes_per_cycle * self.clock_hz, self.gm_bw / n)

    def macs_per_cycle(self, fmt: str) -> int:
        return CUBE_BLOCK * self._k0(fmt) * CUBE_BLOCK

    def _k0(self, fmt: str | None) -> int:
        k0 = self.k0_of_format.get(fmt or self.default_format)
        if k0 is None:
            raise ConstraintError("MMAD format", f"{fmt!r} has no cube rate in the cost model; known: "
                                  f"{sorted(self.k0_of_format)}")
        return k0

    def peak_flops(self, fmt: str, cores: int | None = None) -> float:
        """Chip peak for `fmt` over `cores` AICs (default: the platform's)."""
        n = self.platform.aic_count if cores is None else cores
        return 2.0 * self.macs_per_cycle(fmt) * self.clock_hz * n

    # -- durations (seconds) --------------------------------------------------------------------------------
    def mmad_cycles(self, m: int, n: int, k: int, fmt: str | None = None) -> int:
        """Fractal steps of one MMAD: ceil(m/16) * ceil(n/16) * ceil(k/K0)."""
        k0 = self._k0(fmt)
        return -(-int(m) // CUBE_BLOCK) * -(-int(n) // CUBE_BLOCK) * -(-int(k) // k0)

    def mmad_s(self, m: int, n: int, k: int, fmt: str | None = None) -> float:
        return self.mmad_cycles(m, n, k, fmt) / self.clock_hz

    def mte_s(self, nbytes: int, active: int | None = None) -> float:
        """One MTE2 load or MTE3 store of `nbytes` between GM and a core's local memory (`active` cores of its
        type running)."""
        return self.mte_latency_s + max(0, int(nbytes)) / self.core_gm_bw_of(active)

    def fixpipe_s(self, m: int, n: int, c_dtype: str | None = None, active: int | None = None) -> float:
        """L0C -> GM of an m x n tile in C's type."""
        return int(m) * int(n) * C_BYTES.get(c_dtype or "", DEFAULT_C_BYTES) / self.core_gm_bw_of(active)

    def link_s(self, nbytes: int) -> float:
        """Occupancy of the egress / ingress link by a put of `nbytes` (latency excluded)."""
        return max(0, int(nbytes)) / self.link_bw

    def local_copy_s(self, nbytes: int, active: int | None = None) -> float:
        """A put to the own rank: a GM-to-GM copy by the issuing engine."""
        return max(0, int(nbytes)) / self.core_gm_bw_of(active)


DEFAULT_COST_MODEL = CostModel()
