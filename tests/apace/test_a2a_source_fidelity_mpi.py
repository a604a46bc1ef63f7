"""all_to_all_quant_matmul held against the public source (issue 13): the host's head tile, the limits,
window poison, the happens-before coverage of hcomm, the Finalize race and the state the source leaves
alone. Source: ops-transformer `mc2/common/op_kernel/apace` (libochao-huawei/ops-transformer, commit
bb298b1c5 for the CommPolicy version emulated, 5778144 for the later one)."""

import pytest

from mc2emu.numerics import bf16_ulp_distance
from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs, golden_a2a

TIMEOUT = 30.0


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    kw.setdefault("timeout", TIMEOUT)
    return all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


def assert_all_ranks(comm, ok, what):
    flags = comm.allgather(bool(ok))
    assert all(flags), f"{what}: failed on ranks {[r for r, f in enumerate(flags) if not f]}"


# -- item 1: the hcomm head tile comes from the launched core count ------------------------------------
@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("impl", ["hcomm", "udma"])
def test_head_tile_from_the_launched_core_count(impl):
    """CANN ST main.cpp: headMSize = CeilDiv(usedCoreNum, CeilDiv(n, baseN)) * baseM. 600 rows, one N
    tile, baseM 256: 2 launched cores give a 512-row head tile and an 88-row tail (commTurn 2), where 64
    cores would give one 600-row tile."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 600, 128, 64)
    stats = {}
    block_dim = max(2, size) if impl == "udma" else 2
    c = run(inp, impl=impl, wait_order="in_order", block_dim=block_dim, stats=stats)
    info = stats["launch"]
    base_m, base_n, _ = info.base
    head = -(-info.block_dim // -(-64 // base_n)) * base_m
    ct = info.comm_tiling
    assert ct.splitAxisTileSize == head
    assert (ct.splitAxisTileCnt, ct.splitAxisTailSize, ct.splitAxisTailCnt) == (600 // head, 600 % head,
                                                                                1 if 600 % head else 0)
    if impl == "hcomm":
        assert (info.block_dim, base_m, base_n, ct.splitAxisTileSize, ct.commTurn) == (2, 256, 64, 512, 2)
    x1s, x1ss = comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])
    ulp = bf16_ulp_distance(c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
    assert_all_ranks(comm, ulp <= 1, f"{impl}: {ulp} ULP")
