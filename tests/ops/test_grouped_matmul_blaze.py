"""grouped_matmul_mx's three source kernels, told apart by what they do: variant "cgmct" (GmmCgmctMxKernel,
default), "blaze" (the IS_BLAZE kernel: ops-tensor kernel_qgmm_mx.h + block_mmad_qgmm_mx.h, 03460a61) and
"blaze_sample" (ops-tensor's sample kernel). The tail-split pieces each kernel's SetTailAlign gives, seen in
the schedule and in the kernel's fixpipe trace; the group-list types each accepts; the unitFlag rule of each
BlockMmad on a short inner K step (hand-set chunks the operator's tiling does not produce); values against
the golden and bitwise equal across variants."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from gmm_cases import split_k_case, split_m_case
from test_grouped_matmul_mx import assert_close, golden, run

from mc2emu.ops import grouped_matmul_mx_op, grouped_matmul_mx_schedule
from mc2emu.runtime import ConstraintError
from mc2emu.runtime.events import Fixpipe, Mmad

SIZES, N, K = [25, 25, 25, 25], 700, 512  # group 3 ends on core 11 of 32: its 3 tiles are tail-split


def _last_group_pieces(variant, trans_b=False):
    recs = grouped_matmul_mx_schedule(SIZES, N, K, variant=variant, trans_b=trans_b)
    return sorted((r.core, r.m_offset, r.n_offset, r.m_piece, r.n_piece) for r in recs if r.group == 3)


def test_tail_split_pieces_per_variant_in_schedule():
    """split-M NN FP8, last group 25 x 700 (tiles 256 | 256 | 188): CGMCT 2 x 2 pieces of rows 13 | 12 and
    columns rounded to 128; Blaze (mTailAlign 1, nTailAlign C0 32: minimum pieces 1 x 16) 2 x 3 pieces of 13 | 12
    rows and columns rounded to 32 (96 | 96 | 64 of 256); the sample (16, 128): rows 16 | 9, columns 128."""
    cg, bl, sa = (_last_group_pieces(v) for v in ("cgmct", "blaze", "blaze_sample"))
    assert {(m, n) for _c, _mo, _no, m, n in cg} == {(13, 128), (12, 128), (13, 60), (12, 60)}
    assert {(m, n) for _c, _mo, _no, m, n in bl} == {(13, 96), (12, 96), (13, 64), (12, 64), (13, 60), (12, 60)}
    assert {(m, n) for _c, _mo, _no, m, n in sa} == {(16, 128), (9, 128), (16, 60), (9, 60)}
    assert len(cg) == 12 and len(bl) == 18 and len(sa) == 12
    assert [c for c, *_ in bl] == list(range(9, 27))  # 3 tiles x 6 pieces on cores 9..26
    # transB: nTailAlign 16 in all three; Blaze and CGMCT agree, the sample still rounds rows to 16
    assert _last_group_pieces("blaze", True) == _last_group_pieces("cgmct", True)
    assert {m for *_, m, _n in _last_group_pieces("blaze_sample", True)} == {16, 9}


@pytest.mark.parametrize("variant", ["blaze", "blaze_sample"])
def test_kernel_trace_follows_its_variants_schedule(variant):
    """The kernel run with `variant` fixpipes exactly the pieces that variant's schedule lists (core, offsets,
    extents, order), and the values are the CGMCT kernel's bit for bit."""
    c = split_m_case(SIZES, N, K, seed=7)
    events = []
    y = run(c, variant=variant, observers=[lambda ev: isinstance(ev, Fixpipe) and events.append(ev)])
    want = {}
    for r in grouped_matmul_mx_schedule(SIZES, N, K, variant=variant):
        want.setdefault(f"AIC{r.core}", []).append((r.m_offset, r.n_offset, r.m_piece, r.n_piece))
    got = {}
    for ev in events:
        got.setdefault(ev.core, []).append((*ev.origin, ev.m, ev.n))
    assert got == want
    assert_close(y, golden(c))
    np.testing.assert_array_equal(y.view(np.uint16), run(c).view(np.uint16))


@pytest.mark.parametrize(("glt", "sizes", "m"), [
    ("cumsum", [10, 20, 0, 15], None),
    ("count", [0, 33, 1, 30], None),
    ("sparse", [(0, 20), (2, 0), (1, 30), (3, 11)], 70),  # stops at the empty entry, runs the last
])
def test_blaze_reads_every_group_list_type(glt, sizes, m):
    """kernel_qgmm_mx.h GetSplitValueFromGroupList reads cumsum / count / sparse (the sample: count only)."""
    c = split_m_case(sizes, 96, 320, group_list_type=glt, m=m, seed=4)
    y = run(c, variant="blaze")
    assert_close(y, golden(c))
    np.testing.assert_array_equal(y.view(np.uint16), run(c).view(np.uint16))
    if glt != "count":
        with pytest.raises(ConstraintError, match="count group list"):
            run(c, variant="blaze_sample")


def test_blaze_split_k_and_fp4_transb_unpadded_tail():
    """split-K (transA: the AIVs still zero-fill K == 0 groups) and FP4 NT with K % 64 != 0 (the Blaze BlockMmad
    leaves FP4 A / transB B unpadded: a narrower last step, the same bits)."""
    c = split_k_case([128, 0, 320], 40, 96, seed=5)
    y = run(c, variant="blaze")
    assert_close(y, golden(c))
    np.testing.assert_array_equal(y.view(np.uint16), run(c).view(np.uint16))
    c4 = split_m_case([30, 18], 64, 1000, trans_b=True, fp4=True, seed=6)
    y4 = run(c4, variant="blaze")
    assert_close(y4, golden(c4))
    np.testing.assert_array_equal(y4.view(np.uint16), run(c4).view(np.uint16))


def _hand_chunks(monkeypatch, **mm_fields):
    """Run the operator's kernel with the tiling's L1 chunk sizes replaced (the block driven with chunks the
    tiling does not give: kAL1 / kBL1 not multiples of baseK)."""
    real = grouped_matmul_mx_op.run_grouped_matmul_mx

    def patched(p, opts):
        td = p.tiling.tilingData
        td = dataclasses.replace(td, mmTilingData=dataclasses.replace(td.mmTilingData, **mm_fields))
        return real(dataclasses.replace(p, tiling=dataclasses.replace(p.tiling, tilingData=td)), opts)

    monkeypatch.setattr(grouped_matmul_mx_op, "run_grouped_matmul_mx", patched)


def test_unitflag_rule_on_a_short_inner_step(monkeypatch):
    """FP8, K 256, baseK 128, kAL1 = kBL1 = 192 (A-major): steps at K 0 / 128 / 192 of 128 / 64 / 64.
    CGMCT (block_mmad_mx.h: kL0Offset + baseK >= k) marks the step at 128 final: unitFlag 2, 3, 3; Blaze
    (block_mmad_qgmm_mx.h: absKOffset + curKL0 >= k_) only the last: 2, 2, 3. Same values."""
    _hand_chunks(monkeypatch, kAL1=192, kBL1=192)
    c = split_m_case([16], 32, 256, seed=8)
    flags, ys = {}, {}
    for v in ("cgmct", "blaze"):
        evs = []
        ys[v] = run(c, variant=v, block_dim=1,
                    observers=[lambda ev, evs=evs: isinstance(ev, Mmad) and evs.append(ev)])
        flags[v] = [(e.k, e.unitFlag) for e in evs]
        assert_close(ys[v], golden(c))
    assert flags["cgmct"] == [(128, 2), (64, 3), (64, 3)]
    assert flags["blaze"] == [(128, 2), (64, 2), (64, 3)]
    np.testing.assert_array_equal(ys["blaze"].view(np.uint16), ys["cgmct"].view(np.uint16))


def test_variant_refusal_names_the_choices():
    c = split_m_case([8], 32, 64)
    with pytest.raises(ConstraintError, match="blaze_sample"):
        run(c, variant="cann")


def test_b_major_inner_a_chunks_relative_offsets(monkeypatch):
    """kAL1 128 < kBL1 256 (B-major), K 384: the Blaze Iterate gets (absKStartA = kInner, kaL1Offset 0,
    kbL1Offset kInner - kOuter) and walks the A chunks at K 0 / 128 / 256 inside B chunks at 0 / 256."""
    _hand_chunks(monkeypatch, kAL1=128, kBL1=256)
    c = split_m_case([20, 12], 48, 384, seed=9)
    evs = []
    y = run(c, variant="blaze", block_dim=1,
            observers=[lambda ev: isinstance(ev, Mmad) and evs.append(ev)])
    assert_close(y, golden(c))
    assert [e.unitFlag for e in evs] == [2, 2, 3] * 2  # two groups, one tile each
    np.testing.assert_array_equal(y.view(np.uint16), run(c, block_dim=1).view(np.uint16))
