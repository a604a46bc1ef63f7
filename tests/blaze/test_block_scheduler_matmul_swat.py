"""BlockSchedulerMatmulSwatWithTailSplit (ops-tensor): tile order, merged edges, compact tail pieces."""

from __future__ import annotations

import numpy as np
import pytest

from mc2emu.blaze.gemm.block.block_scheduler_matmul_swat_with_tail_split import (
    BlockSchedulerMatmulSwatParams,
    BlockSchedulerMatmulSwatWithTailSplit,
)


def _cover(m, n, params, block_num):
    bs = BlockSchedulerMatmulSwatWithTailSplit((m, n, 64), BlockSchedulerMatmulSwatParams(**params),
                                               block_num=block_num)
    seen = np.zeros((m, n), dtype=np.int32)
    pieces = []
    for t in range(bs.GetTileCount()):
        coord = bs.GetBlockCoord(t)
        shape = bs.GetBlockShape(coord)
        assert shape[0] > 0 and shape[1] > 0 and shape[2] == 64
        assert coord[0] + shape[0] <= m and coord[1] + shape[1] <= n, (coord, shape)
        seen[coord[0]: coord[0] + shape[0], coord[1]: coord[1] + shape[1]] += 1
        pieces.append((coord, shape))
    return bs, seen, pieces


def test_windows_of_four_m_rows_with_n_reversed_on_odd_windows():
    bs, seen, pieces = _cover(8 * 16, 3 * 32, {"baseM": 16, "baseN": 32}, 24)
    assert (seen == 1).all() and bs.GetTileCount() == 24
    # window 0: M tiles 0-3 fastest, N ascending; window 1 (M tiles 4-7): N descending
    assert [(c[0] // 16, c[1] // 32) for c, _ in pieces[:5]] == [(0, 0), (1, 0), (2, 0), (3, 0), (0, 1)]
    assert [(c[0] // 16, c[1] // 32) for c, _ in pieces[12:17]] == [(4, 2), (5, 2), (6, 2), (7, 2), (4, 1)]


def test_merged_edges_take_tail_main():
    _, seen, pieces = _cover(16, 100, {"baseM": 16, "baseN": 32, "nBaseTailSplitCnt": 2, "nTailMain": 32}, 8)
    assert (seen == 1).all()
    widths = sorted((c[1], s[1]) for c, s in pieces)
    assert widths == [(0, 32), (32, 32), (64, 32), (96, 4)]


@pytest.mark.parametrize(("m", "n", "mt", "nt", "blocks"), [(100, 160, 2, 2, 8), (40, 70, 3, 1, 5), (300, 90, 2, 2, 7)])
def test_compact_tail_split_covers_once_without_empty_pieces(m, n, mt, nt, blocks):
    bs, seen, pieces = _cover(m, n, {"baseM": 48, "baseN": 64, "mTailTile": mt, "nTailTile": nt}, blocks)
    assert (seen == 1).all()
    tail = bs.totalCnt_ % blocks
    if tail and bs.totalTileNum_ > bs.totalCnt_:
        assert any(c[3] >= 0 for c, _ in pieces)


def test_tail_split_dropped_when_pieces_outnumber_cores():
    bs, seen, _ = _cover(144, 192, {"baseM": 48, "baseN": 64, "mTailTile": 4, "nTailTile": 4}, 8)
    assert (seen == 1).all() and bs.GetTileCount() == bs.totalCnt_
