"""all_gather_quant_matmul's input rules at world sizes no test job runs (validate is per rank, no MPI): the rank
limit of each protocol's kernel (seed 8: ops-transformer 5778144076 `cFragAddrs_[8]`; slot ring 16:
hicann/ops-transformer 67a83540d75e `MAX_RANK_SIZE = 16U`), bias on the slot ring only, no round limit."""

import numpy as np
import pytest

from mc2emu.ops.all_gather_quant_matmul_golden import gen_ag_st_inputs
from mc2emu.ops.all_gather_quant_matmul_op import AgProtocol, validate


def check(m, rank_size, protocol, bias=None, k=128, n=64):
    inp = gen_ag_st_inputs(m, k, n, 0)
    return validate(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], rank=0, rank_size=rank_size,
                    wait_order=None, protocol=protocol, slot_num=0, bias=bias, out_dtype="bfloat16",
                    kernel_variant="source")


@pytest.mark.parametrize("protocol, ok, refused", [("seed", 8, 9), ("slot_ring", 16, 17)])
def test_each_protocol_keeps_its_kernels_rank_limit(protocol, ok, refused):
    problem, errs = check(64, ok, protocol)
    assert errs == [] and problem is not None and problem.rank_size == ok
    problem, errs = check(64, refused, protocol)
    assert problem is None and [rule for rule, _ in errs] == [f"AG-3 R <= {ok}"]
    assert ("cFragAddrs_[8]" if ok == 8 else "MAX_RANK_SIZE = 16U") in errs[0][1]


def test_bias_on_the_slot_ring_only():
    bias = np.ones(64, np.float32)
    problem, errs = check(64, 2, "slot_ring", bias)
    assert errs == [] and problem is not None and problem.has_bias and problem.protocol is AgProtocol.SLOT_RING
    problem, errs = check(64, 2, "seed", bias)
    assert problem is None and [rule for rule, _ in errs] == ["bias"]
    assert "isBias = false" in errs[0][1]


@pytest.mark.parametrize("protocol", ["seed", "slot_ring"])
def test_no_round_limit(protocol):
    """m 8205 at K 128: 16 tiles + a tail, commTurn 17 (the CANN AG ST / URMA tables' case), R 16 on the ring."""
    problem, errs = check(8205, 16 if protocol == "slot_ring" else 8, protocol)
    assert errs == [] and problem is not None
