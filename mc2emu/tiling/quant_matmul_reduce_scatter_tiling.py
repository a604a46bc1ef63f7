"""Host tiling of quant_matmul_reduce_scatter: the rounds of the design-spec kernel, the SWAT matmul tilings,
and the operator's constraints.
- The cannbot MC2 skill, scenario `compute-first-reduce-scatter` (hicann/cannbot-skills aa55f948ed86,
  `ops/ascendc-mc2-best-practice/references/foundations/apace/scenarios/compute-first-reduce-scatter/`):
  `design.md` §3.3-§3.4 and `development.md` §3.1 (the nine host checks), §3.2 (T), §5.4 (reduction UB budget),
  §5.6-§5.7; `fundamentals/fusion.md` §6.2.7 (the strategy-B search) and §6.2.10 (limits).
- The shipped ST host `mc2/common/op_kernel/apace/tests/st/quant_matmul_reduce_scatter/ubmem/src/main.cpp`
  (hicann/ops-transformer 0f2296ba3e): M % R == 0, K % 32 == 0, CeilDiv(K, 64) even; the SWAT tiling of
  (M, N, K) with `SetOptimizeEnable(false)`, `SetMTailAlignEnable(true)`.
Rounds: mSeg = M / R rows per rank segment; T = headCnt + tailCnt rounds of headMSize rows (a 16-aligned tail
round only when the user's headMSize leaves one: strategy A). Round t covers rows [t * headMSize, + curTileM)
of every segment, so the AIC's FragmentTensor problem of round t is R * curTileM rows.
Default headMSize (development.md §3.2, strategy B): maxTileM = 512 KiB / (N * 2) (check #7); T0 =
max(1, ceil(mSeg / maxTileM)); the smallest T in [T0, min(15, 32 / R)] (checks #5, #8) with T | mSeg and, for
T > 1, mSeg / T a multiple of 16 (§5.6): the largest tile (fewer SyncAlls). When no T fits, the call is
refused naming every rule that binds (RS-11).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from mc2emu.arch.platform import DAV_3510, PlatformSpec
from mc2emu.blaze.gemm.block.block_mmad_mx_l1_layout import L1BufferOffsets
from mc2emu.numerics import ElemFormat
from mc2emu.numerics.constants import MX_GROUP_SIZE, MXFP_DIVISOR_SIZE, MXFP_MULTI_BASE_SIZE
from mc2emu.numerics.int_math import CeilDiv
from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulTilingSwat

if TYPE_CHECKING:
    from mc2emu.tiling.quant_matmul_tiling_data import QuantMatmulTilingData

# design.md §3.4 / development.md §3.1 #5: a flag counter holds at most 15 pending Sets and the AIC, which
# waits for nothing, may run T rounds ahead of its AIVs: T <= 15.
MAX_ROUNDS = 15
# development.md §3.1 #8: R * T <= 32 (MAX_FRAGMENT_COUNT of the FragmentTensor).
MAX_RANK_ROUNDS = 32
# development.md §3.1 #6: the bias is float32 (BiasType), one (1, baseN) slot per scale buffer in L1 and in the
# bias table (`biasBufId_ = scaleL1BufId`, BT offset baseN * biasBufId * 4).
BIAS_BYTES = 4
BIAS_TABLE_SLOTS = 2
# development.md §5.6: row granularity of headMSize and of a tail round (Blaze's minimum row granule).
ROW_ALIGN = 16
# development.md §3.1 #7: one round's chunk to one peer must stay <= 512 KiB (UDMA intermittent FAIL above).
MAX_ROUND_CHUNK_BYTES = 512 * 1024
# development.md §3.1 #2: "K%32, N%16 等" (fixpipe / window rows of whole 32-byte blocks: N * 2 % 32 == 0).
N_ALIGN = 16
# The shipped kernel (comm_resource_builder.h): HCCL_MTE_MAX_RANK_NUM.
MAX_RANKS = 64
# development.md §5.6 "baseM 联动": a SWAT baseM of 256 becomes 128 when 128 divides headMSize.
HALVED_BASE_M = 128
# The ST host's MAX_BASIC_BLOCK_SIZE: the dynMaxBaseM cap (ubmem main.cpp).
PB_MAX_BASIC_BLOCK_SIZE = 256
# bf16 staging / output (the only CType of both kernels).
C_BYTES = 2


@dataclass(frozen=True)
class RsCommTiling:
    """`commTilingData` of the rounds kernel (development.md §5.7), in rows of one rank segment."""

    mSeg: int
    headMSize: int
    headCnt: int
    tailMSize: int
    tailCnt: int
    # The default search found no tiling: (rule, reason) of every rule that binds (RS-11); empty otherwise.
    unfit: tuple[tuple[str, str], ...] = ()

    @property
    def commTurn(self) -> int:
        return self.headCnt + self.tailCnt

    def tile_m(self, t: int) -> int:
        """`GetTileM(t)`: rows of every rank segment in round t."""
        return self.headMSize if t < self.headCnt else self.tailMSize

    def tile_m_offset(self, t: int) -> int:
        """`GetTileMOffset(t)`: first row of round t inside a rank segment."""
        return t * self.headMSize if t < self.headCnt else self.headCnt * self.headMSize


def max_tile_m(n: int) -> int:
    """development.md §3.2 / #7: the largest round (rows of one rank segment) whose chunk to one peer fits."""
    return MAX_ROUND_CHUNK_BYTES // (n * C_BYTES)


def max_rounds(rank_size: int) -> int:
    """development.md §3.2: T <= min(15, 32 / R) (#5 flag counter, #8 MAX_FRAGMENT_COUNT)."""
    return min(MAX_ROUNDS, MAX_RANK_ROUNDS // rank_size)


def _fits(m_seg: int, T: int) -> bool:
    """No tail (design.md §3.3, R10: T | mSeg) and, with several rounds, 16-row rounds (development.md §5.6)."""
    return m_seg % T == 0 and (T == 1 or (m_seg // T) % ROW_ALIGN == 0)


def search_rounds(m_seg: int, n: int, rank_size: int) -> int | None:
    """development.md §3.2 / fusion.md §6.2.7 strategy B: the smallest T in [T0, min(15, 32 / R)] with T | mSeg
    and 16-row rounds, T0 = max(1, ceil(mSeg / maxTileM)); None when there is none."""
    T0 = max(1, CeilDiv(m_seg, max(1, max_tile_m(n))))
    for T in range(T0, max_rounds(rank_size) + 1):
        if _fits(m_seg, T):
            return T
    return None


def _binding_rules(m_seg: int, n: int, rank_size: int) -> tuple[tuple[str, str], ...]:
    """Why no T fits, as the rules that bind: the lower bound of #7, every upper bound below the first T that
    the other rules allow, and the no-tail / 16-row rules when they remove every T in between."""
    tile = max_tile_m(n)
    T0 = max(1, CeilDiv(m_seg, max(1, tile)))
    chunk = ("RS-6 tileM * N * 2 <= 512 KiB",
             f"development.md §3.1 #7: tileM <= 512 KiB / (N * 2) = {tile} rows for N = {n}, so T >= "
             f"ceil(mSeg / {max(1, tile)}) = {T0}")
    upper = [(MAX_ROUNDS, ("RS-4 T <= 15", f"development.md §3.1 #5: the flag counter holds {MAX_ROUNDS} "
                                            f"pending Sets, T <= {MAX_ROUNDS}")),
             (MAX_RANK_ROUNDS // rank_size, ("RS-5 R * T <= 32", f"development.md §3.1 #8: R * T <= "
                                                                 f"{MAX_RANK_ROUNDS} (MAX_FRAGMENT_COUNT), T <= "
                                                                 f"{MAX_RANK_ROUNDS // rank_size} at R = {rank_size}"))]
    # the first T the divisibility / alignment rules allow at or above T0 (T = mSeg / 16 always does when
    # mSeg % 16 == 0), and the bounds that cut it off
    first = next((T for T in range(T0, max(T0, m_seg) + 1) if _fits(m_seg, T)), None)
    out = [chunk]
    if first is None or any(first > b and b >= T0 for b, _ in upper):
        out.append(("RS-13 T | mSeg, 16-row rounds",
                    f"design.md §3.3 / development.md §3.2 (R10): no tail by default and rounds of whole 16-row "
                    f"blocks (§5.6); the T in [{T0}, {min(b for b, _ in upper)}] do not divide mSeg = {m_seg} "
                    f"into 16-aligned rounds"
                    + ("" if first is None else f" (the first that does is T = {first})")))
    out += [rule for b, rule in upper if first is not None and first > b]
    return tuple(sorted(out, key=lambda r: int(r[0].split()[0].split("-")[1])))


def make_rs_comm_tiling(m: int, rank_size: int, head_m_size: int | None, n: int | None = None) -> RsCommTiling:
    """`commTilingData` of M rows at R ranks: the given headMSize (a tail round allowed), or the default search
    over N's chunk bound (`n` then required; module docstring)."""
    m_seg = m // rank_size
    if head_m_size is None:
        if n is None:
            raise ValueError("the default headMSize is searched over N's chunk bound: pass n")
        T = search_rounds(m_seg, n, rank_size)
        if T is None:
            return RsCommTiling(m_seg, m_seg, 1, 0, 0, _binding_rules(m_seg, n, rank_size))
        return RsCommTiling(m_seg, m_seg // T, T, 0, 0)
    head = int(head_m_size)
    if head <= 0:
        return RsCommTiling(m_seg, head, 0, 0, 0)
    head = min(head, m_seg)
    head_cnt = m_seg // head
    tail = m_seg % head
    return RsCommTiling(m_seg, head, head_cnt, tail, 1 if tail else 0)


def rs_round_tiling(rows: int, n: int, k: int, elem: ElemFormat, b_elem: ElemFormat,
                    platform: PlatformSpec = DAV_3510, aic_num: int | None = None) -> QuantMatmulTilingData:
    """The SWAT tiling of one round's problem (rows = R * curTileM; development.md §5.5 subMm / tailMm)."""
    swat = QuantMatmulTilingSwat(platform, aic_num=aic_num, isOpenOptimize=False, enableMTailAlign=True)
    return swat.GetTilingData(rows, n, k, False, True, elem, b_elem)


def per_block_max_base_m(m: int, rank_size: int) -> int:
    """The ST host's `dynMaxBaseM` (ubmem `main.cpp` 0f2296ba3e `CreateTilingDataAndContext`): min(256,
    floor16(M / R)), falling back to min(256, floor16(M / 2)), then to min(256, M), while below 16."""
    dyn = min(PB_MAX_BASIC_BLOCK_SIZE, (m // rank_size) // ROW_ALIGN * ROW_ALIGN)
    if dyn < ROW_ALIGN:
        dyn = min(PB_MAX_BASIC_BLOCK_SIZE, (m // 2) // ROW_ALIGN * ROW_ALIGN)
    if dyn < ROW_ALIGN:
        dyn = min(PB_MAX_BASIC_BLOCK_SIZE, m)
    return dyn


def per_block_tiling(m: int, n: int, k: int, rank_size: int, elem: ElemFormat, b_elem: ElemFormat,
                     weight_nz: bool, platform: PlatformSpec = DAV_3510,
                     aic_num: int | None = None) -> QuantMatmulTilingData:
    """The shipped kernel's host tiling (ubmem `main.cpp` 0f2296ba3e): SWAT with optimization off, M-tail
    alignment on, `SetMaxBaseM(dynMaxBaseM)`, then `GetTilingData(M, n, k, false, false)` for the launcher's NZ
    B (b993c14f `LayoutB = nz_layout_ptn`); the (N, K) B of weight_format "ND" (the launcher's earlier "ND
    layout (TransB=true)" path its header still names) is tiled with transB true under the same cap."""
    swat = QuantMatmulTilingSwat(platform, aic_num=aic_num, isOpenOptimize=False, enableMTailAlign=True)
    swat.SetMaxBaseM(per_block_max_base_m(m, rank_size))
    return swat.GetTilingData(m, n, k, False, not weight_nz, elem, b_elem)


def rs_round_tilings(ct: RsCommTiling, m: int, n: int, k: int, elem: ElemFormat, b_elem: ElemFormat,
                     platform: PlatformSpec = DAV_3510, aic_num: int | None = None
                     ) -> tuple[QuantMatmulTilingData, ...]:
    """The tiling of every round (development.md §5.5 / §5.7): T = 1 the full `mmTilingData` =
    GetTilingData(M, n, k); T > 1 head rounds `subMmTilingData` = GetTilingData(headMSize, n, k) with §5.6's
    baseM link (SWAT baseM 256 and 128 | headMSize: baseM halved to 128, the other fields kept), a tail round
    `tailMmTilingData` = GetTilingData(R * tailMSize, n, k). Seed 000 §4.6 item 3 keeps one tile for every
    round ("tile size unchanged, only problem M shrinks"); the design spec is followed."""
    if ct.commTurn <= 1:
        return (rs_round_tiling(m, n, k, elem, b_elem, platform, aic_num),)
    sub = rs_round_tiling(ct.headMSize, n, k, elem, b_elem, platform, aic_num)
    if sub.baseM == HALVED_BASE_M * 2 and ct.headMSize % HALVED_BASE_M == 0:
        sub = replace(sub, baseM=HALVED_BASE_M)
    if not ct.tailCnt:
        return (sub,) * ct.headCnt
    rank_size = m // ct.mSeg
    tail = rs_round_tiling(rank_size * ct.tailMSize, n, k, elem, b_elem, platform, aic_num)
    return (sub,) * ct.headCnt + (tail,) * ct.tailCnt


def qmrs_shape_violations(m: int, k: int, n: int, rank_size: int) -> list[tuple[str, str]]:
    """Rules both kernels share (the shipped ST host's ParseArgs; seed 000 §4.7)."""
    out: list[tuple[str, str]] = []
    if min(m, k, n) <= 0:
        return [("QMRS-0 m, k, n > 0", f"M = {m}, K = {k}, N = {n}")]
    if rank_size < 1:
        return [("QMRS-0 R >= 1", f"R = {rank_size}: M is split into R segments")]
    if m % rank_size:
        out.append(("QMRS-1 M % R == 0", f"M = {m} is not divisible by R = {rank_size}: the output is split along "
                                         f"M into R equal segments (seed 000 §4.7)"))
    if k % MX_GROUP_SIZE:
        out.append(("QMRS-2 K % 32 == 0", f"K = {k} is not a multiple of {MX_GROUP_SIZE} (one E8M0 scale per 32 "
                                          f"elements; the ST host refuses it)"))
    if CeilDiv(k, MXFP_DIVISOR_SIZE) % 2:
        out.append(("QMRS-3 ceil(K/64) even", f"ceil(K / 64) = {CeilDiv(k, MXFP_DIVISOR_SIZE)} is odd (the ST host "
                                              f"refuses it; the MXFP8 scale alignment of one matmul's K)"))
    if rank_size > MAX_RANKS:
        out.append(("QMRS-4 R <= 64", f"{rank_size} ranks: HCCL_MTE_MAX_RANK_NUM is {MAX_RANKS}"))
    return out


def rounds_violations(ct: RsCommTiling, n: int, rank_size: int, used: int | None,
                      platform: PlatformSpec = DAV_3510) -> list[tuple[str, str]]:
    """The design-spec kernel's host checks (development.md §3.1) on a derived tiling; `used` is the launch's
    usedCoreNum (None: not yet known)."""
    out: list[tuple[str, str]] = []
    if ct.unfit:
        names = ", ".join(rule for rule, _ in ct.unfit)
        return [(f"RS-11 no rounds tiling ({names})",
                 f"no T rounds of mSeg = {ct.mSeg} rows at N = {n}, R = {rank_size} meet development.md §3.2's "
                 f"joint constraints; binding: " + "; ".join(f"{rule}: {reason}" for rule, reason in ct.unfit))]
    if ct.headMSize <= 0:
        return [("RS-1 head_m_size > 0", f"head_m_size = {ct.headMSize}: a round has rows (development.md §5.7 "
                                         f"commTilingData)")]
    if ct.commTurn > 1 and ct.headMSize % ROW_ALIGN:
        out.append(("RS-2 head_m_size % 16 == 0", f"headMSize = {ct.headMSize} rows with T = {ct.commTurn} rounds: "
                                                  f"a round's rows must be whole 16-row blocks (development.md "
                                                  f"§5.6)"))
    if ct.tailCnt and ct.tailMSize % ROW_ALIGN:
        out.append(("RS-3 tail % 16 == 0", f"mSeg = {ct.mSeg} = {ct.headCnt} x {ct.headMSize} + {ct.tailMSize}: the "
                                           f"tail round's rows must be 16-aligned (development.md §5.6)"))
    if ct.commTurn > MAX_ROUNDS:
        out.append(("RS-4 T <= 15", f"T = {ct.commTurn} rounds: the AIC may run T flag Sets ahead of its AIV and a "
                                    f"counter holds {MAX_ROUNDS} (development.md §3.1 #5); use headMSize >= "
                                    f"ceil(mSeg / 15) = {CeilDiv(ct.mSeg, MAX_ROUNDS)}"))
    if rank_size * ct.commTurn > MAX_RANK_ROUNDS:
        out.append(("RS-5 R * T <= 32", f"R = {rank_size} x T = {ct.commTurn} > {MAX_RANK_ROUNDS} "
                                        f"(MAX_FRAGMENT_COUNT, development.md §3.1 #8)"))
    chunk = ct.headMSize * n * C_BYTES
    if chunk > MAX_ROUND_CHUNK_BYTES:
        out.append(("RS-6 tileM * N * 2 <= 512 KiB", f"one round's chunk to one peer is {ct.headMSize} x {n} x 2 = "
                                                      f"{chunk} B > {MAX_ROUND_CHUNK_BYTES} B (development.md "
                                                      f"§3.1 #7)"))
    if used is not None:
        if used < rank_size:
            out.append(("RS-10 usedCoreNum >= R", f"usedCoreNum (block_dim) {used} < R = {rank_size}: the last R "
                                                  f"AIVs communicate, one per target, so the TeamBarrier rendezvous "
                                                  f"never completes (development.md §3.1 #3; #9 fails too)"))
        elif used < rank_size + 1:
            out.append(("RS-7 usedCoreNum - R >= 1", f"usedCoreNum (block_dim) {used} with R = {rank_size}: the last "
                                                     f"R AIVs communicate and none is left to reduce "
                                                     f"(development.md §3.1 #9)"))
        if used > platform.aic_count:
            out.append(("RS-8 block_dim <= AIC count", f"block_dim {used} > {platform.aic_count} AICs (MIX_AIC_1_1: "
                                                       f"one AIC a block)"))
    return out


def rounds_alignment_violations(n: int) -> list[tuple[str, str]]:
    """development.md §3.1 #2 ("K%32、N%16 等", else "跨卡 Win 槽污染": the cross-rank window slots are
    corrupted): N % 16 == 0, so that a row of the bf16 staging, window and y is whole 32-byte blocks. K % 32 is
    QMRS-2. Checked for impl "rounds" unless the call opts out with `ragged_n=True` (the kernel studied past
    the spec: exact-byte copies run; the rounded tail copy, `tail_copy_rounded`, is the corruption). The
    shipped kernel's host (ubmem main.cpp 0f2296ba3e ParseArgs) has no N rule: per_block does not check it."""
    if n % N_ALIGN:
        return [("RS-12 N % 16 == 0", f"N = {n}: a bf16 row of {n * C_BYTES} B is not whole 32-byte blocks; the "
                                      f"design spec's host refuses it (development.md §3.1 #2: the cross-rank "
                                      f"window slots are corrupted otherwise; ragged_n=True runs it past the spec)")]
    return []


class _RoundL1Map(L1BufferOffsets):
    """The L1 map `QmmMxBlockMmadFragment.Init` lays out for one round's tiling (streamed A, the Init state the
    rounds kernel passes: kL1 = stepK * baseK, scaleKL1, nBufferNum), computed on the host by the block's own
    `InitNoneFullLoadL1BufferOffsets`."""

    def __init__(self, t: QuantMatmulTilingData, elem: ElemFormat, platform: PlatformSpec) -> None:
        self.T: Any = SimpleNamespace(AType=elem)   # the block's template: only its AType is read
        self.TOTAL_L1_SIZE = platform.l1_size
        self.kL1_ = t.stepK * t.baseK
        self.scaleKL1_ = t.scaleKL1
        self.l1BufNum_ = t.nBufferNum
        self.baseM_, self.baseN_ = t.baseM, t.baseN

    def end(self, isBias: bool) -> int:
        """The end of the last buffer (Init's biasL1OneBuffer = baseN * sizeof(float) with a bias, else 0)."""
        scaleBL1OneBuffer = self.baseN_ * CeilDiv(self.scaleKL1_, MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE
        regions = self.InitNoneFullLoadL1BufferOffsets(
            self.baseM_, self.l1BufNum_ >> 1, (self.baseN_ * self.kL1_) >> (1 if self.T.AType.is_fp4 else 0),
            scaleBL1OneBuffer,
            self.baseN_ * BIAS_BYTES if isBias else 0)
        return max(off + size for _, off, size in regions if size > 0)


def rounds_bias_violations(tilings: tuple[QuantMatmulTilingData, ...], elem: ElemFormat,
                           platform: PlatformSpec = DAV_3510) -> list[tuple[str, str]]:
    """development.md §3.1 #6 (\"新增输入 buffer 预算（bias 等 L1/BT 兜底核算）\", else L1 / BT overflow): with a
    bias, QmmMxBlockMmadFragment reserves baseN * 4 bytes of L1 per scale buffer after ScaleB, and the bias
    table holds two (1, baseN) float slots. The SWAT tiling emulated here fills L1 without that reserve (the
    revision with `SetBiasInfo` is not emulated), so a round whose buffers already end at the L1 size (baseM =
    baseN = 256, scaleKL1 = K = 8192) has no room for the bias: refused before the launch instead of the
    block's Init overflowing L1 on every AIC."""
    for t, tiling in enumerate(tilings):
        l1 = _RoundL1Map(tiling, elem, platform)
        end = l1.end(True)
        if end > platform.l1_size:
            return [("RS-9 bias L1/BT budget", f"development.md §3.1 #6, round {t}: with a bias the L1 buffers of "
                                              f"baseM {tiling.baseM}, "
                                              f"baseN {tiling.baseN}, kL1 {l1.kL1_}, scaleKL1 {tiling.scaleKL1} end "
                                              f"at {end} B > L1 {platform.l1_size} B (without it at {l1.end(False)})")]
        bt = BIAS_TABLE_SLOTS * tiling.baseN * BIAS_BYTES
        if bt > platform.bias_table_size:
            return [("RS-9 bias L1/BT budget", f"development.md §3.1 #6, round {t}: two (1, {tiling.baseN}) float "
                                              f"bias slots need {bt} B > "
                                              f"the {platform.bias_table_size} B bias table")]
    return []


def per_block_violations(rank_size: int, used: int, platform: PlatformSpec = DAV_3510) -> list[tuple[str, str]]:
    """The shipped kernel's launch rules: AIV blocks 0 .. R - 1 run the status handshake (one per peer), so the
    2 * block_dim AIVs of MIX_AIC_1_2 must cover R; block_dim at most the AIC count."""
    out: list[tuple[str, str]] = []
    if 2 * used < rank_size:
        out.append(("PB-1 2 * block_dim >= R", f"block_dim {used} gives {2 * used} AIVs for R = {rank_size}: AIV v "
                                                f"handshakes with rank v, so ranks >= {2 * used} would never be "
                                                f"waited for"))
    if used > platform.aic_count:
        out.append(("PB-2 block_dim <= AIC count", f"block_dim {used} > {platform.aic_count} AICs"))
    return out
