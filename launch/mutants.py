"""Mutation gate: plant one curated one-line bug at a time in a temporary copy of the package and run the
tests that should catch it; print killed / survived per mutant. Exit 0 only when every mutant is killed.

Each mutant is located by an exact source pattern (file + text that must occur exactly once); when the code
has moved and the pattern is gone (or ambiguous), the gate stops with "pattern not found" before running
anything, never silently skips. A pattern may span several lines to make it unique; the change itself is
one line. Killed = the selected tests fail (or the run hangs past its timeout, which the suite's own
deadlines should prevent); survived = they pass with the bug planted.

    python launch/mutants.py                 # every mutant
    python launch/mutants.py --list          # names, files, tests
    python launch/mutants.py -k drain -k put # a subset (substring of the name)
    python launch/mutants.py --baseline      # first check the selected tests pass unmutated

Every later operator adds its own mutants to MUTANTS (one per behaviour that matters).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
COPIED = ("mc2emu", "tests", "launch", "pyproject.toml")   # launch: the stress driver the stress tests load
# A mutant whose tests run longer than this is counted as killed by timeout (the suite's own deadlines are
# seconds; a hang past this is still a failure the user would see).
RUN_TIMEOUT_S = 900
ENV_PINS = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
            "PYTHONDONTWRITEBYTECODE": "1", "PYTHONUNBUFFERED": "1"}

A2A_MPI = "tests/apace/test_all_to_all_quant_matmul_mpi.py"
A2A_MULTI = "tests/apace/test_a2a_multi_tile_mpi.py"
HAZ_MPI = "tests/apace/test_hazard_checks_mpi.py"
DIAG_MPI = "tests/apace/test_diagnoses_mpi.py"
AG_MPI = "tests/apace/test_all_gather_quant_matmul_mpi.py"
SLOT_MPI = "tests/apace/test_all_gather_slot_ring_mpi.py"
AG_LIMITS_MPI = "tests/apace/test_all_gather_source_limits_mpi.py"
AG_KERNEL = "mc2emu/apace/all_gather_qbmm_mx_kernel.py"
AG_URMA = "mc2emu/apace/all_gather_mx_matmul_urma_impl.py"
QMRS_MPI = "tests/apace/test_quant_matmul_reduce_scatter_mpi.py"
QMRS_TILING = "tests/tiling/test_quant_matmul_reduce_scatter_tiling.py"
QMRS_TILING_SRC = "mc2emu/tiling/quant_matmul_reduce_scatter_tiling.py"
QMRS_ROUNDS = "mc2emu/apace/quant_matmul_reduce_scatter_rounds_impl.py"
QMRS_GOLDEN = "mc2emu/ops/quant_matmul_reduce_scatter_golden.py"
QMRS_EPILOGUE = "mc2emu/apace/block_epilogue_all_to_all.py"
QBMM = "tests/blaze/test_quant_batch_matmul_mx.py"
WQMM = "tests/blaze/test_weight_quant_matmul.py"
WQMM_CHUNKS = WQMM + "::test_several_k_chunks_odd_count_and_tiles_per_core"
WQ_SCHED = "tests/blaze/test_block_scheduler_matmul_swat.py"
BMMAD = "tests/blaze/test_block_mmad_mx.py"
INDEP = "tests/numerics/test_golden_independence.py"
DIAG = "tests/runtime/test_diagnoses.py"
GMM = "tests/ops/test_grouped_matmul_mx.py"
XL_SRC = "mc2emu/check/cross_launch.py"
XL_MPI = "tests/check/test_cross_launch_mpi.py"
COMM_LOOP = "tests/comm/test_communicator_mpi.py"
NOTICE_REFUSES = COMM_LOOP + "::test_a_notice_refuses_the_next_call_spares_earlier_launches_and_close_needs_no_barrier"
GMM_SCHED = "tests/tiling/test_gmm_mx_schedule.py"
GMM_CLI = "tests/cli/test_gmm_plan_cli.py"
GMM_BLAZE = "tests/ops/test_grouped_matmul_blaze.py"
GMM_NZ = "tests/ops/test_grouped_matmul_nz.py"
GMM_TILING = "tests/tiling/test_gmm_mx_tiling.py"
PREDICT_COST = "tests/predict/test_cost_model.py"
PREDICT_REPLAY = "tests/predict/test_replay.py"
PREDICT_KNOBS = "tests/predict/test_predict_knobs.py"
PINS = "tests/ops/test_recorded_outputs.py"
FRAG = "mc2emu/apace/basic/fragment_tensor.py"
FRAG_TEST = "tests/apace/test_fragment_tensor.py"
PINS_MPI = "tests/ops/test_recorded_outputs_mpi.py"
DEADLOCK_MPI = "tests/check/test_deadlock_diagnosis_mpi.py"
EDGES_MPI = "tests/checkers/test_checker_edges_mpi.py"


@dataclass(frozen=True)
class Mutant:
    """One planted bug: in `path`, the unique text `old` becomes `new`; `serial` tests run with plain pytest,
    `mpi` tests under mpirun with `ranks` ranks (`--only-mpi`)."""

    name: str
    path: str
    old: str
    new: str
    serial: tuple[str, ...] = ()
    mpi: tuple[str, ...] = ()
    ranks: int = 2
    why: str = ""
    extra: dict[str, str] = field(default_factory=dict)


def _existing(*paths: str) -> tuple[str, ...]:
    """Test paths that exist in the source tree (tests added later are listed before they exist)."""
    return tuple(p for p in paths if (REPO / p.split("::")[0]).exists())


MUTANTS: list[Mutant] = [
    # -- numerics (shared by kernel and, before step 5, by the goldens) --------------------------------------
    Mutant("E8M0 scale decode doubles every scale", "mc2emu/numerics/block_scale.py",
           'return np.take(E8M0_LUT, as_codes(scale_codes, "scale_codes"))',
           'return np.take(E8M0_LUT, as_codes(scale_codes, "scale_codes")) * 2',
           serial=_existing(QBMM, BMMAD, INDEP), mpi=(A2A_MPI,),
           why="kernel-vs-golden tests must see a wrong scale decode (goldens decode independently)"),
    Mutant("element decode: mantissa fraction halved", "mc2emu/numerics/formats.py",
           "frac = man / float(1 << info.mbits)", "frac = man / float(2 << info.mbits)",
           serial=_existing(QBMM, BMMAD, INDEP),
           why="every element LUT is wrong; goldens decode through ml_dtypes / np.ldexp"),
    Mutant("E8M0 shared exponent off by one (OCP floor rule)", "mc2emu/numerics/block_scale.py",
           "scale_exp = np.clip(e - 1 - fmt.emax, E8M0_MIN_EXP, E8M0_MAX_EXP)",
           "scale_exp = np.clip(e - fmt.emax, E8M0_MIN_EXP, E8M0_MAX_EXP)",
           serial=("tests/numerics/test_quantize.py",)),
    Mutant("fixpipe cast truncates instead of RNE", "mc2emu/numerics/mx_matmul.py",
           "        return acc.astype(out.dtype)",
           "        return (acc.view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(out.dtype)",
           serial=("tests/numerics/test_mx_matmul.py", QBMM)),
    # -- Blaze BlockMmad -------------------------------------------------------------------------------------
    Mutant("accumulation index: REMOTE mmads count from 1", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "                remoteRankCnt = 0\n", "                remoteRankCnt = 1\n",
           mpi=(A2A_MPI,)),
    Mutant("splitKIdx out-of-order report removed", "mc2emu/blaze/gemm/block/split_k_sequence.py",
           "        elif splitKIdx != expected:", "        elif False:",
           serial=(BMMAD,)),
    Mutant("bias added on every split, not split 0 only", "mc2emu/blaze/gemm/block/block_mmad_mx.py",
           "needBiasInL1 = hasBias and iter0 == 0 and isFirstSplitK",
           "needBiasInL1 = hasBias and iter0 == 0",
           serial=(BMMAD, QBMM)),
    Mutant("bias dropped in the MMAD", "mc2emu/blaze/gemm/block/block_mmad_mx.py",
           "            tensorL0C += self._bt", "            pass",
           serial=(QBMM,), mpi=(A2A_MPI,)),
    Mutant("QBMM 3-D bias: batch offset missing", "mc2emu/blaze/gemm/kernel/kernel_qbmm_mx.py",
           "self.biasGmAddr_ = self.biasGmAddr_ + self.batchCOffset_ * n * self.BlockMmad.BiasType.itemsize",
           "self.biasGmAddr_ = self.biasGmAddr_",
           serial=(QBMM,)),
    # -- grouped_matmul_mx (CGMCT kernel, BlockMmadMx, GQmmEmptyTensor, write-count check) -------------------
    Mutant("GMM BlockMmadMx: B outer when kAL1 >= kBL1", "mc2emu/blaze/gemm/block/block_mmad_mx_cgmct.py",
           "self.orderAL1BL1_ = self.kAL1_ >= self.kBL1_", "self.orderAL1BL1_ = self.kAL1_ < self.kBL1_",
           serial=(f"{GMM}::test_l1_chunk_order_follows_kal1_kbl1",),
           why="the loop order is only visible in the chunk reads: the test counts them"),
    Mutant("GMM BlockMmadMx: cmatrixInitVal also with bias", "mc2emu/blaze/gemm/block/block_mmad_mx_cgmct.py",
           "initCMatrix = kL0Offset == 0 and not self.isBias_", "initCMatrix = kL0Offset == 0",
           serial=(f"{GMM}::test_fp4_with_bias_and_fp32_output",)),
    Mutant("GMM BlockMmadMx: scale column not taken modulo scaleKL1", "mc2emu/blaze/gemm/block/block_mmad_mx_cgmct.py",
           "return buf, (kStart % self.scaleKL1_) // MX_GROUP_SIZE, CeilDiv(kLen, MX_GROUP_SIZE)",
           "return buf, kStart // MX_GROUP_SIZE, CeilDiv(kLen, MX_GROUP_SIZE)",
           serial=(f"{GMM}::test_split_k_ut_shape_and_scale_reload",)),
    Mutant("GMM BlockMmadMx: L0C flips without dbL0C", "mc2emu/blaze/gemm/block/block_mmad_mx_cgmct.py",
           "        if self.enableL0cPingPong_:\n            self.l0cPingPong_ += 1",
           "        if True:\n            self.l0cPingPong_ += 1",
           serial=(f"{GMM}::test_seed_600_rows_balance_and_trace_follow_the_schedule",)),
    Mutant("GMM UpdateOffset: split-M A offset ignores the group's first row",
           "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "off[IDX_A_OFFSET] = ((pre - m) * k) >> shift", "off[IDX_A_OFFSET] = (pre * k) >> shift",
           serial=(f"{GMM}::test_split_m_matches_golden",)),
    Mutant("GMM UpdateOffset: split-K scale rows without the per-group block",
           "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "scaleK = ((pre - k) // MXFP_DIVISOR_SIZE + groupIdx) * MXFP_MULTI_BASE_SIZE",
           "scaleK = ((pre - k) // MXFP_DIVISOR_SIZE) * MXFP_MULTI_BASE_SIZE",
           serial=(f"{GMM}::test_split_k_zero_groups_are_zero_filled_by_the_aivs",)),
    Mutant("GMM UpdateOffset: group 0 offsets reset (the source keeps them)",
           "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "        if groupIdx == 0:\n            return", "        if groupIdx == -1:\n            return",
           serial=(f"{GMM}::test_sparse_group0_after_another_group_reports_write_count",),
           why="the emulator must reproduce the source's early return, and report what it does"),
    Mutant("GMM GQmmEmptyTensor: K == 0 groups not zero-filled", "mc2emu/blaze/gemm/kernel/gqmm_cgmct_mx_kernel.py",
           "        if kSize == 0:", "        if kSize < 0:",
           serial=(f"{GMM}::test_split_k_zero_groups_are_zero_filled_by_the_aivs",),
           why="y starts zeroed here, so only the write-count check sees the never-written groups"),
    Mutant("GMM: a split-K list covering less than K refused again", "mc2emu/ops/grouped_matmul_mx_op.py",
           "    if split_k and sum(sizes) > k:", "    if split_k and sum(sizes) != k:",
           serial=(f"{GMM}::test_split_k_list_covering_less_than_k_runs_as_the_device",)),
    Mutant("GMM: split-K with M or N 0 sent to the tiling", "mc2emu/ops/grouped_matmul_mx_op.py",
           "    if split_k and (m == 0 or n == 0):", "    if False:",
           serial=(f"{GMM}::test_split_k_with_m_or_n_zero_returns_the_empty_output",)),
    Mutant("GMM tiling: M or N 0 not refused (divides by zero)", "mc2emu/tiling/grouped_quant_matmul_shape_attrs.py",
           "    if mSize == 0 or nSize == 0:", "    if False:",
           serial=(f"{GMM}::test_split_k_with_m_or_n_zero_returns_the_empty_output",)),
    Mutant("GMM write count: double writes not counted", "mc2emu/check/write_count.py",
           "        bad = counts != self.expected", "        bad = counts < self.expected",
           serial=(f"{GMM}::test_sparse_group0_after_another_group_reports_write_count",)),
    Mutant("GMM BaseMBalance skipped", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx.py",
           "            self.curBaseM_ = Align16(CeilDiv(m, mCnt))", "            self.curBaseM_ = baseM",
           serial=(f"{GMM}::test_seed_600_rows_balance_and_trace_follow_the_schedule", GMM_SCHED)),
    Mutant("GMM tail split also when fewer than half the cores are free", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx.py",
           "return bs.GetEndBlockIdx() + 1 <= (bs.blockNum_ >> 1)", "return bs.GetEndBlockIdx() + 1 <= bs.blockNum_",
           serial=(f"{GMM}::test_tail_split_needs_half_the_cores_free", GMM_SCHED)),
    # -- grouped_matmul_mx with an NZ weight (CheckShapeForWeightNz, CopyInB1WeightNz, NZ offsets / L2 hint) -----
    Mutant("GMM NZ tiling: N or K of 1 accepted", "mc2emu/tiling/grouped_quant_matmul_shape_attrs.py",
           "    if k == 1 or n == 1:", "    if False:",
           serial=(GMM_TILING, f"{GMM_NZ}::test_nz_refusals_name_the_source_rule")),
    Mutant("GMM NZ tiling: transB storage dims checked as not transposed",
           "mc2emu/tiling/grouped_quant_matmul_shape_attrs.py",
           "    if not inp.transB:\n        checks = (", "    if True:\n        checks = (",
           serial=(GMM_TILING,)),
    Mutant("GMM NZ tiling: C0 32 for a 4-bit weight", "mc2emu/tiling/grouped_quant_matmul_shape_attrs.py",
           "weightNzLastDim = WEIGHTNZ_64 if isFp4 else WEIGHTNZ_32", "weightNzLastDim = WEIGHTNZ_32",
           serial=(GMM_TILING,)),
    Mutant("GMM NZ tiling: second-last storage dim not checked", "mc2emu/tiling/grouped_quant_matmul_shape_attrs.py",
           "    if wShape[nzDimOffset + WEIGHTNZ_THIRD_DIM] != WEIGHTNZ_16:", "    if False:",
           serial=(GMM_TILING,)),
    Mutant("GMM NZ BlockMmad: B copied as ND", "mc2emu/blaze/gemm/block/block_mmad_mx_cgmct.py",
           "        if self.formatBNz:\n            self.CopyInB1WeightNz(",
           "        if False:\n            self.CopyInB1WeightNz(",
           serial=(f"{GMM_NZ}::test_nz_weight_gives_the_nd_weights_bits",)),
    Mutant("GMM NZ BlockMmad: K tail not read to 16 rows", "mc2emu/blaze/gemm/block/block_mmad_mx_cgmct.py",
           "            curGmBKL1NZ = Align16(tile.curGmBKL1)", "            curGmBKL1NZ = tile.curGmBKL1",
           serial=(f"{GMM_NZ}::test_nz_padding_is_read_but_never_used",)),
    Mutant("GMM NZ kernel: per-group B offset of an ND weight", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "                self.perGroupBOffset_ = Align(p.n, self.c0Size) * Align16(p.k)",
           "                self.perGroupBOffset_ = p.n * p.k",
           serial=(f"{GMM_NZ}::test_nz_weight_gives_the_nd_weights_bits",)),
    Mutant("GMM NZ kernel: transB group offset pads K to 16", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "                self.perGroupBOffset_ = Align16(p.n) * Align(p.k, self.c0Size)",
           "                self.perGroupBOffset_ = Align16(p.n) * Align16(p.k)",
           serial=(f"{GMM_NZ}::test_nz_weight_gives_the_nd_weights_bits",)),
    Mutant("GMM NZ kernel: tile B offset of an ND weight", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "        return nOffset * C0Size if transB else nOffset * Align16(k)",
           "        return nOffset * C0Size if transB else nOffset * k",
           serial=(f"{GMM_NZ}::test_nz_weight_gives_the_nd_weights_bits",)),
    Mutant("GMM NZ kernel: L2 hint by the ND weight's rule", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "        if self.weightNz:\n            disable = curBaseM >= mSize",
           "        if False:\n            disable = curBaseM >= mSize",
           serial=(f"{GMM_NZ}::test_nz_l2_hint_needs_only_one_m_tile",)),
    Mutant("GMM NZ CLI: the NZ mode passes the ND weight", "mc2emu/cli/operators/grouped_matmul_mx.py",
           "        kw.update(weight_format=\"NZ\", weight_dtype=case.dtype or ElemFormat.E4M3)",
           "        kw.update(weight_dtype=case.dtype or ElemFormat.E4M3)",
           serial=(f"{GMM_CLI}::test_nz_mode_runs_the_nz_weight",)),
    Mutant("GMM NZ: the blaze variants not refused", "mc2emu/ops/grouped_matmul_mx_op.py",
           "    if weight_nz and tail_variant is not TailSplitVariant.CGMCT:", "    if False:",
           serial=(f"{GMM_NZ}::test_nz_refusals_name_the_source_rule",)),
    # -- grouped_matmul_mx variants: the IS_BLAZE kernel (kernel_qgmm_mx.h / block_mmad_qgmm_mx.h) and the sample ----
    Mutant("GMM Blaze BlockMmad: unitFlag by baseK (CGMCT's rule)", "mc2emu/blaze/gemm/block/block_mmad_qgmm_mx.py",
           "isFinal = absKOffset + tile.curKL0 >= self.k_", "isFinal = absKOffset + self.baseK_ >= self.k_",
           serial=(f"{GMM_BLAZE}::test_unitflag_rule_on_a_short_inner_step",)),
    Mutant("GMM variant blaze runs CGMCT's BlockMmad", "mc2emu/ops/grouped_matmul_mx_host.py",
           "Mmad = BlockMmadQgmmMx if p.variant is TailSplitVariant.BLAZE else BlockMmadMxCgmct",
           "Mmad = BlockMmadMxCgmct",
           serial=(f"{GMM_BLAZE}::test_unitflag_rule_on_a_short_inner_step",)),
    Mutant("GMM Blaze kernel: the sample's tail alignments", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx.py",
           "bs.SetTailAlign(1, BLOCK_CUBE if self.transB else self.c0Size)  # Blaze split-M",
           "bs.SetTailAlign(BLOCK_CUBE, BLOCK_CUBE if self.transB else INNER_AXIS_MIN_SPLIT_VAL)",
           serial=(GMM_BLAZE,)),
    Mutant("GMM Blaze kernel: count-only refusal of the sample", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx.py",
           "if self.variant is TailSplitVariant.BLAZE_SAMPLE and", "if self.variant is not TailSplitVariant.CGMCT and",
           serial=(f"{GMM_BLAZE}::test_blaze_reads_every_group_list_type",)),
    Mutant("GMM Blaze scheduler: CGMCT's minimum pieces", "mc2emu/blaze/gemm/block/block_scheduler_gmm_aswt.py",
           "blaze = self.variant_ is not TailSplitVariant.CGMCT",
           "blaze = self.variant_ is TailSplitVariant.BLAZE_SAMPLE",
           serial=(GMM_BLAZE,)),
    Mutant("GMM Blaze BlockMmad: B-major passes A's start as B's", "mc2emu/blaze/gemm/block/block_mmad_qgmm_mx.py",
           "self.Iterate(tile, aL1BufId, bL1BufId, scaleL1BufId, kInner, kOuter, 0, kInner - kOuter,",
           "self.Iterate(tile, aL1BufId, bL1BufId, scaleL1BufId, kOuter, kOuter, 0, kInner - kOuter,",
           serial=(GMM_BLAZE,)),
    Mutant("GMM CLI: the mode's kernel variant not passed to the operator", "mc2emu/cli/operators/grouped_matmul_mx.py",
           "variant=_mode(case).gmm_variant.value, **_op_kw(case))", "**_op_kw(case))",
           serial=(f"{GMM_CLI}::test_gmm_variant_mode_option_runs_every_mode_on_that_kernel",),
           why="the variants' values are bitwise equal: only the fixpipe pieces tell the kernels apart"),
    Mutant("GMM CLI: --print-schedule ignores --gmm-variant", "mc2emu/cli/operators/grouped_matmul_mx.py",
           "variant = options.gmm_variant or TailSplitVariant.CGMCT", "variant = TailSplitVariant.CGMCT",
           serial=(f"{GMM_CLI}::test_print_schedule_per_variant",)),
    # -- runtime ---------------------------------------------------------------------------------------------
    Mutant("atomic add overwrites", "mc2emu/runtime/gm.py",
           "dst[...] = (dst.astype(np.float32) + value.astype(np.float32)).astype(dtype)",
           "dst[...] = value.astype(dtype)",
           serial=(BMMAD, QBMM), mpi=(A2A_MPI,)),
    Mutant("flag pairing: Wait does not consume", "mc2emu/runtime/cross_core.py",
           "            c.value -= 1\n            token = c.tokens.popleft()",
           "            c.value -= 0\n            token = c.tokens.popleft()",
           serial=("tests/runtime/test_cross_core_flags.py",)),
    Mutant("flag pairing: leftover counts not reported", "mc2emu/runtime/cross_core.py",
           "                if c.value:\n", "                if c.value < 0:\n",
           serial=("tests/runtime/test_cross_core_flags.py",)),
    Mutant("truncated flag id report names the effective id as given", "mc2emu/runtime/cross_core.py",
           'the hardware uses id {eff}"', 'the hardware uses id {fid}"',
           serial=_existing(DIAG)),
    Mutant("a long polled wait keeps the 1 ms backoff cap", "mc2emu/runtime/waiting.py",
           "backoff = min(backoff * 2, poll_cap(now - rec.since))",
           "backoff = min(backoff * 2, POLL_BACKOFF_MAX_S)",
           serial=("tests/runtime/test_waiting.py",),
           why="64 ranks on 2 cores: ranks polling the host barrier every 1 ms starved the ranks still working"),
    Mutant("clock offset keeps the widest bracketed sample", "mc2emu/trace/chrome_trace.py",
           "return min(_bracketed_offset() for", "return max(_bracketed_offset() for",
           serial=("tests/predict/test_clock_offset.py",)),
    Mutant("replay: stamps read as recorded, not raised to their seq order", "mc2emu/predict/replay.py",
           "self.wall.extend(itertools.accumulate((r.t_ns + offset_ns for r in ordered), max))",
           "self.wall.extend(r.t_ns + offset_ns for r in ordered)",
           serial=("tests/predict/test_replay.py",),
           why="16 ranks: a put stamped before a GIL hand-off, its seq after another core's: a replay cycle"),
    Mutant("a protocol-only device bounds its compute slots", "mc2emu/runtime/device.py",
           "ComputeSlots(compute_slots, unlimited=not data)", "ComputeSlots(compute_slots)",
           serial=("tests/host/test_compute_slots.py",)),
    Mutant("a GM write-out is not progress", "mc2emu/runtime/core.py",
           "        self.device.waiter.progress.bump()   # a write-out is progress",
           "        pass   # a write-out is progress",
           serial=("tests/runtime/test_waiting.py",)),
    # -- A2A kernel: wait order, dependency tile, drain, rank order --------------------------------------------
    Mutant("in-order wait stops one tile early", "mc2emu/apace/comm_policy.py",
           "        while st.ready < dep:", "        while st.ready < dep - 1:",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("CalcDependTileIdx one tile early", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "    return min(lastRow // headTileSize, totalTiles - 1)",
           "    return max(min(lastRow // headTileSize, totalTiles - 1) - 1, 0)",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("mask drain stops one tile early", "mc2emu/apace/comm_policy.py",
           "        for t in range(totalTiles):\n            if not (st.waitedMask >> t) & 1:",
           "        for t in range(totalTiles - 1):\n            if not (st.waitedMask >> t) & 1:",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("in-order drain stops one tile early", "mc2emu/apace/comm_policy.py",
           "        self.WaitDep(totalTiles - 1)", "        self.WaitDep(totalTiles - 2)",
           mpi=_existing(A2A_MPI, A2A_MULTI, HAZ_MPI)),
    Mutant("REMOTE ranks walked in descending order", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "                remoteRankCnt = 0\n                for rank in range(rankSize):",
           "                remoteRankCnt = 0\n                for rank in reversed(range(rankSize)):",
           mpi=_existing(A2A_MPI, A2A_MULTI), ranks=4),
    Mutant("DEFERRED_SYNC peers walked in descending order", "mc2emu/apace/quant_matmul_mx_kernel.py",
           "                remoteRankCnt = 1\n                for rank in range(rankSize):",
           "                remoteRankCnt = 1\n                for rank in reversed(range(rankSize)):",
           mpi=_existing(A2A_MPI, A2A_MULTI), ranks=4),
    # -- communication ---------------------------------------------------------------------------------------
    Mutant("UDMA data put ignores the tile offset", "mc2emu/apace/all_to_all_mx_quant_matmul_udma_impl.py",
           "dst = a.winA + rankId * dataChunkBytes + tileRow * a.rowBytes",
           "dst = a.winA + rankId * dataChunkBytes",
           mpi=_existing(A2A_MPI, A2A_MULTI)),
    Mutant("UDMA scale put ignores the tile offset", "mc2emu/apace/all_to_all_mx_quant_matmul_udma_impl.py",
           "dst = a.winScaleA + rankId * scaleChunkBytes + tileRow * a.scaleRowBytes",
           "dst = a.winScaleA + rankId * scaleChunkBytes",
           mpi=_existing(A2A_MPI, A2A_MULTI)),
    Mutant("TeamBarrier epoch not kept", "mc2emu/comm/team_barrier.py",
           "        self._epoch[job] = cnt", "        pass",
           mpi=("tests/comm/test_comm_team_barrier.py",)),
    Mutant("HCCL repeat stride uses the block pitch", "mc2emu/comm/hccl_task.py",
           "        return r * self.count * self.item", "        return r * self.block_pitch",
           mpi=_existing("tests/comm/test_comm_hccl.py", A2A_MULTI)),
    Mutant("HCCL recv block at count, not strideCount", "mc2emu/comm/hccl_server.py",
           "dst_off = recv_off + me * task.block_pitch + rep", "dst_off = recv_off + me * task.block_bytes + rep",
           mpi=("tests/comm/test_comm_hccl.py",)),
    # -- FragmentTensor (apace/basic/fragment_tensor.py): the copies and their host-side plan ---------------------
    Mutant("FragmentTensor: scatter writes the padded rows too", FRAG,
           "            if copyShape[assembleAxis] > remain:", "            if False:",
           serial=(FRAG_TEST,)),
    Mutant("FragmentTensor: a piece slice reused whatever the address", FRAG,
           "        if last is not None and last[1] == copyShape and isinstance(addr, GmAddr) and last[0] == addr:",
           "        if last is not None and last[1] == copyShape and isinstance(addr, GmAddr):",
           serial=(FRAG_TEST,)),
    Mutant("FragmentTensor: the address-list check sees no change", FRAG,
           "        if lst[self.indices.start:self.indices.stop] == self.snapshot:", "        if True:",
           serial=(FRAG_TEST,)),
    # -- all_gather_quant_matmul (AllGatherQbmmMxKernel) ---------------------------------------------------------
    Mutant("AG: MAIN round data offset advances by the scale stride", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "self.curRoundDataOff_ += delta * self.tileMDataStride_",
           "self.curRoundDataOff_ += delta * self.tileMScaleStride_",
           mpi=(AG_MPI,)),
    Mutant("AG: TAIL C rows written at the block start", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "        tailCOff = tailRowOff * params.cBytesPerM", "        tailCOff = 0",
           mpi=(AG_MPI,)),
    Mutant("AG: UpdateAddrList-before-wait check removed", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "        elif dep in self._waitedIds:\n            return", "        elif True:\n            return",
           mpi=(AG_MPI,)),
    # -- AG slot ring (URMA impl, 67a83540d75e) ----------------------------------------------------------------
    Mutant("AG slot ring: slot index without the flag-id modulo", "mc2emu/apace/basic/buffer_channel.py",
           "        s = Slot(self.slotIdxRaw_ * self.slotSize_, self.slotIdxRaw_ % FLAG_ID_MODULO)",
           "        s = Slot(self.slotIdxRaw_ * self.slotSize_, self.slotIdxRaw_)",
           serial=("tests/apace/test_buffer_channel.py",)),
    Mutant("AG slot ring: AIC releases one round too many", AG_KERNEL,
           "            if 0 <= readyTileIdx < commTurnI - dataSlotNum:",
           "            if 0 <= readyTileIdx <= commTurnI - dataSlotNum:", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: AIC never releases", AG_KERNEL,
           "                self.bufferSyncMgr_.Release(self.dataChannel_.GetRoundSlotIdx(readyTileIdx) + 1)",
           "                pass", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: AIC skips the acquire", AG_KERNEL,
           "            self._acquire(dataSlot.slotIdx + 1)", "            pass", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: MAIN reads slot 0 whatever the round", AG_KERNEL,
           "gmA = MakeTensor(MakeMemPtr(params.winDataBase + dataSlotOffset, self.AType),",
           "gmA = MakeTensor(MakeMemPtr(params.winDataBase, self.AType),", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: a crossing MAIN block's read stops at the slot", AG_KERNEL,
           "                slotRows = max(mainRoundRows, tctx.regionMPos + curMtile)",
           "                slotRows = mainRoundRows", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: TAIL data slot without the wrap", AG_KERNEL,
           "dataSlotOff = (fp.tileCnt % self.dataChannel_.GetSlotNum())",
           "dataSlotOff = (fp.tileCnt % (self.dataChannel_.GetSlotNum() + 1))", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: AIV puts at its rank, not its packed remote index", AG_URMA,
           "        remoteIdx = self.rankId_ - 1 if self.rankId_ > target else self.rankId_",
           "        remoteIdx = self.rankId_", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: AIV reuses a slot without the release wait", AG_URMA,
           "                if not skipRelease:", "                if False:", mpi=(SLOT_MPI,)),
    Mutant("AG slot ring: reserved flag 11 not reported with its slot", AG_URMA,
           "        if flagId not in reserved or self._reservedReported:", "        if True:", mpi=(SLOT_MPI,)),
    # -- AG: the source's limits and no others (issue 35 item 3) ---------------------------------------------------
    Mutant("AG limits: the slot ring keeps the seed's R <= 8", "mc2emu/tiling/all_gather_quant_matmul_tiling.py",
           "    return MAX_RANK_SIZE_SLOT_RING if slot_ring else MAX_RANKS", "    return MAX_RANKS",
           serial=("tests/tiling/test_all_gather_tiling.py", "tests/ops/test_all_gather_limits.py")),
    Mutant("AG limits: slot-ring bias dropped (mmad Init without isBias)", AG_KERNEL,
           "        self.mmadFrag.Init(problemShape, l0TileShape, fragL1, params.isBias, mmT.dbL0c > 1)",
           "        self.mmadFrag.Init(problemShape, l0TileShape, fragL1, False, mmT.dbL0c > 1)",
           mpi=(f"{AG_LIMITS_MPI}::test_slot_ring_adds_the_bias_once",)),
    Mutant("AG limits: fewer blocks than ranks not reported", "mc2emu/apace/all_gather_mx_matmul_udma_impl.py",
           "    unserved = ag_unserved_peers(rankSize, ctx.GetBlockNum())", "    unserved: list[int] = []",
           mpi=(f"{AG_LIMITS_MPI}::test_fewer_blocks_than_ranks_runs_as_the_device_and_names_the_unserved_peers",)),
    Mutant("AG limits: a truncated flag id is an error", "mc2emu/runtime/cross_core.py",
           "                      effective=eff, severity=Severity.WARNING)", "                      effective=eff)",
           serial=("tests/runtime/test_cross_core_flags.py",),
           mpi=(f"{AG_LIMITS_MPI}::test_in_order_waits_past_15_rounds_pass_the_golden",)),
    Mutant("AG limits: the seed window names the flag untruncated", "mc2emu/ops/all_gather_quant_matmul_host.py",
           "            eff = flag & (ids - 1)", "            eff = flag",
           mpi=(f"{AG_LIMITS_MPI}::test_the_mask_kernel_aliases_wrapped_ids_and_reads_tail_data_early",)),
    Mutant("HB: a reuse ordered after the read reported as a race", "mc2emu/check/happens_before.py",
           "                    if after and prior:\n                        continue",
           "                    if False:\n                        continue", mpi=(SLOT_MPI,)),
    Mutant("HB: the cores putting into the rank left out of the tracked clocks", "mc2emu/check/happens_before.py",
           "                   if any(isinstance(rec, _PutRec) and rec.pe == me for rec in sync)}",
           "                   if False}", mpi=("tests/checkers/test_happens_before_mpi.py",)),
    Mutant("HB: the reading cores left out of the tracked clocks", "mc2emu/check/happens_before.py",
           "        tracked.update((me, core) for core in reads)", "        tracked.update(())", mpi=(SLOT_MPI,)),
    Mutant("HB: an overwriting put reported as a missing wait", "mc2emu/check/happens_before.py",
           "                    if prior:\n                        q = prior[-1]",
           "                    if False:\n                        q = prior[-1]", mpi=(SLOT_MPI,)),
    Mutant("AG stress: a one-round slot-ring scenario is accepted", "mc2emu/stress/scenario.py",
           "    if slots is not None and s.ag_comm_turn <= slots:", "    if False:",
           serial=("tests/stress/test_stress_units.py",)),
    Mutant("AG L2: B streams without the full-M gate", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "            gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if fullMBlock and bAlignForL2Stream",
           "            gmB.SetL2CacheHint(self.ctx, CacheMode.CACHE_MODE_DISABLE if bAlignForL2Stream",
           mpi=(AG_MPI,)),
    Mutant("AG: the wait_tile fault hook skips nothing", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "            return faults.fault is Fault.SKIP_WAIT_TILE", "            return False",
           serial=("tests/stress/test_stress_jobs.py::test_ag_fault_is_caught",)),
    Mutant("AG stress: a skipped AG wait is expected clean", "mc2emu/stress/scenario.py",
           "    if inj in (Injection.EXTRA_SET_FLAG, Injection.SKIP_WAIT_TILE):\n        return \"UNCONSUMED_FLAG\"",
           "    if inj is Injection.EXTRA_SET_FLAG:\n        return \"UNCONSUMED_FLAG\"",
           serial=("tests/stress/test_stress_units.py",)),
    Mutant("AG stress: kernel variants judged as unfired faults", "mc2emu/stress/judge.py",
           "    if expected is not None and (fired or s.injection is Injection.NONE or s.injection in AG_VARIANTS):",
           "    if expected is not None and (fired or s.injection is Injection.NONE):",
           serial=("tests/stress/test_stress_units.py",)),
    Mutant("AG CLI: crossing prediction misses the first lost row", "mc2emu/cli/operators/all_gather.py",
           "        for row in range(region_end, end):", "        for row in range(region_end + 1, end):",
           serial=("tests/cli/test_cli_units.py",)),
    Mutant("CLI: an expected hazard's predicted damage is not compared", "mc2emu/cli/report.py",
           "            if exp.compare:", "            if False:",
           serial=("tests/cli/test_cli_units.py",)),
    # -- happens-before content records ------------------------------------------------------------------------
    Mutant("HB: a read record shared without comparing its bytes", "mc2emu/check/read_content.py",
           "        if last is not None and last.same_bytes(raw):", "        if last is not None:",
           serial=("tests/checkers/test_read_content.py",)),
    Mutant("HB: a read inside a put compared against nothing", "mc2emu/check/read_content.py",
           "            return int(np.count_nonzero(now != self.data)), int(self.data.size), lo, hi",
           "            return 0, int(self.data.size), lo, hi",
           serial=("tests/checkers/test_read_content.py",), mpi=("tests/checkers/test_put_visibility_mpi.py",)),
    # -- host-time paths: what they skip must be provably the same ----------------------------------
    Mutant("events: an observer of some kinds receives none of them", "mc2emu/runtime/event_bus.py",
           "                    if kinds is None or issubclass(cls, kinds))",
           "                    if kinds is None)",
           serial=("tests/runtime/test_device.py",), mpi=("tests/checkers/test_happens_before_mpi.py",)),
    Mutant("events: an observer of some objects receives none of them", "mc2emu/runtime/event_bus.py",
           "            obs = tuple((o, p) for o, p in obs if p is None or buffer.startswith(p))",
           "            obs = tuple((o, p) for o, p in obs if p is None)",
           serial=("tests/runtime/test_device.py",), mpi=("tests/checkers/test_happens_before_mpi.py",)),
    Mutant("HB sweep: an entity waiting for another is never re-tried", "mc2emu/check/happens_before_clocks.py",
           "            if done[ent] > start:", "            if False:",
           serial=("tests/checkers/test_clocks.py",), mpi=("tests/checkers/test_happens_before_mpi.py",)),
    Mutant("dequant: B of a DN load decoded transposed (column-major for BLAS)",
           "mc2emu/blaze/gemm/tile/tile_mmad_mx.py",
           "    if not codes.flags.c_contiguous and codes.T.flags.c_contiguous and k_axis == 1:",
           "    if not codes.flags.c_contiguous and codes.T.flags.c_contiguous:",
           serial=("tests/blaze/test_tile_mmad_mx.py",)),
    Mutant("BlockMmad: a transposed B's steps always row-major (small-kernel bits change)",
           "mc2emu/blaze/gemm/block/block_mmad_mx.py",
           "            if bStoredT and not b_row_major_same(curM, kHi - kLo, curN, aColumnMajor):",
           "            if False:",
           serial=(PINS,), mpi=(PINS_MPI,)),
    Mutant("HB clocks: an event takes the clock of the merge after it", "mc2emu/check/happens_before_clocks.py",
           "        i = bisect.bisect_right(self._merges.get(ent, ()), pos)",
           "        i = bisect.bisect_left(self._merges.get(ent, ()), pos)",
           serial=("tests/checkers/test_clocks.py",)),
    Mutant("HB clocks: a merge joins sources not swept yet", "mc2emu/check/happens_before_clocks.py",
           "                    if blocker is not None:", "                    if blocker is not None and False:",
           serial=("tests/checkers/test_clocks.py",)),
    Mutant("HB clocks: a shared source list joined once for the first waiter's own clock",
           "mc2emu/check/happens_before_clocks.py",
           "                np.maximum(vc, joined, out=vc)", "                vc = joined",
           serial=("tests/checkers/test_clocks.py",)),
    Mutant("HB clocks: the put-after-read component off by one", "mc2emu/check/happens_before_clocks.py",
           "            return own[1] + pos + 1\n        base = self._base(ent, pos)",
           "            return own[1] + pos\n        base = self._base(ent, pos)",
           serial=("tests/checkers/test_clocks.py",)),
    Mutant("HB clocks: a chained launch's events counted from 0 (its chain offset dropped)",
           "mc2emu/check/happens_before_clocks.py",
           "                offset += lengths.get(ent, 0)", "                offset += 0",
           serial=("tests/checkers/test_clocks.py",),
           mpi=("tests/check/test_stream_happens_before_mpi.py", XL_MPI)),
    Mutant("Communicator: a failed closing barrier leaves the communicator unfailed on that rank",
           "mc2emu/comm/communicator.py",
           '            self.fail(f"Communicator.close: {type(exc).__name__}: {first}")',
           "            pass",
           mpi=("tests/check/test_cross_launch_qmrs_mpi.py",)),
    Mutant("deadlock report: a wait's releaser's post of an earlier launch taken as erased", "mc2emu/check/deadlock.py",
           "            if op != SignalOp.SET.name or plaunch != launch or not holds(posted & mask, value) or \\",
           "            if op != SignalOp.SET.name or not holds(posted & mask, value) or \\",
           serial=("tests/check/test_deadlock_decision.py",), mpi=("tests/check/test_deadlock_diagnosis_mpi.py",)),
    Mutant("deadlock report: a post that reached the word taken as erased", "mc2emu/check/deadlock.py",
           "                    holds(current & mask, value):", "                    False:",
           serial=("tests/check/test_deadlock_decision.py",), mpi=("tests/check/test_deadlock_diagnosis_mpi.py",)),
    Mutant("HB / XL: a core's launches chained in reverse launch order", "mc2emu/check/happens_before_records.py",
           '    return [sorted(chain, key=lambda ent: int(ent[1].rpartition("@")[2])) for chain in chains.values()]',
           '    return [sorted(chain, key=lambda ent: -int(ent[1].rpartition("@")[2])) for chain in chains.values()]',
           mpi=("tests/check/test_stream_happens_before_mpi.py", XL_MPI)),
    Mutant("XL: a read ordered before a next-launch put reported, an unordered one not", XL_SRC,
           'if wl > log.launch and kind == "put" and not g.side_before(ent, pos, node[:2], node[2]):',
           'if wl > log.launch and kind == "put" and g.side_before(ent, pos, node[:2], node[2]):',
           mpi=(XL_MPI,)),
    Mutant("XL: bytes rewritten in the reading launch counted stale", XL_SRC,
           "                stale = rmask & prev & ~cur", "                stale = rmask & prev & cur", mpi=(XL_MPI,)),
    Mutant("XL: a signal wait never satisfied by earlier launches' counts", XL_SRC,
           "                if cmp.holds(value, expected):", "                if cmp.holds(0, expected):",
           mpi=(XL_MPI,)),
    Mutant("XL: a flag round of an earlier launch not stale", XL_SRC,
           "and _launch_of(k) < log.launch})", "and _launch_of(k) > log.launch})", mpi=(XL_MPI,)),
    Mutant("QMRS per_block: the status poll compares the whole 64-bit slot (launch 1 passes on the reset 0.0)",
           "mc2emu/apace/quant_matmul_reduce_scatter_impl.py",
           "from_pe=self.coreVid_, mask=F32_BITS_MASK)", "from_pe=self.coreVid_, mask=None)",
           mpi=("tests/check/test_cross_launch_qmrs_mpi.py::test_per_block_twice_names_the_source_hazards_between_launches",)),
    Mutant("HB stream mode: no stream order between a rank's launches", "mc2emu/check/happens_before.py",
           "            _stream_order(everyone, preds)", "            pass",
           mpi=("tests/check/test_stream_happens_before_mpi.py",)),
    Mutant("HB stream mode: a signal wait takes every launch's posts (a cycle through stream order)",
           "mc2emu/check/happens_before.py",
           "posted_here = [n for n in posted_here if _launch_key(n[1]) == _launch_key(core)]",
           "posted_here = [n for n in posted_here if True]",
           serial=("tests/cli/test_repeat_cli.py::test_repeat_per_block_names_the_source_cross_launch_hazards",)),
    Mutant("per-call data window not checked against HCCL_BUFFSIZE", "mc2emu/host/harness.py",
           "        if nbytes > cap:", "        if False:",
           mpi=("tests/apace/test_all_gather_source_limits_mpi.py::test_a_window_over_hccl_buffsize_is_refused_with_the_figures",)),
    Mutant("XL: a reset unordered against a post not lost", XL_SRC,
           "if g.before(node, ex, sx - 1) or g.side_before(ex, sx, node[:2], node[2]):",
           "if g.before(node, ex, sx - 1) or True:", mpi=(XL_MPI,)),
    Mutant("XL: flag rounds left at the loop end not counted", XL_SRC,
           "            if token not in consumed:", "            if token in consumed:", mpi=(XL_MPI,)),
    Mutant("XL: launch N+1 of a rank not after its launch N", XL_SRC,
           "                    preds[(r, key, 0)] = [(r, STREAM, start - 1)]",
           "                    preds[(r, key, 0)] = []", mpi=(XL_MPI,)),
    Mutant("XL: a racing put of the reading launch named as a local write (STALE_READ crashes)", XL_SRC,
           'unordered_cur.append((node[0] if kind == "local" else node[:2], wm))',
           "unordered_cur.append((node[0], wm))",
           mpi=(XL_MPI + "::test_a_read_before_the_wait_is_a_stale_read_naming_the_racing_put",)),
    Mutant("QMRS rounds: no SyncAll between round t - 1's reduction and the CrossDevice (launch N+1's round-0 put "
           "races it from T = 2)", QMRS_ROUNDS,
           "                self.ReduceSum(t - 1, blockIdx, rsCoreNum)\n            ctx.SyncAll(True)\n",
           "                self.ReduceSum(t - 1, blockIdx, rsCoreNum)\n            pass\n",
           mpi=("tests/check/test_cross_launch_rounds_mpi.py::test_api_loop_reports_the_one_round_race_and_not_two_rounds",),
           why="within one launch the rounds' rows are disjoint: only the next launch's round-0 put needs it"),
    Mutant("layers: --protocol-only ignored (full data, golden compared)", "mc2emu/run.py",
           "window_offsets=window_offsets(opts), data=not opts.protocol_only,",
           "window_offsets=window_offsets(opts), data=True,",
           serial=("tests/cli/test_repeat_cli.py::test_layers_protocol_only_runs_the_loop_and_its_checks_without_"
                   "comparisons",)),
    Mutant("XL: every launch numbered 0", "mc2emu/runtime/device.py",
           "                        index=self.launch_count)", "                        index=0)", mpi=(XL_MPI,)),
    Mutant("MMAD events dropped although an observer reads them", "mc2emu/blaze/gemm/block/block_mmad_mx.py",
           "        if ctx.device.events.wants(Mmad):", "        if False:",
           serial=(BMMAD + "::test_mmad_and_fixpipe_events_carry_tile_coordinates",)),
    Mutant("HB clocks: source tuples of different rounds joined under one key",
           "mc2emu/check/happens_before_clocks.py",
           "    return id(srcs) if type(srcs) is tuple else tuple(srcs)",
           "    return len(srcs) if type(srcs) is tuple else tuple(srcs)",
           serial=("tests/checkers/test_clocks.py",)),
    Mutant("HB put index misses a put that starts before the read", "mc2emu/check/read_content.py",
           "        first = bisect.bisect_right(starts, lo - longest)",
           "        first = bisect.bisect_right(starts, lo)",
           serial=("tests/checkers/test_put_index.py",)),
    Mutant("stamped B load shared across a write (generation dropped)", "mc2emu/runtime/decode_cache.py",
           "        key = (stamp, sshape, bstrides, dtype)",
           "        key = (stamp[:3], sshape, bstrides, dtype)",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("stamped load replayed although a GM_READ observer sees it", "mc2emu/runtime/decode_cache.py",
           "        if kept is not None and unobserved(self.events, addr.alloc):",
           "        if kept is not None:",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("replayed read of never-written bytes (the next core's report lost)",
           "mc2emu/runtime/decode_cache.py",
           "    return alloc.fully_written and not events.wants(GmRead, alloc.name)",
           "    return not events.wants(GmRead, alloc.name)",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("replay judged by any GM_READ observer, whatever its prefix", "mc2emu/runtime/decode_cache.py",
           "    return alloc.fully_written and not events.wants(GmRead, alloc.name)",
           "    return alloc.fully_written and not events.wants(GmRead)",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("an allocation spanned by one write with gaps taken as fully written", "mc2emu/runtime/gm.py",
           "                alloc.fully_written = bool(alloc.written.all())",
           "                alloc.fully_written = True",
           serial=("tests/runtime/test_device.py",)),
    Mutant("fragment gather replayed although observed", "mc2emu/apace/basic/fragment_l1_copy.py",
           "    if kept is not None and quiet:", "    if kept is not None:",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("fragment gather kept without its stamp (a write not seen)",
           "mc2emu/apace/basic/fragment_l1_copy.py",
           "    key = (\"gather\", t.name, dtype, shape, stamp)", "    key = (\"gather\", t.name, dtype, shape)",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("fragment gather replayed when only its last piece is unobserved",
           "mc2emu/apace/basic/fragment_l1_copy.py",
           "        quiet = quiet and events is not None and unobserved(events, alloc)",
           "        quiet = events is not None and unobserved(events, alloc)",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("fragment gather stamp without the write generation", "mc2emu/apace/basic/fragment_l1_copy.py",
           "(alloc.aid, addr.offset, alloc.generation, info.fragCoord,", "(alloc.aid, addr.offset, 0, info.fragCoord,",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("fragment gather stamp without the fragment address", "mc2emu/apace/basic/fragment_l1_copy.py",
           "(alloc.aid, addr.offset, alloc.generation, info.fragCoord,",
           "(alloc.aid, 0, alloc.generation, info.fragCoord,",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("fragment gather stamp without the place in the fragment",
           "mc2emu/apace/basic/fragment_l1_copy.py",
           "(alloc.aid, addr.offset, alloc.generation, info.fragCoord,",
           "(alloc.aid, addr.offset, alloc.generation, 0,",
           serial=("tests/blaze/test_memo_stamps.py",)),
    Mutant("windows taken as written by this rank alone (stamped, replayed)", "mc2emu/runtime/gm.py",
           '        return self.kind == "gm"', "        return True",
           serial=("tests/blaze/test_memo_stamps.py::test_a_window_gather_is_read_again_and_returns_what_peers_put_since",)),
    Mutant("decode cache kept across launches (a read of an earlier launch handed out)", "mc2emu/runtime/device.py",
           "        self.decode_cache.reset()\n", "        pass\n",
           serial=("tests/blaze/test_memo_stamps.py::test_the_device_empties_its_decode_cache_at_every_launch",)),
    Mutant("compute slots kept at the CPU count on an oversubscribed host",
           "mc2emu/host/compute_slots.py",
           "        if os.environ.get(name, \"\").isdigit() and int(os.environ[name]) > cpus:",
           "        if os.environ.get(name, \"\").isdigit() and int(os.environ[name]) > 4 * cpus:",
           serial=("tests/host/test_compute_slots.py",)),
    Mutant("GM data covering part of an allocation taken as filling it", "mc2emu/runtime/gm.py",
           "        whole = data is not None and raw.size >= size", "        whole = data is not None",
           serial=("tests/runtime/test_device.py::test_allocations_written_from_the_start_read_and_add_without_"
                   "reports_and_the_rest_stays_poisoned",)),
    Mutant("a window adopted unwritten keeps no mask", "mc2emu/runtime/gm.py",
           "        if self.check and not written:", "        if False:",
           serial=("tests/runtime/test_device.py::test_allocations_written_from_the_start_read_and_add_without_"
                   "reports_and_the_rest_stays_poisoned",)),
    Mutant("read-back hands a window over instead of copying it", "mc2emu/host/harness.py",
           '        if addr.alloc.kind == "gm" and view.flags.c_contiguous:',
           "        if view.flags.c_contiguous:",
           serial=("tests/host/test_harness_read.py",)),
    Mutant("read-back lets a launch follow it", "mc2emu/host/harness.py",
           "        if self._handed_over:\n", "        if False:\n",
           serial=("tests/host/test_harness_read.py",)),
    Mutant("profile_op counts a call nested in a call of the same function again", "launch/profile_op.py",
           "            if name in inside:              # nested in a call of the same function: counted there\n"
           "                return fn(*args, **kwargs)\n", "",
           serial=("tests/ops/test_profile_op.py",)),
    Mutant("the floor's step count drops a chunk's short last step", "launch/mmad_floor.py",
           "    per_tile = sum(CeilDiv(min(kL1, k - c * kL1), baseK) for c in range(CeilDiv(k, kL1)))",
           "    per_tile = sum(min(kL1, k - c * kL1) // baseK for c in range(CeilDiv(k, kL1)))",
           serial=("tests/ops/test_mmad_floor.py",)),
    Mutant("HB: a dense read's run compared at the put's offset instead of the read's",
           "mc2emu/check/read_content.py",
           "self.data.reshape(-1)[a - lo:b - lo]", "self.data.reshape(-1)[a - plo:b - plo]",
           serial=("tests/checkers/test_read_content.py",)),
    Mutant("HB: every read taken as dense", "mc2emu/check/read_content.py",
           "        if n != 1 and st != step:\n            return False\n", "",
           serial=("tests/checkers/test_read_content.py",)),
    Mutant("strided local put lands its rows back to back", "mc2emu/comm/shmem.py",
           "dt = _ROW_TYPES[key] = MPI.BYTE.Create_vector(count, rowBytes, stride).Commit()",
           "dt = _ROW_TYPES[key] = MPI.BYTE.Create_vector(count, rowBytes, rowBytes).Commit()",
           mpi=("tests/comm/test_comm_shmem.py",)),
    # -- quant_matmul_reduce_scatter (rounds and per_block kernels) ------------------------------------------
    Mutant("QMRS: rounds reduction sums the ranks descending", QMRS_ROUNDS,
           "                for j in range(a.rankSize):", "                for j in reversed(range(a.rankSize)):",
           mpi=(QMRS_MPI,), ranks=4, why="FP32 addition of two terms commutes: the order shows from 3 ranks"),
    Mutant("QMRS: rounds Commit lands in the target's slot", QMRS_ROUNDS,
           "        dst = a.winData + a.rankId * a.chunkBytes + rowOff * a.cBytesPerM",
           "        dst = a.winData + target * a.chunkBytes + rowOff * a.cBytesPerM",
           mpi=(QMRS_MPI,)),
    Mutant("QMRS: SplitToCore gives the remainder rows to the last cores", QMRS_ROUNDS,
           "    if coreId < remainderNum:", "    if coreId >= curUseCoreNum - remainderNum:",
           mpi=(QMRS_MPI,)),
    Mutant("QMRS: rounds AIV skips the flagB wait", QMRS_ROUNDS,
           "            self._WaitFlag(FLAG_B)", "            pass",
           mpi=(QMRS_MPI,)),
    Mutant("QMRS: rounded tail copy not reported", QMRS_ROUNDS,
           "        if self.args.variant is not RsKernelVariant.TAIL_COPY_ROUNDED or nbytes % UB_BLOCK_BYTES == 0:",
           "        if True:",
           mpi=(QMRS_MPI,)),
    Mutant("QMRS: golden skips the bf16 staging of C_j", QMRS_GOLDEN,
           "    return golden_cast(c, out_dtype)\n\n\ndef golden_reduce_scatter",
           "    return c\n\n\ndef golden_reduce_scatter",
           mpi=(QMRS_MPI,)),
    Mutant("QMRS: per_block epilogue writes the owner's row at the global row", QMRS_EPILOGUE,
           "                row0 = self.rankId_ * self.tpSizeM_ + globalRow % self.tpSizeM_",
           "                row0 = globalRow % self.tpSizeM_",
           mpi=(QMRS_MPI,)),
    Mutant("QMRS: per_block acc * 0 NaN check removed", "mc2emu/apace/quant_matmul_reduce_scatter_impl.py",
           "            if bad:", "            if False:",
           mpi=(QMRS_MPI,)),
    Mutant("QMRS: per_block bias slice taken at column 0 for every N block", "mc2emu/apace/kernel_qbmm_mx_mix.py",
           "None if gmBias is None else gmBias.Slice((0, nPos), (1, baseN))",
           "None if gmBias is None else gmBias.Slice((0, 0), (1, baseN))",
           mpi=(QMRS_MPI + "::test_per_block_bias_is_added_once_per_rank_before_the_bf16_staging",)),
    Mutant("QMRS: per_block host leaves isBias 0 with a bias given", "mc2emu/ops/quant_matmul_reduce_scatter_host.py",
           "int(bias_addr is not None)", "0",
           mpi=(QMRS_MPI + "::test_per_block_bias_is_added_once_per_rank_before_the_bf16_staging",)),
    Mutant("QMRS: rounds fragment block Init'ed without isBias", "mc2emu/apace/qmm_mx_kernel_rs_frag.py",
           "mmT.nBufferNum), params.biasGM is not None,", "mmT.nBufferNum), False,",
           mpi=(QMRS_MPI + "::test_rounds_bias_is_added_once_per_rank_before_the_bf16_staging",)),
    Mutant("QMRS: rounds bias slice taken at column 0 for every N block", "mc2emu/apace/qmm_mx_kernel_rs_frag.py",
           "gmBias.Slice((0, nPos), (1, curNtile))", "gmBias.Slice((0, 0), (1, curNtile))",
           mpi=(QMRS_MPI + "::test_rounds_bias_is_added_once_per_rank_before_the_bf16_staging",)),
    Mutant("QMRS: rounds bias passed to the first round only", QMRS_ROUNDS,
           "a.cBytesPerM, tileMOffset, a.biasGM)", "a.cBytesPerM, tileMOffset, a.biasGM if t == 0 else None)",
           mpi=(QMRS_MPI + "::test_rounds_bias_is_added_once_per_rank_before_the_bf16_staging",)),
    Mutant("QMRS: rounds host skips the bias L1 budget", "mc2emu/ops/quant_matmul_reduce_scatter_host.py",
           "    if bias is not None:\n        refuse(rounds_bias_violations(",
           "    if False:\n        refuse(rounds_bias_violations(",
           mpi=(QMRS_MPI + "::test_rounds_bias_over_the_l1_budget_is_refused_on_every_rank",)),
    Mutant("QMRS: bias L1 budget counted without the bias buffers",
           "mc2emu/tiling/quant_matmul_reduce_scatter_tiling.py",
           "        end = l1.end(True)", "        end = l1.end(False)",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: rounds flagA only at the end of the round (no localLast early Set)",
           "mc2emu/apace/qmm_mx_kernel_rs_frag.py",
           "            if not remoteFlagSet and mPos >= localFragBoundary:", "            if False:",
           mpi=(QMRS_MPI + "::test_rounds_reduction_overlaps_the_next_rounds_matmul_by_happens_before",)),
    # A serialization needs a signal on both sides, so this mutant edits two places of one 8-line span: the AIVs
    # Set flag 2 when they start round t >= 2 (after the reduction of round t - 2 and the SyncAll after it), the
    # AIC waits for it before round t. Waiting for round t - 1's reduction would deadlock: it runs after flagA(t).
    Mutant("QMRS: rounds AIC waits for the reduction of an earlier round", QMRS_ROUNDS,
           "            self.mmKernel_(params)\n"
           "            self.ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, FLAG_B)\n"
           "\n"
           "    # -- AIV ------------------------------------------------------------------------------------------"
           "-------\n"
           "    def _WaitFlag(self, flagId: int) -> None:\n"
           '        """The untemplated `CrossCoreWaitFlag(flagId)` (design.md §3.4: pairs with the AIC\'s templated\n'
           '        `<0x2, PIPE_FIX>` Set and blocks the scalar pipe as well): a blocking mode-2 wait here."""\n'
           "        self.ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE3, flagId)\n",
           "            t >= 2 and self.ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE2, 2)\n"
           "            self.mmKernel_(params)\n"
           "            self.ctx.CrossCoreSetFlag(2, Pipe.PIPE_FIX, FLAG_B)\n"
           "\n"
           "    def _WaitFlag(self, flagId: int) -> None:\n"
           "        self._nA = getattr(self, \"_nA\", 0) + (flagId == FLAG_A)\n"
           "        flagId == FLAG_A and self._nA >= 3 and self.ctx.CrossCoreSetFlag(2, Pipe.PIPE_MTE3, 2)\n"
           "        self.ctx.CrossCoreWaitFlag(2, Pipe.PIPE_MTE3, flagId)\n",
           mpi=(QMRS_MPI + "::test_rounds_reduction_overlaps_the_next_rounds_matmul_by_happens_before",)),
    Mutant("gather: packed records number their classes in another order", "mc2emu/predict/records.py",
           "    return list(classes), rows", "    return sorted(classes, key=str), rows",
           serial=("tests/predict/test_replay.py",)),
    Mutant("evaluate: an edge's latency dropped", "mc2emu/predict/analysis.py",
           "                    t = end[p] + w\n", "                    t = end[p]\n",
           serial=("tests/predict/test_evaluate.py",)),
    Mutant("evaluate: a predecessor on the path followed is not a cycle", "mc2emu/predict/analysis.py",
           "                    elif state[p] == 1:", "                    elif False:",
           serial=("tests/predict/test_evaluate.py",)),
    Mutant("evaluate: a node not yet reached is timed before its predecessors", "mc2emu/predict/analysis.py",
           "                    if state[p] == 0:\n                        stack.append(p)",
           "                    if state[p] == 0:\n                        pass",
           serial=("tests/predict/test_evaluate.py",)),
    Mutant("ordering: a link's FIFO order taken for happens-before", "mc2emu/predict/ordering.py",
           "    preds = [[p for p in ps if not (g.cat[p] == Cat.LINK and g.cat[v] == Cat.LINK)]",
           "    preds = [[p for p in ps]", serial=("tests/predict/test_ordering.py",)),
    Mutant("ordering: ancestors without the predecessor itself", "mc2emu/predict/ordering.py",
           "            acc |= anc[p] | (1 << p)", "            acc |= anc[p]",
           serial=("tests/predict/test_ordering.py",)),
    Mutant("QMRS: default headMSize search ignores the T <= 15 bound", QMRS_TILING_SRC,
           "    return min(MAX_ROUNDS, MAX_RANK_ROUNDS // rank_size)", "    return MAX_RANK_ROUNDS // rank_size",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: default headMSize search accepts a T that leaves a tail", QMRS_TILING_SRC,
           "    return m_seg % T == 0 and (T == 1 or (m_seg // T) % ROW_ALIGN == 0)",
           "    return T == 1 or (m_seg // T) % ROW_ALIGN == 0",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: a shape no rounds tiling fits runs the T = 1 fallback", QMRS_TILING_SRC,
           "    if ct.unfit:\n", "    if False:\n",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: block_dim below R reported as the reduce-core rule only", QMRS_TILING_SRC,
           "        if used < rank_size:\n", "        if False:\n",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: N % 16 rule accepts any N", QMRS_TILING_SRC,
           "    if n % N_ALIGN:\n", "    if False:\n",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: rounds entry skips the N % 16 rule (RS-12)", "mc2emu/ops/quant_matmul_reduce_scatter_op.py",
           "        if not ragged_n:\n            errs += rounds_alignment_violations(n)",
           "        if False:\n            errs += rounds_alignment_violations(n)",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: NZ weight accepted by the rounds kernel", "mc2emu/ops/quant_matmul_reduce_scatter_op.py",
           "    if nz and imp is not QmrsImpl.PER_BLOCK:", "    if False:",
           serial=(QMRS_TILING,)),
    Mutant("SWAT: SetMaxBaseM cap ignored", "mc2emu/tiling/quant_matmul_tiling_swat.py",
           "        if r.baseM > self.maxBaseM_:", "        if False:",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: per_block dynMaxBaseM without the M / 2 fallback", QMRS_TILING_SRC,
           "        dyn = min(PB_MAX_BASIC_BLOCK_SIZE, (m // 2) // ROW_ALIGN * ROW_ALIGN)",
           "        dyn = min(PB_MAX_BASIC_BLOCK_SIZE, m)",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: per_block NZ B tiled as transB", QMRS_TILING_SRC,
           "    return swat.GetTilingData(m, n, k, False, not weight_nz, elem, b_elem)",
           "    return swat.GetTilingData(m, n, k, False, True, elem, b_elem)",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: per_block host tiles without the launcher's SetMaxBaseM",
           "mc2emu/ops/quant_matmul_reduce_scatter_host.py",
           "per_block_tiling(m, n, k, R, problem.elem, problem.b_elem, problem.weight_nz, DAV_3510, block_dim)",
           "rs_round_tiling(m, n, k, problem.elem, problem.b_elem, DAV_3510, block_dim)",
           mpi=(QMRS_MPI + "::test_per_block_reads_an_nz_weight_with_the_launchers_tiling",)),
    Mutant("QMRS: per_block reads an NZ B's scale as (N, ceil(K/64), 2)", "mc2emu/apace/kernel_qbmm_mx_mix.py",
           "ScaleBDNLayoutPtn if BlockMmad.TRANS_B else ScaleBNDLayoutPtn", "ScaleBDNLayoutPtn",
           mpi=(QMRS_MPI + "::test_per_block_reads_an_nz_weight_with_the_launchers_tiling",)),
    Mutant("layout: an NZ view ignores the columns it skips", "mc2emu/blaze/tensor_api/layout.py",
           "            x = int(coord[d]) + (self.skip if d == 1 else 0)", "            x = int(coord[d])",
           serial=("tests/blaze/test_layout_nz.py",)),
    Mutant("QMRS: rounds head tiling of R * headMSize rows (seed 000 §4.6's reading)", QMRS_TILING_SRC,
           "    sub = rs_round_tiling(ct.headMSize, n, k, elem, b_elem, platform, aic_num)",
           "    sub = rs_round_tiling(m // ct.mSeg * ct.headMSize, n, k, elem, b_elem, platform, aic_num)",
           serial=(QMRS_TILING,)),
    Mutant("QMRS: rounds head tiling keeps a 256 baseM (no §5.6 halving)", QMRS_TILING_SRC,
           "    if sub.baseM == HALVED_BASE_M * 2 and ct.headMSize % HALVED_BASE_M == 0:", "    if False:",
           serial=(QMRS_TILING,)),
    Mutant("QMRS replay: --scale ignores the rank segment's block structure", "mc2emu/cli/source_cases.py",
           "    if full[1:] != scaled[1:]:", "    if False:",
           serial=("tests/cli/test_source_cases.py::test_qmrs_scale_keeps_the_blocks_of_a_rank_segment",)),
    Mutant("QMRS: rounds L2 hint decided with the tiling's baseN, not the tile's curNtile",
           "mc2emu/apace/qmm_mx_kernel_rs_frag.py",
           "            self.SetL2Cache(problemShape, curMtile, gmB, gmScaleB, curNtile)",
           "            self.SetL2Cache(problemShape, curMtile, gmB, gmScaleB, mmT.baseN)",
           mpi=(QMRS_MPI + "::test_l2_hints_use_the_tiles_own_n_extent",)),
    Mutant("QMRS: rounds reduction never segments N", QMRS_ROUNDS,
           "    redUbN = n if n <= maxElements else maxElements // REDUCE_N_ALIGN * REDUCE_N_ALIGN",
           "    redUbN = n",
           serial=(QMRS_TILING,), mpi=(QMRS_MPI + "::test_reduction_segments_n_past_the_ub_budget",)),
    # -- diagnoses -------------------------------------------------------------------------------------------
    Mutant("deadlock report loses the wait lines", "mc2emu/check/deadlock.py",
           '            lines.append(f"    {line}")', "            pass",
           mpi=_existing(HAZ_MPI, DIAG_MPI)),
    Mutant("deadlock report loses the releaser lines", "mc2emu/check/deadlock.py",
           '            lines.append(f"      releaser {where} {who}: {st}")', "            pass",
           mpi=_existing(HAZ_MPI, DIAG_MPI)),
    Mutant("deadlock: a late declarer does not first answer the requests already at its rank",
           "mc2emu/check/deadlock.py",
           "            self.answer_requests()                 # step 0: a request that reached this rank comes first",
           "            pass",
           mpi=(DEADLOCK_MPI + "::test_a_starved_rank_reaching_its_deadline_late_defers_to_the_one_report",)),
    Mutant("deadlock: a rank that already reported does not win the round", "mc2emu/check/deadlock.py",
           "        if reported:\n            return min(reported)",
           "        if False:\n            return min(reported)",
           serial=("tests/check/test_deadlock_decision.py",)),
    Mutant("deadlock: a deferral's reporter is not counted as a declarer", "mc2emu/check/deadlock.py",
           '        collecting |= {int(s["defers_to"]) for s in answered.values() if s.get("defers_to") is not None}',
           "        pass",
           serial=("tests/check/test_deadlock_decision.py",)),
    # -- checker edges: one step past each rule must be reported -------------------------------------------
    Mutant("HB edge: a put counts as completed by the quiet before it", "mc2emu/check/happens_before.py",
           "                        i = bisect.bisect_right(done_at, pos)",
           "                        i = max(bisect.bisect_right(done_at, pos) - 1, 0)",
           mpi=(EDGES_MPI,)),
    Mutant("HB edge: a flag Wait proves its source core's later rounds too", "mc2emu/check/happens_before.py",
           "(r, src_core, sp) for src_core, sid in srcs",
           "(r, src_core, len(logs[src_core]) - 1) for src_core, sid in srcs",
           mpi=(EDGES_MPI,)),
    Mutant("HB edge: a signal wait proves no post", "mc2emu/check/happens_before.py",
           "                        posted_here = [node for node, _, _ in posts.get((r, rec.window, rec.offset), ())]",
           "                        posted_here = []",
           mpi=(EDGES_MPI,)),
    Mutant("pairing edge: signals waited short of their final value pass", "mc2emu/check/happens_before.py",
           "            if got is None or got < final:", "            if got is None:",
           mpi=(EDGES_MPI,)),
    Mutant("HB edge: the k-th HCCL Wait proves repeat k too", "mc2emu/check/happens_before.py",
           "and proved[pos].get(p[3], 0) <= p[4]", "and proved[pos].get(p[3], 0) < p[4]",
           mpi=(EDGES_MPI,)),
    Mutant("HCCL edge: the 63rd Prepare is refused", "mc2emu/comm/hccl.py",
           "if len(self.handles) >= HCCL_MAX_HANDLE_ID:", "if len(self.handles) >= HCCL_MAX_HANDLE_ID - 1:",
           mpi=(EDGES_MPI,)),
    Mutant("HCCL edge: a Commit past repeat is accepted", "mc2emu/comm/hccl.py",
           "if lh.commits >= lh.repeat:", "if lh.commits > lh.repeat:",
           mpi=(EDGES_MPI,)),
    Mutant("HCCL edge: a Wait past the Commits is accepted", "mc2emu/comm/hccl.py",
           "if lh.waits >= lh.commits:", "if lh.waits > lh.commits:",
           mpi=(EDGES_MPI,)),
    Mutant("flag edge: id 16 is a counter of its own", "mc2emu/runtime/cross_core.py",
           "if fid >= plat.flag_id_count or fid < 0:", "if fid > plat.flag_id_count or fid < 0:",
           serial=("tests/checkers/test_flag_edges.py",)),
    Mutant("flag edge: a 16th pending Set is accepted", "mc2emu/runtime/cross_core.py",
           "if c.value >= limit:", "if c.value > limit:",
           serial=("tests/runtime/test_cross_core_flags.py",)),
    Mutant("READ_BEFORE_WAIT names the reader as the putting core", "mc2emu/check/happens_before.py",
           "window=window, lo=a, hi=b, put_rank=pr, put_core=pcore)",
           "window=window, lo=a, hi=b, put_rank=pr, put_core=core)",
           mpi=_existing("tests/checkers/test_happens_before_mpi.py", HAZ_MPI, DIAG_MPI)),
    # -- tiling ----------------------------------------------------------------------------------------------
    Mutant("A2A tiling: head tile count rounds up", "mc2emu/tiling/all_to_all_quant_matmul_tiling.py",
           "    tile_cnt = ori_m // head_tile_size", "    tile_cnt = -(-ori_m // head_tile_size)",
           serial=("tests/apace/test_a2a_tiling.py",)),
    Mutant("SWAT tiling: scaleKL1 takes the larger operand", "mc2emu/tiling/quant_matmul_tiling_swat.py",
           "return min(r.scaleFactorA * r.stepKa * r.baseK, r.scaleFactorB * r.stepKb * r.baseK)",
           "return max(r.scaleFactorA * r.stepKa * r.baseK, r.scaleFactorB * r.stepKb * r.baseK)",
           serial=("tests/blaze/test_tiling_swat.py",)),
    # -- predictor (virtual-time replay) ---------------------------------------------------------------------
    Mutant("predict: MMAD K steps round down", "mc2emu/predict/cost_model.py",
           "return -(-int(m) // CUBE_BLOCK) * -(-int(n) // CUBE_BLOCK) * -(-int(k) // k0)",
           "return -(-int(m) // CUBE_BLOCK) * -(-int(n) // CUBE_BLOCK) * (int(k) // k0)",
           serial=(PREDICT_COST, PREDICT_REPLAY)),
    Mutant("predict: a core alone takes the whole chip's GM bandwidth", "mc2emu/predict/cost_model.py",
           "        return min(self.mte_port_bytes_per_cycle * self.clock_hz, self.gm_bw / n)",
           "        return self.gm_bw / n",
           serial=(PREDICT_COST, PREDICT_REPLAY)),
    Mutant("predict: L1 double-buffer dependency dropped", "mc2emu/predict/replay.py",
           "                        preds.append((c.groups_done[-L1_BUFFER_DEPTH], 0.0))",
           "                        pass",
           serial=(PREDICT_REPLAY,)),
    Mutant("predict: quiet does not wait for the puts to land", "mc2emu/predict/replay.py",
           "[(c.frontier, 0.0)] + [(t, m.put_latency_s) for t in c.outstanding])\n                c.outstanding = []",
           "[(c.frontier, 0.0)] + [(t, 0.0) for t in c.outstanding])\n                c.outstanding = []",
           serial=(PREDICT_REPLAY,)),
    Mutant("predict: a rank's puts share no egress link", "mc2emu/predict/replay.py",
           "            self.egress_last[src] = t", "            pass",
           serial=(PREDICT_REPLAY,)),
    Mutant("predict: a flag round ignores its Sets", "mc2emu/predict/replay.py",
           '                    g.pending.append((n, ("set", rank, src[1]), 0.0))',
           "                    pass",
           serial=(PREDICT_REPLAY,)),
    Mutant("predict: the HCCL server ignores the working block's Commit", "mc2emu/predict/replay.py",
           '            g.pending.append((issue, ("commit", rank, r.session, r.handle, r.repeat + 1), '
           'm.hccl_commit_latency_s))',
           '            g.pending.append((issue, ("nocommit", rank, r.session, r.handle, r.repeat + 1), '
           'm.hccl_commit_latency_s))',
           mpi=("tests/predict/test_predict_a2a_mpi.py",)),
    Mutant("predict: the recommendation takes the slowest setting", "mc2emu/cli/predict.py",
           "return min(ran, key=lambda i: self.rows[i].total_s or 0.0) if ran else None",
           "return max(ran, key=lambda i: self.rows[i].total_s or 0.0) if ran else None",
           serial=("tests/predict/test_predict_cli.py",)),
    Mutant("predict: critical path time counts the launch barrier before the kernel", "mc2emu/predict/replay.py",
           "        spent = max(0.0, end[v] - max(start[v], t0))",
           "        spent = end[v] - start[v]",
           serial=(PREDICT_REPLAY,)),
    Mutant("predict: a stream's launch waits for the host barrier instead of its rank's previous launch",
           "mc2emu/predict/replay.py",
           "                    if self.stream and prev_launch_end >= 0:",
           "                    if False:",
           serial=("tests/predict/test_loop_replay.py",)),
    Mutant("predict: a loop's skew between ranks is never measured", "mc2emu/predict/loop.py",
           "                              max(b for b, _ in per.values()) - begin,",
           "                              0.0,",
           serial=("tests/predict/test_loop_replay.py",)),
    Mutant("predict: the critical path's time is not split by launch", "mc2emu/predict/replay.py",
           "        by_launch[g.launch[v]] += spent + w",
           "        by_launch[g.launch[v]] += spent",
           serial=("tests/predict/test_loop_replay.py",)),
    Mutant("comm: a protocol-only communicator accepts status words past its real prefix",
           "mc2emu/comm/communicator.py",
           "        if ctl > 0 and start + ctl > self.control_bytes:",
           "        if ctl > 0 and start > self.control_bytes:",
           mpi=("tests/protocol/test_loop_equivalence_mpi.py::test_status_words_past_the_real_prefix_are_refused",)),
    Mutant("comm: a protocol-only communicator keeps no control prefix", "mc2emu/comm/communicator.py",
           "        self.control_bytes = size if data else min(size, max(int(control_bytes), SIGNAL_BYTES))",
           "        self.control_bytes = size if data else SIGNAL_BYTES",
           mpi=("tests/protocol/test_loop_equivalence_mpi.py",)),
    Mutant("predict: TeamBarrier observe ignores the peer's store", "mc2emu/predict/replay.py",
           '                g.pending.append((n, ("tb", r.peer, r.barrier, r.slot, c.cnt), m.put_latency_s))',
           '                g.pending.append((n, ("tb", rank, r.barrier, r.slot, c.cnt), m.put_latency_s))',
           serial=(PREDICT_REPLAY,)),
    Mutant("predict: the WQMM sweep's block_dim never reaches the kernel",
           "mc2emu/cli/operators/weight_quant_matmul.py",
           "mode=mode.isolate, block_dim=ctx.block_dim, check=ctx.check,",
           "mode=mode.isolate, block_dim=None, check=ctx.check,",
           serial=(PREDICT_KNOBS + "::test_block_dim_sweep_table_and_recommendation[weight_quant_matmul]",)),
    Mutant("predict: the GMM sweep's block_dim never reaches the kernel", "mc2emu/cli/operators/grouped_matmul_mx.py",
           "trans_a=_mode(case).split is GmmSplit.K, block_dim=ctx.block_dim,",
           "trans_a=_mode(case).split is GmmSplit.K, block_dim=None,",
           serial=(PREDICT_KNOBS + "::test_block_dim_sweep_table_and_recommendation[grouped_matmul_mx]",)),
    Mutant("predict: the reduce-scatter sweep's head_m never reaches the kernel",
           "mc2emu/cli/operators/quant_matmul_reduce_scatter.py",
           "        head_m_size=mode.head_m if mode.head_m is not None else",
           "        head_m_size=None if mode.head_m is not None else",
           mpi=("tests/predict/test_predict_qmrs_mpi.py",)),
    # -- weight_quant_matmul (seed 001, V+C) -----------------------------------------------------------------
    Mutant("wqmm: AIV buffer id restarts per tile (not the running counter)",
           "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "            ubBufId = self.ubLoopCnt_ & 1", "            ubBufId = iterK & 1",
           serial=(WQMM_CHUNKS,)),
    Mutant("wqmm: Cleanup drains one buffer's flag only", "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "        self.ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE3, AIC_TO_AIV_FLAG + 1)", "        pass",
           serial=(WQMM + "::test_full_matches_golden",)),
    Mutant("wqmm: AIC waits AIV0's flag for AIV1", "mc2emu/blaze/gemm/block/weight_quant_matmul_block_mmad.py",
           "            ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIV_TO_AIC_FLAG + l1BufId + FLAG_ID_MAX)",
           "            ctx.CrossCoreWaitFlag(CV_SYNC_MODE, Pipe.PIPE_MTE1, AIV_TO_AIC_FLAG + l1BufId)",
           serial=(WQMM_CHUNKS,)),
    Mutant("wqmm: AIC reads B from L1 buffer 0 always", "mc2emu/blaze/gemm/block/weight_quant_matmul_block_mmad.py",
           "            bL1 = self.B_l1_view(l1BufId, curKL1, curN)",
           "            bL1 = self.B_l1_view(0, curKL1, curN)",
           serial=(WQMM_CHUNKS,)),
    Mutant("wqmm: scale loaded at iterK 0 only (UB half 1 keeps none)",
           "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "        if iterK in (0, 1):", "        if iterK == 0:",
           serial=(WQMM_CHUNKS,)),
    Mutant("wqmm: VF keeps the previous tile's scale", "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "        if table is None or self.vfKey_[ubBufId] != key:", "        if table is None:",
           serial=(WQMM_CHUNKS,)),
    Mutant("wqmm: UB halves at 256 KiB / 2 (not TOTAL_UB_SIZE / 2)",
           "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "        halfUBSize = ctx.device.platform.ub_usable_size >> 1",
           "        halfUBSize = ctx.device.platform.ub_size >> 1",
           serial=(WQMM + "::test_ub_halves_that_overrun_corrupt_the_scale_as_on_the_device",)),
    Mutant("wqmm: host UB query returns 256 KiB", "mc2emu/tiling/weight_quant_tiling_swat.py",
           "        return cls(aic, platform.aiv_count, platform.ub_usable_size, platform.l1_size,",
           "        return cls(aic, platform.aiv_count, platform.ub_size, platform.l1_size,",
           serial=(WQMM + "::test_default_tiling_follows_total_ub_size",)),
    Mutant("UB: overlapping slots not reported", "mc2emu/runtime/local_memory.py",
           "            if other != name and o < end and offset < o + n:", "            if False:",
           serial=(WQMM + "::test_ub_halves_that_overrun_corrupt_the_scale_as_on_the_device",
                   "tests/runtime/test_local_memory_ub.py")),
    Mutant("UB: first fit ignores the slots already placed", "mc2emu/runtime/local_memory.py",
           "            if offset + nbytes <= o:", "            if True:",
           serial=("tests/runtime/test_local_memory_ub.py",)),
    Mutant("wqmm: AIV1 writes its K half at AIV0's rows", "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "            store_nz(nz_view(self.l1, offset, dt, curKL1, curN, f\"B{ubBufId}\"), "
           "subBlockIdx * kHalf, bOut)",
           "            store_nz(nz_view(self.l1, offset, dt, curKL1, curN, f\"B{ubBufId}\"), 0, bOut)",
           serial=(WQMM_CHUNKS,)),
    Mutant("wqmm: bias not added on the first MMAD", "mc2emu/blaze/gemm/block/weight_quant_matmul_block_mmad.py",
           "                tensorL0C += bias[None, :]", "                pass",
           serial=(WQMM + "::test_full_matches_golden",)),
    Mutant("wqmm: the AIV's empty-extent return does not skip Cleanup",
           "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           '"skipping Cleanup: the AIC\'s last Sets of flags 8 and 9 stay pending")\n                return',
           '"skipping Cleanup: the AIC\'s last Sets of flags 8 and 9 stay pending")\n                break',
           serial=(WQMM + "::test_empty_n_piece_skips_the_aiv_drain",)),
    Mutant("wqmm: layout findings not filed", "mc2emu/ops/weight_quant_matmul_host.py",
           "        for f in layout_findings(td, plat, dequantBElemBytes=p.x.dtype.itemsize, "
           "aElemBytes=p.x.dtype.itemsize):",
           "        for f in ():",
           serial=(WQMM + "::test_layout_findings_are_reported",)),
    Mutant("wqmm: dequant-only writes AIV1's K half at AIV0's rows",
           "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "                self.StoreUB2GM(kSubOffset, nPos + nSubOffset, kUbLen, nUbLen, bOut)",
           "                self.StoreUB2GM(kL1Offset, nPos + nSubOffset, kUbLen, nUbLen, bOut)",
           serial=(WQMM + "::test_full_matches_golden",)),
    Mutant("wqmm: scheduler does not reverse N on odd windows",
           "mc2emu/blaze/gemm/block/block_scheduler_matmul_swat_with_tail_split.py",
           "        if rowIdx & 1:\n            nTileIdx = self.nCnt_ - 1 - nTileIdx",
           "        if False:\n            nTileIdx = self.nCnt_ - 1 - nTileIdx",
           serial=(WQ_SCHED,)),
    Mutant("wqmm: scheduler tail split not compacted",
           "mc2emu/blaze/gemm/block/block_scheduler_matmul_swat_with_tail_split.py",
           "        validM = min(mTile, CeilDiv(singleCoreM, singleCoreMSplit)) if singleCoreMSplit else mTile",
           "        validM = mTile",
           serial=(WQ_SCHED,)),
    # -- host harness and CLI table (issue 13 item 4; the agreed host barriers) ------------------------------
    Mutant("host barrier: the agreement round's verdict ignored", "mc2emu/comm/world.py",
           "        if any(outcome):", "        if False:",
           mpi=("tests/comm/test_comm_world.py::test_a_barrier_one_rank_gave_up_on_fails_on_every_rank",),
           why="a late rank walks on from a barrier another rank gave up on"),
    Mutant("harness: a rank leaving the call does not post its failure", "mc2emu/host/harness.py",
           '            self.world.fail(f"{what} {where}")', "            pass",
           mpi=("tests/host/test_harness_mpi.py::test_a_rank_leaving_before_a_window_stops_every_rank_there",),
           why="the peers wait out the host deadline instead of stopping at the next barrier with the verdict"),
    Mutant("left-behind: frees calls some rank did not keep", "mc2emu/host/harness.py",
           "        common = sorted(set.intersection(*kept))", "        common = sorted(set.union(*kept))",
           mpi=("tests/host/test_harness_mpi.py::test_divergent_left_behind_lists_free_only_the_calls_every_rank_kept",)),
    Mutant("a freed failed world keeps its MPI progress thread", "mc2emu/comm/world.py",
           "            w.free()\n        self.mpi_progress.close()\n        self.closed = True",
           "            w.free()\n        pass\n        self.closed = True",
           mpi=("tests/host/test_harness_mpi.py::test_many_calls_grow_neither_windows_nor_threads_nor_memory",)),
    Mutant("a freed failed world runs no close hooks (its HCCL server thread lives on)", "mc2emu/comm/world.py",
           "            return\n        self._run_close_hooks()\n        self.probe.uninstall()",
           "            return\n        pass\n        self.probe.uninstall()",
           mpi=("tests/host/test_harness_mpi.py::test_a_failed_hcomm_calls_hccl_server_ends_when_its_world_is_freed",)),
    # -- a user's kernel through the one call, and the pytest kit ---------------------------------------------
    Mutant("run_kernel: PAYLOAD windows start zeroed (not poisoned)", "mc2emu/comm/world.py",
           "        if role is MemRole.PAYLOAD and self.poison_payload:", "        if False:",
           serial=("tests/testing/test_kit.py::test_run_kernel_poisons_payload_zeroes_control_and_names_the_reads",),
           mpi=("tests/examples/test_examples_mpi.py::test_a_never_written_window_reads_nan_and_is_reported",),
           why="a raw window read before anyone wrote it returns zeros and no report"),
    Mutant("run_kernel: CONTROL windows poisoned too", "mc2emu/comm/world.py",
           "        if role is MemRole.PAYLOAD and self.poison_payload:", "        if self.poison_payload:",
           serial=("tests/testing/test_kit.py::test_run_kernel_poisons_payload_zeroes_control_and_names_the_reads",),
           mpi=("tests/examples/test_examples_mpi.py::test_control_windows_start_at_zero_and_unchecked_payload_too",),
           why="signal and barrier words must start at zero"),
    Mutant("run_kernel: its harness does not ask for poisoned windows", "mc2emu/host/kernel_run.py",
           "LaunchHarness(self.name, self.opts, poison_payload=True)",
           "LaunchHarness(self.name, self.opts, poison_payload=False)",
           serial=("tests/testing/test_kit.py::test_run_kernel_poisons_payload_zeroes_control_and_names_the_reads",)),
    Mutant("run_kernel: CONTROL GM allocations poisoned", "mc2emu/host/kernel_run.py",
           "zero=role is MemRole.CONTROL, role=role)", "zero=False, role=role)",
           serial=("tests/testing/test_kit.py::test_run_kernel_poisons_payload_zeroes_control_and_names_the_reads",)),
    Mutant("run_kernel: hazards never raised", "mc2emu/host/kernel_run.py",
           "        HazardError.raise_on_errors(list(harness.hazards), self._result, check=self.opts.check)",
           "        pass",
           serial=("tests/testing/test_kit.py::test_run_kernel_poisons_payload_zeroes_control_and_names_the_reads",),
           mpi=("tests/examples/test_examples_mpi.py::test_read_before_wait_of_a_peers_put_is_reported_on_every_rank",)),
    Mutant("kit: expect_hazard ignores the ranks it was given", "mc2emu/testing/asserts.py",
           "    if ranks is not None and where != sorted(ranks):", "    if False:",
           serial=("tests/testing/test_kit.py::test_expect_hazard_catches_the_error_and_checks_the_ranks",)),
    Mutant("kit: assert_golden allows one ULP more than asked", "mc2emu/testing/asserts.py",
           "    if worst > max_ulp:", "    if worst > max_ulp + 1:",
           serial=("tests/testing/test_kit.py::test_assert_golden_applies_the_ulp_rule",)),
    # -- persistent Communicator: the layer loop (issue 36 items 1, 2, 4, 5) ------------------------------------
    Mutant("stream calls keep the per-call host barrier before each launch", "mc2emu/host/harness.py",
           "        if self.world is not None and self.stream is None:\n            self.world.barrier(",
           "        if self.world is not None:\n            self.world.barrier(",
           mpi=(COMM_LOOP + "::test_all_gather_loop_every_iteration_equals_golden_no_host_barrier",),
           why="a host barrier between ranks between launches the device stream does not have"),
    Mutant("a carved window poisoned again at every call", "mc2emu/comm/communicator.py",
           "        if not self.first:\n            return", "        if False:\n            return",
           mpi=(COMM_LOOP + "::test_a2a_loops_udma_and_hcomm_equal_golden",),
           why="a peer's next HCCL AlltoAll may already have written the bytes: NaN in iteration 1"),
    Mutant("HCCL_BUFFSIZE: a window past the buffer end accepted", "mc2emu/comm/communicator.py",
           "        if need > self.buffer_size:", "        if need > self.buffer_size + need:",
           mpi=(COMM_LOOP + "::test_window_carved_at_the_buffer_base_and_refused_when_it_does_not_fit",)),
    Mutant("flag counters: reset ignored (counts persist whatever the option)", "mc2emu/runtime/device.py",
           "        if self.launch_count and self.flag_counters is FlagCounters.RESET:",
           "        if self.launch_count and self.flag_counters is None:",
           serial=("tests/runtime/test_flag_counters_across_launches.py",)),
    Mutant("flag counters: persist resets too (a leftover count lost)", "mc2emu/runtime/device.py",
           "        if self.launch_count and self.flag_counters is FlagCounters.RESET:\n            self.flags.reset()",
           "        if self.launch_count:\n            self.flags.reset()",
           serial=("tests/runtime/test_flag_counters_across_launches.py",)),
    Mutant("a failing rank sends no notice (its peers wait out their deadline)", "mc2emu/comm/communicator.py",
           "            self._notices += [self._notice_comm.Isend(note, dest=q, tag=NOTICE_TAG)",
           "            self._notices += [self._notice_comm.Isend(note, dest=q, tag=NOTICE_TAG + 1)",
           mpi=(COMM_LOOP + "::test_a_rank_failing_in_iteration_k_stops_its_peers_at_once_by_notice",)),
    Mutant("a peer's notice: close still runs the barrier the failed rank never joins",
           "mc2emu/comm/communicator.py",
           "            if self.failed is None and self.peer_failed is None:\n"
           "                hazards = self.sync(timeout)",
           "            if self.failed is None:\n                hazards = self.sync(timeout)",
           mpi=(NOTICE_REFUSES,)),
    Mutant("a notice stops the waits of launches before the peer's failed one", "mc2emu/comm/communicator.py",
           "                    and self.device.launch_count - 1 >= doomed):", "                    and True):",
           mpi=(NOTICE_REFUSES,)),
    Mutant("deadlock report: no launch index on a stream", "mc2emu/check/deadlock.py",
           'return f"{name}, launch {dev.launch_count - 1}" if dev.numbered_launches else name',
           "return name",
           mpi=(COMM_LOOP + "::test_a_stalled_rank_in_iteration_k_stops_every_rank_naming_launch_k",)),
    Mutant("CLI errors: the first rank's message detailed, not the declaring rank's deadlock report",
           "mc2emu/cli/report.py",
           '(msg, _) in enumerate(groups.values()) if "\\nDEADLOCK report of rank " in msg), 0)',
           '(msg, _) in enumerate(groups.values()) if False), 0)',
           serial=("tests/cli/test_cli_units.py::test_table_progress_and_errors_text",)),
    Mutant("CLI errors: the declaring rank's deadlock report left out of its message", "mc2emu/cli/runner.py",
           "    if isinstance(exc, DeadlockError) and exc.report and not exc.declared_elsewhere:",
           "    if False:",
           serial=("tests/cli/test_cli_units.py::test_a_deadlock_message_carries_the_report_only_on_the_rank_that_declared_it",)),
    Mutant("CLI table: launch notes not marked", "mc2emu/cli/report.py",
           '                     " ".join(f"[{numbers[n]}]" for n in rep.notes)))', '                     ""))',
           serial=("tests/cli/test_cli_units.py::test_launch_notes_are_numbered_once_in_the_table_and_listed_under_it",
                   "tests/cli/test_runner.py::test_launch_option_reaches_the_operator_and_its_notes_reach_the_table")),
    Mutant("A2A CLI entry drops the launch note", "mc2emu/cli/operators/all_to_all.py",
           "            ctx.notes.append(info.note)", "            pass",
           mpi=("tests/apace/test_a2a_source_fidelity_mpi.py::"
                "test_udma_launch_raised_to_r_blocks_is_noted_and_the_source_launch_refused",)),
    Mutant("A2A CLI entry ignores --launch", "mc2emu/cli/operators/all_to_all.py",
           "            launch=options.launch, return_stats=True)", "            return_stats=True)",
           mpi=("tests/apace/test_a2a_source_fidelity_mpi.py::"
                "test_udma_launch_raised_to_r_blocks_is_noted_and_the_source_launch_refused",)),
    # -- recorded outputs (tests/ops/recorded_outputs.json): the pins alone see a planted bug of each operator ----
    Mutant("pins: AG TAIL C rows written at the block start", "mc2emu/apace/all_gather_qbmm_mx_kernel.py",
           "        tailCOff = tailRowOff * params.cBytesPerM", "        tailCOff = 0",
           mpi=(f"{PINS_MPI}::test_ag_output_bytes_are_the_recorded_ones",)),
    Mutant("pins: QMRS per_block epilogue writes the owner's row at the global row", QMRS_EPILOGUE,
           "                row0 = self.rankId_ * self.tpSizeM_ + globalRow % self.tpSizeM_",
           "                row0 = globalRow % self.tpSizeM_",
           mpi=(f"{PINS_MPI}::test_qmrs_output_bytes_are_the_recorded_ones",),
           why="the per_block pin is of HazardError.output (the source's flag-9 report)"),
    Mutant("pins: GMM split-M A offset ignores the group's first row", "mc2emu/blaze/gemm/kernel/kernel_qgmm_mx_run.py",
           "off[IDX_A_OFFSET] = ((pre - m) * k) >> shift", "off[IDX_A_OFFSET] = (pre * k) >> shift",
           serial=(f"{PINS}::test_gmm_output_bytes_are_the_recorded_ones",)),
    Mutant("pins: GMM cmatrixInitVal also with bias", "mc2emu/blaze/gemm/block/block_mmad_mx_cgmct.py",
           "initCMatrix = kL0Offset == 0 and not self.isBias_", "initCMatrix = kL0Offset == 0",
           serial=(f"{PINS}::test_gmm_output_bytes_are_the_recorded_ones",),
           why="a value-only change (the split-M offset mutant above is mostly caught as an out-of-range GM read)"),
    Mutant("pins: WQMM AIV1 writes its K half at AIV0's rows", "mc2emu/blaze/gemm/kernel/weight_quant_matmul_kernel.py",
           "            store_nz(nz_view(self.l1, offset, dt, curKL1, curN, f\"B{ubBufId}\"), "
           "subBlockIdx * kHalf, bOut)",
           "            store_nz(nz_view(self.l1, offset, dt, curKL1, curN, f\"B{ubBufId}\"), 0, bOut)",
           serial=(f"{PINS}::test_wqmm_output_bytes_are_the_recorded_ones",)),
    # -- atomic write-out in another type than the data (issue 13 item 9) -------------------------------------
    Mutant("atomic add of another dtype added as if the types matched", "mc2emu/runtime/gm.py",
           "                if atomic == dtype:", "                if True:",
           serial=("tests/runtime/test_device.py::test_atomic_add_of_another_dtype_adds_words_of_the_atomic_type_over_the_bytes",
                   QBMM + "::test_atomic_float_over_a_bf16_c_is_reported_and_adds_float_words")),
    Mutant("atomic dtype mismatch: bytes past the last whole word kept", "mc2emu/runtime/gm.py",
           "    dst[..., whole:] = POISON_BYTE", "    pass",
           serial=("tests/runtime/test_device.py::test_atomic_add_of_another_dtype_adds_words_of_the_atomic_type_over_the_bytes",)),
    # -- FragmentTensor copy plans shared between slices (host time only) ------------------------------------------
    Mutant("fragment copy plans shared by origin alone", "mc2emu/apace/basic/fragment_tensor.py",
           "    key = (fragParam, sliceCoord, sliceShape)", "    key = (fragParam, sliceCoord)",
           serial=("tests/apace/test_fragment_tensor.py",)),
    Mutant("fragment copy plans shared across fragment parameters", "mc2emu/apace/basic/fragment_tensor.py",
           "    key = (fragParam, sliceCoord, sliceShape)", "    key = (sliceCoord, sliceShape)",
           serial=("tests/apace/test_fragment_tensor.py",)),
    # -- no input crashes (tests/property): each refusal Hypothesis made necessary --------------------------------
    Mutant("SWAT tiling for 0 AI cores (ZeroDivisionError)", "mc2emu/tiling/quant_matmul_tiling_data.py",
           "        if aic < 1:  # the tiling divides by it", "        if aic < 0:  # the tiling divides by it",
           serial=("tests/property/test_host_tilings.py",)),
    Mutant("weight-quant tiling for 0 AI cores (ZeroDivisionError)", "mc2emu/tiling/weight_quant_tiling_swat.py",
           "        if aic < 1:  # CalcTailBasicBlock divides by it",
           "        if aic < 0:  # CalcTailBasicBlock divides by it",
           serial=("tests/property/test_host_tilings.py",)),
    Mutant("GMM tiling for 0 AI cores (blockDim 0 accepted)",
           "mc2emu/tiling/grouped_matmul_tiling_context.py",
           "        if aic < 1:  # the block dim of the launch", "        if aic < 0:  # the block dim of the launch",
           serial=("tests/property/test_host_tilings.py",)),
    Mutant("QMRS shape rules at R 0 (ZeroDivisionError)", "mc2emu/tiling/quant_matmul_reduce_scatter_tiling.py",
           "    if rank_size < 1:\n        return [(\"QMRS-0 R >= 1\"",
           "    if rank_size < 0:\n        return [(\"QMRS-0 R >= 1\"",
           serial=("tests/property/test_host_tilings.py",)),
    Mutant("A2A tiling at R 0 accepted", "mc2emu/tiling/all_to_all_quant_matmul_tiling.py",
           "    if rank_size < 1:\n        out.append((\"A2A-5 1 <= R <= 64\"",
           "    if rank_size < 0:\n        out.append((\"A2A-5 1 <= R <= 64\"",
           serial=("tests/property/test_host_tilings.py",)),
    Mutant("SWAT tiling of an FP4 x FP8 pair (L0B overflow)", "mc2emu/tiling/quant_matmul_tiling_swat.py",
           "        for reason in dtype_pair_violations(a, b):  # baseK", "        for reason in []:  # baseK",
           serial=("tests/property/test_host_tilings.py",)),
    Mutant("GMM tiling of a negative M (ZeroDivisionError)", "mc2emu/tiling/grouped_quant_matmul_shape_attrs.py",
           "    if min(*x, *w) < 0:  # the framework", "    if False:  # the framework",
           serial=("tests/property/test_host_tilings.py",)),
    Mutant("GMM split-K with an empty group list (IndexError in the kernel)",
           "mc2emu/ops/grouped_matmul_mx_op.py",
           "    if split_k and g == 0:", "    if False:", serial=("tests/property/test_operator_entries.py",)),
    Mutant("GMM scales short of the MX layout (read past the allocation)", "mc2emu/ops/grouped_matmul_mx_op.py",
           "        if arr.shape != want:", "        if False:", serial=("tests/property/test_operator_entries.py",)),
    Mutant("WQMM runs a tiling whose buffers overlap (wrong numbers)", "mc2emu/ops/weight_quant_matmul_host.py",
           "    if findings:\n        raise ConstraintError(f\"tiling layout",
           "    if False:\n        raise ConstraintError(f\"tiling layout",
           serial=("tests/property/test_operator_entries.py",)),
    Mutant("collective entries read .shape of a list (AttributeError)", "mc2emu/ops/mx_operands.py",
           "    if loose:\n        errs.append((\"operands are numpy arrays\"",
           "    if False:\n        errs.append((\"operands are numpy arrays\"",
           serial=("tests/property/test_operator_entries.py",)),
    Mutant("AG seed window without room for the TAIL's padded data rows (GmError)",
           "mc2emu/ops/all_gather_quant_matmul_host.py",
           "            winBytes = dataRegionBytes + max((R * m + pad) * scaleRowBytes, pad * rowBytes)",
           "            winBytes = dataRegionBytes + (R * m + pad) * scaleRowBytes",
           mpi=("tests/property/test_collective_entries_mpi.py::"
                "test_all_gather_seed_tail_over_read_stays_in_the_window_and_out_of_the_output",)),
    Mutant("fragment scatter writes the padded rows too", "mc2emu/apace/basic/fragment_tensor.py",
           "            remain = realFragmentSize - info.fragCoord[assembleAxis]",
           "            remain = fragmentTensor.GetFragmentSize() - info.fragCoord[assembleAxis]",
           mpi=("tests/property/test_collective_entries_mpi.py::"
                "test_all_gather_seed_tail_over_read_of_stale_nan_bytes_never_reaches_the_output",)),
    # -- the benches' floor (launch/mmad_floor.py): it must be the emulator's own steps ----------------------------
    Mutant("floor: each kL1 chunk restarts L0C (steps of one chunk only)", "launch/mmad_floor.py",
           "                    if ch == 0 and lo == 0:", "                    if lo == 0:",
           serial=("tests/ops/test_mmad_floor.py",)),
    Mutant("floor: a transposed B's steps always row-major", "launch/mmad_floor.py",
           "                    if not b_row_major_same(curM, hi - lo, curN, False):", "                    if False:",
           serial=("tests/ops/test_mmad_floor.py",)),
    Mutant("predict: the other ranks wait for rank 0's replay in the next knob's collective", "mc2emu/cli/predict.py",
           "        idle_barrier(comm)\n        case = Case(", "        case = Case(",
           mpi=("tests/predict/test_predict_api_mpi.py::test_the_other_ranks_sleep_while_rank_0_replays",),
           why="16-rank AG predict: 15 ranks spun in MPI while rank 0 replayed at 1/16 of the CPUs (47 min, stopped)"),
    # -- protocol-only runs (data=False): refuse payload values, same record ----------------------------------------
    Mutant("protocol-only: a payload value in a branch is taken as False", "mc2emu/numerics/payload.py",
           '        raise refuse("a branch condition")\n\n    def __int__', '        return False\n\n    def __int__',
           serial=("tests/protocol/test_payload.py",)),
    Mutant("protocol-only: a UB scalar of payload reads the stale bytes", "mc2emu/runtime/local_region.py",
           '            if isinstance(view, LocalRegion) and view.holds_payload():',
           '            if False:', serial=("tests/protocol/test_payload.py",)),
    Mutant("protocol-only: a window write skips its event", "mc2emu/runtime/gm.py",
           "        alloc.generation += 1\n        if self.events.wants(GmWrite, alloc.name):\n"
           "            self.events.emit(GmWrite, core, alloc.name, lo=lo, hi=hi, offset=addr.offset, shape=sshape,\n"
           "                             strides=st, item=item, alloc=alloc, atomic=atomic is not None)\n\n"
           "    def _write_marked",
           "        alloc.generation += 1\n        if False:\n"
           "            self.events.emit(GmWrite, core, alloc.name, lo=lo, hi=hi, offset=addr.offset, shape=sshape,\n"
           "                             strides=st, item=item, alloc=alloc, atomic=atomic is not None)\n\n"
           "    def _write_marked",
           serial=("tests/protocol/test_equivalence.py",)),
]


class PatternError(RuntimeError):
    pass


def locate(root: Path, m: Mutant) -> str:
    """The mutated text of m.path under root; PatternError when the pattern is absent or ambiguous."""
    src = (root / m.path).read_text() if (root / m.path).exists() else None
    if src is None:
        raise PatternError(f"{m.name}: file {m.path} not found (the code moved: update the mutant)")
    n = src.count(m.old)
    if n != 1:
        what = "pattern not found" if n == 0 else f"pattern ambiguous ({n} matches)"
        raise PatternError(f"{m.name}: {what} in {m.path}: {m.old!r} (the code moved: update the mutant)")
    mutated = src.replace(m.old, m.new)
    if mutated == src:
        raise PatternError(f"{m.name}: the replacement changes nothing")
    return mutated


def mpiexec() -> str:
    for name in ("mpiexec", "mpirun"):
        path = shutil.which(name)
        if path:
            return path
    raise SystemExit("no mpiexec on PATH")


def run_tests(root: Path, m: Mutant, timeout: float) -> tuple[bool, str]:
    """(tests passed, short reason). Serial tests first, then the MPI tests."""
    env = dict(os.environ, PYTHONPATH=str(root), **ENV_PINS)
    cmds = []
    if m.serial:
        cmds.append([sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *m.serial])
    if m.mpi:
        cmds.append([mpiexec(), "-n", str(m.ranks), sys.executable, "-m", "pytest", "--only-mpi", "-x", "-q",
                     "-p", "no:cacheprovider", *m.mpi])
    for cmd in cmds:
        try:
            proc = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
        except subprocess.TimeoutExpired:
            return False, f"timeout after {timeout:.0f} s"
        if proc.returncode != 0:
            out = proc.stdout + proc.stderr
            failed = [ln for ln in out.splitlines() if ln.startswith(("FAILED", "ERROR"))
                      or " FAILED " in ln]
            return False, (failed[0].strip()[:110] if failed else f"exit {proc.returncode}")
    return True, "tests pass"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", action="append", default=[], help="run mutants whose name contains this (repeatable)")
    ap.add_argument("--list", action="store_true", help="list the mutants and exit")
    ap.add_argument("--baseline", action="store_true", help="check the selected tests pass unmutated first")
    ap.add_argument("--src", type=Path, default=REPO, help="tree to copy (default: this repository)")
    ap.add_argument("--timeout", type=float, default=RUN_TIMEOUT_S)
    args = ap.parse_args(argv)
    chosen = [m for m in MUTANTS if not args.k or any(k.lower() in m.name.lower() for k in args.k)]
    if args.list:
        for i, m in enumerate(chosen, 1):
            print(f"{i:2d}. {m.name}  [{m.path}]\n      serial: {' '.join(m.serial) or '-'}\n"
                  f"      mpi -n {m.ranks}: {' '.join(m.mpi) or '-'}")
        return 0
    # Every pattern must be found before anything runs: a moved code path is an error, not a skip.
    errors = []
    for m in chosen:
        try:
            locate(args.src, m)
        except PatternError as exc:
            errors.append(str(exc))
    if errors:
        print("\n".join(errors), file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="mc2emu-mutants-") as tmp:
        root = Path(tmp)
        for item in COPIED:
            src = args.src / item
            if src.is_dir():
                shutil.copytree(src, root / item, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(src, root / item)
        if args.baseline:
            for m in chosen:
                ok, why = run_tests(root, m, args.timeout)
                if not ok:
                    print(f"baseline fails for {m.name}: {why}", file=sys.stderr)
                    return 2
            print("baseline: the selected tests pass unmutated")
        rows = []
        width = max(len(m.name) for m in chosen)
        print(f"{'#':>2}  {'mutant':<{width}}  {'result':<8}  {'s':>5}  reason")
        for i, m in enumerate(chosen, 1):
            path = root / m.path
            original = path.read_text()
            path.write_text(locate(root, m))
            t0 = time.monotonic()
            try:
                passed, why = run_tests(root, m, args.timeout)
            finally:
                path.write_text(original)
            result = "survived" if passed else "killed"
            rows.append((m, result))
            print(f"{i:2d}  {m.name:<{width}}  {result:<8}  {time.monotonic() - t0:5.0f}  {why}", flush=True)
    killed = sum(r == "killed" for _, r in rows)
    print(f"\n{killed} killed, {len(rows) - killed} survived of {len(rows)} mutants")
    for m, r in rows:
        if r == "survived":
            print(f"  SURVIVED: {m.name} ({m.path}); tests: {' '.join(m.serial + m.mpi)}")
    return 0 if killed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
