"""all_gather_quant_matmul inside the source's limits and no others (issue 35 item 3), at every world size:
past 15 rounds on both protocols (the CANN AG ST m = 8192 / 8205, commTurn 16 / 17, at small K and N), the
slot ring's bias, the mask kernel's id aliasing shown as READ_BEFORE_WAIT naming the flag, and a launch with
fewer blocks than ranks run as on the device and reported as PEER_NOT_SERVED. The aliasing starts at 16
rounds, not 17: id 16 is HEAD's pre-set id 0, which an AIC with no HEAD tile takes for its TAIL tile.

Sources: ops-transformer 5778144076 `all_gather_qbmm_mx_kernel.h` (seed, in-order waits, ids round + 1
unbounded), f241800c4 `qmm_mx_kernel_ag_udma.h` (the `waitedMask` kernel), hicann/ops-transformer 67a83540d75e
`all_gather_qbmm_mx_kernel.h` / `all_gather_mx_matmul_urma_impl.h` (slot ring: `slot % 11 + 1`, `isBias`)."""

import numpy as np
import pytest

from mc2emu.ops import all_gather_quant_matmul, gen_ag_st_inputs, golden_all_gather_quant_matmul
from mc2emu.ops.all_gather_quant_matmul_golden import ag_st_verify
from mc2emu.runtime import ConstraintError, HazardError
from mc2emu.runtime.hazards import DeadlockError, Hazard
from mc2emu.tiling.all_gather_quant_matmul_tiling import MAX_RANKS, make_ag_comm_tiling

TIMEOUT = 60.0
K, N = 128, 64   # small K and N: the rounds are what is tested
M16, M17 = 8192, 8193   # 16 whole tiles (commTurn 16); 16 tiles + a 1-row tail (commTurn 17)
# >= R at every world size, and baseM stays 256 at m 1037 (no block straddles two regions, as in the slot-ring tests)
BLOCK_DIM = 8


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    kw.setdefault("timeout", TIMEOUT)
    return all_gather_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


def golden(comm, inp, bias=None):
    return golden_all_gather_quant_matmul(comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"]), inp["x2"],
                                          inp["x2_scale"], bias=bias)


def skip_seed_past_its_ranks(comm):
    if comm.Get_size() > MAX_RANKS:
        pytest.skip(f"the seed kernel holds {MAX_RANKS} ranks (AG-3); the slot ring runs up to 16")


def assert_all_ranks(comm, ok, what):
    flags = comm.allgather(bool(ok))
    assert all(flags), f"{what}: failed on ranks {[r for r, f in enumerate(flags) if not f]}"


def test_the_shapes_have_16_and_17_rounds():
    assert make_ag_comm_tiling(M16, K).commTurn == 16 and make_ag_comm_tiling(M17, K).commTurn == 17


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("m", [M16, M17])
def test_in_order_waits_past_15_rounds_pass_the_golden(m):
    """The in-order kernel (5778144076) waits ids 1..commTurn in order: ids 16, 17 are truncated to 0, 1 (a
    FLAG_ID_TRUNCATED warning) and each Wait still consumes its own round's Set: no error hazard, C within the
    AG ST rule (formerly refused: AG-4 commTurn <= 15)."""
    comm = world()
    skip_seed_past_its_ranks(comm)
    inp = gen_ag_st_inputs(m, K, N, comm.Get_rank())
    c = run(inp, wait_order="in_order")
    ok, ulp_max, _ = ag_st_verify(c, golden(comm, inp))
    assert_all_ranks(comm, ok, f"m {m} in_order: max bf16 ULP distance {ulp_max}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("m, slot_num", [(M16, 0), (M16, 4), (M17, 4)])
def test_slot_ring_past_15_rounds_passes_the_golden(m, slot_num):
    """The URMA table's m 8192 with buffer_count 0 and 4, 8205 with 4 (here 8193: the same 16 tiles + a tail):
    flag ids are `slot % 11 + 1` (at most 11) whatever commTurn is."""
    comm = world()
    inp = gen_ag_st_inputs(m, K, N, comm.Get_rank())
    c = run(inp, protocol="slot_ring", slot_num=slot_num)
    ok, ulp_max, _ = ag_st_verify(c, golden(comm, inp))
    assert_all_ranks(comm, ok, f"m {m} slot_num {slot_num}: max bf16 ULP distance {ulp_max}")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("m, slot_num", [(1037, 1), (M17, 4)])
def test_slot_ring_adds_the_bias_once(m, slot_num):
    """67a83540d75e: `params.isBias = (tilingData_->isBias != 0)`, a (1, curNtile) fp32 slice per tile into the
    mmad (added once, on the first K step): C matches the golden with the bias and not the one without."""
    comm = world()
    inp = gen_ag_st_inputs(m, K, N, comm.Get_rank())
    bias = np.random.RandomState(7).uniform(-1024, 1024, N).astype(np.float32)   # C is ~6000: bf16 ULP 32
    c = run(inp, protocol="slot_ring", slot_num=slot_num, bias=bias, block_dim=max(BLOCK_DIM, comm.Get_size()))
    ok, ulp_max, _ = ag_st_verify(c, golden(comm, inp, bias))
    assert_all_ranks(comm, ok, f"bias m {m}: max bf16 ULP distance {ulp_max}")
    assert_all_ranks(comm, not ag_st_verify(c, golden(comm, inp))[0], "the bias changed nothing")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kwargs, rule", [
    ({"bias": np.zeros(N, np.float32)}, "bias"),                                            # seed: isBias false
    ({"protocol": "slot_ring", "bias": np.zeros((2, N), np.float32)}, "bias shape"),
])
def test_bias_refusals_name_the_source(kwargs, rule):
    comm = world()
    skip_seed_past_its_ranks(comm)
    inp = gen_ag_st_inputs(64, K, N, comm.Get_rank())
    with pytest.raises(ConstraintError) as info:
        run(inp, **kwargs)
    assert info.value.rule == rule
    if rule == "bias":
        assert "5778144076 all_gather_qbmm_mx_kernel.h" in str(info.value) and "isBias = false" in str(info.value)


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("m, place", [
    (M17, "round 16: flag 17 (the hardware's id 1, shared with round 0)"),
    (8000, "round 15: flag 16 (the hardware's id 0, shared with HEAD)"),
])
def test_the_mask_kernel_aliases_wrapped_ids_and_reads_tail_data_early(m, place):
    """The `waitedMask` kernel (f241800c4) waits each dependTileIdx once as its tiles need it. m 8193: with 17
    rounds the TAIL's id 17 is the hardware's id 1, and an AIC whose first wait on id 1 is its TAIL tile's
    consumes round 0's Set. m 8000 (15 tiles + a 320-row tail, 16 rounds): the TAIL's id 16 is id 0, and an AIC
    with no HEAD tile (HEAD has 30 of 256 rows at baseM 256) consumes HEAD's pre-set. Either way it reads TAIL
    rows before they are proven written. Reported, not refused: READ_BEFORE_WAIT names the rank, the AIC, the
    window range and the flag; the ranks without such an AIC run clean."""
    comm = world()
    skip_seed_past_its_ranks(comm)
    rank = comm.Get_rank()
    if m == 8000 and comm.Get_size() != 2:
        pytest.skip("R 2 only: AIC30 (tiles 30, 62) meets the TAIL (tiles 60-62) with no HEAD tile; at R 4 its "
                    "tiles 30, 62, 94, 126 miss the TAIL (120-124)")
    inp = gen_ag_st_inputs(m, K, N, rank)
    reps = []
    try:
        run(inp, wait_order="mask")
    except HazardError as exc:
        reps = exc.hazards
    assert {h.hazard for h in reps} <= {Hazard.READ_BEFORE_WAIT}, [str(h) for h in reps[:4]]
    for h in reps:
        assert h.rank == rank and h.core.startswith("AIC") and h.details["put_rank"] != rank
        assert f"rows of rank {h.details['put_rank']}, {place}" in h.message, h.message
    assert any(comm.allgather(bool(reps))), "no rank read early"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("protocol", ["seed", "slot_ring"])
def test_fewer_blocks_than_ranks_runs_as_the_device_and_names_the_unserved_peers(protocol):
    """block_dim R - 1 (the ST launcher launches usedCoreNum, unchecked against R): launched as given, no
    refusal. AIV block b serves peer b only, so peer R - 1 never receives this rank's rows, and the Init
    barrier (TeamBarrier, one job per rank) waits for the missing block's job: the launch hangs, the deadlock
    diagnosis carries PEER_NOT_SERVED naming the rule, the block count and the unserved peer."""
    comm = world()
    if protocol == "seed":
        skip_seed_past_its_ranks(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    inp = gen_ag_st_inputs(64, K, N, rank)
    with pytest.raises(DeadlockError) as info:
        run(inp, protocol=protocol, block_dim=size - 1, timeout=5.0)
    unserved = [h for h in info.value.hazards if h.hazard is Hazard.PEER_NOT_SERVED]
    assert len(unserved) == 1, [str(h) for h in info.value.hazards]
    h = unserved[0]
    assert h.rank == rank and h.core == "AIV0" and h.details["peers"] == [size - 1]
    assert f"block_dim {size - 1} < R {size}" in h.message and "GetBlockIdx() < rankSize_" in h.message


@pytest.mark.mpi(min_size=2)
def test_a_window_over_hccl_buffsize_is_refused_with_the_figures(monkeypatch):
    """The data window is HCCL's buffer (HcclGetHcclBuffer, HCCL_BUFFSIZE MB): a call whose window needs more
    is refused on every rank before any window exists, naming the inequality; the same call fits at 2 MB."""
    comm = world()
    R = comm.Get_size()
    inp = gen_ag_st_inputs(512, 1024, N, comm.Get_rank())    # seed window: R * 512 * (1024 + 32) bytes > 1 MB
    need = R * 512 * (1024 + 32)
    monkeypatch.setenv("HCCL_BUFFSIZE", "1")
    with pytest.raises(ConstraintError) as exc:
        run(inp, comm=comm)
    msg = str(exc.value)
    assert "HCCL_BUFFSIZE" in msg and f"needs {need} bytes > the communicator buffer of 1048576 bytes" in msg, msg
    assert f"HCCL_BUFFSIZE >= {-(-need // 2**20)} (MB)" in msg
    monkeypatch.setenv("HCCL_BUFFSIZE", str(-(-need // 2**20)))
    c = run(inp, comm=comm)
    assert ag_st_verify(c, golden(comm, inp))[0]
