"""The launch rule every collective operator applies to `block_dim` before its own rules: None or an
integer in [1, 32] (AI cores of DAV_3510); anything else is refused on every rank, naming the rule and the
value (before it, 0 divided by zero in the tiling and 2.5 ran)."""

import pytest

from mc2emu.arch.platform import DAV_3510
from mc2emu.ops import all_gather_quant_matmul, all_to_all_quant_matmul, gen_ag_st_inputs, quant_matmul_reduce_scatter
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.ops.quant_matmul_reduce_scatter_golden import gen_qmrs_st_inputs
from mc2emu.runtime import ConstraintError


def inputs(op, rank, size):
    if op == "ag":
        return all_gather_quant_matmul, gen_ag_st_inputs(256, 128, 64, rank)
    if op == "a2a":
        return all_to_all_quant_matmul, gen_st_inputs(rank, size, 64, 128, 64, seed=1)
    return quant_matmul_reduce_scatter, gen_qmrs_st_inputs(size * 32, 128, 48, rank)


def test_the_rule_in_one_place():
    assert DAV_3510.block_dim_violations(None) == DAV_3510.block_dim_violations(32) == []
    for bad in (0, -1, 33, 2.5, True, "4"):
        ((rule, reason),) = DAV_3510.block_dim_violations(bad)
        assert rule == "block_dim" and reason.endswith(f"got {bad!r}") and "[1, 32]" in reason


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("op", ["ag", "a2a", "qmrs"])
@pytest.mark.parametrize("block_dim", [0, -1, 2.5])
def test_a_bad_block_dim_is_refused_on_every_rank(op, block_dim):
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    fn, inp = inputs(op, comm.Get_rank(), comm.Get_size())
    with pytest.raises(ConstraintError) as info:
        fn(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], block_dim=block_dim, timeout=10)
    assert f"block_dim must be None or an integer in [1, 32] (AI cores of DAV_3510), got {block_dim!r}" \
        in str(info.value)
