"""all_to_all_quant_matmul at every world size: every valid impl x localMatmul x wait order against the
CANN golden (<= 1 bf16 ULP on ST data) and a float64 reference (signed data), bitwise reproducibility under
seeded timing perturbation, constraint refusals on every rank, and the source's own hazards."""

import numpy as np
import pytest

from mc2emu.numerics import bf16_ulp_distance, golden_mx_matmul
from mc2emu.ops import all_to_all_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_golden import (
    gathered_operand,
    gen_signed_inputs,
    gen_st_inputs,
    golden_a2a,
    golden_a2a_float64,
)
from mc2emu.runtime import ConstraintError, DeadlockError, HazardError, PerturbPolicy

TIMEOUT = 30.0
# A small shape with tails everywhere: oriM not a multiple of baseM (or of the head tile), N not of baseN.
ORI_M, KA, N = 150, 128, 200
VALID = [("udma", 0, "mask"), ("udma", 0, "in_order"), ("udma", 1, "mask"), ("udma", 1, "in_order"),
         ("udma", 2, "mask"), ("udma", 2, "in_order"), ("hcomm", 0, "in_order"), ("hcomm", 1, "in_order")]


def world():
    from mpi4py import MPI

    return MPI.COMM_WORLD


def run(inp, **kw):
    kw.setdefault("timeout", TIMEOUT)
    if "block_dim" in kw and kw.get("impl", "udma") == "udma":   # UDMA AIV block r serves peer r: >= R blocks
        kw["block_dim"] = max(kw["block_dim"], world().Get_size())
    return all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], **kw)


def gathered(comm, inp):
    return comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"])


def assert_all_ranks(comm, ok, what):
    flags = comm.allgather(bool(ok))
    assert all(flags), f"{what}: failed on ranks {[r for r, f in enumerate(flags) if not f]}"


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("impl, local_matmul, wait_order", VALID)
def test_valid_modes_match_the_cann_golden(impl, local_matmul, wait_order):
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, ORI_M, KA, N)
    c = run(inp, impl=impl, local_matmul=local_matmul, wait_order=wait_order, block_dim=8)
    x1s, x1ss = gathered(comm, inp)
    ulp = bf16_ulp_distance(c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
    # localMatmul 1 rounds C to bf16 after the LOCAL pass and again after each atomic add: <= 1 ULP.
    assert_all_ranks(comm, ulp <= 1, f"{impl} lm={local_matmul} {wait_order}: {ulp} ULP")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("elem, impl", [("e5m2", "udma"), ("e2m1", "udma"), ("e2m1", "hcomm")])
def test_other_element_formats(elem, impl):
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 96, 128, 160, elem=elem)
    c = run(inp, impl=impl, local_matmul=0, wait_order="in_order", block_dim=4)
    x1s, x1ss = gathered(comm, inp)
    ulp = bf16_ulp_distance(c, golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, elem))
    assert_all_ranks(comm, ulp <= 1, f"{elem}: {ulp} ULP")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("impl, local_matmul", [("udma", 0), ("udma", 2), ("udma", 1), ("hcomm", 1)])
def test_signed_data_against_float64(impl, local_matmul):
    """Bound (u = 2^-8, the bf16 unit roundoff: 8 significant bits; K = R * 192; S = sum|a*b| per element):
    float32 accumulation over K terms errs by <= K 2^-24 S (doubled for slack); the output rounding adds
    u |C|. localMatmul 1 rounds twice more before the final add: the LOCAL pass writes bf16(own term T)
    (<= u |T|), the REMOTE pass converts its float32 sum (~ C - T) to bf16 before the atomic add
    (<= u (|C| + |T|)). So |C - C64| <= u |C64| + 2 K 2^-24 S, and with localMatmul 1
    <= 2u (|C64| + |T|) + 2 K 2^-24 S. The test also proves the bound can fail: C = 0 would pass it on
    < 2 % of elements."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_signed_inputs(r, size, 64, 192, 96)
    c = run(inp, impl=impl, local_matmul=local_matmul, wait_order="in_order", block_dim=4).astype(np.float64)
    x1s, x1ss = gathered(comm, inp)
    ref = golden_a2a_float64(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3")
    k_total = size * 192
    x1abs = [np.abs(x.astype(np.float32)).astype(x.dtype) for x in x1s]
    absref = golden_a2a_float64(x1abs, x1ss, np.abs(inp["x2"].astype(np.float32)).astype(inp["x2"].dtype),
                                inp["x2_scale"], r, "e4m3")
    own = 0.0
    if local_matmul == 1:   # the own rank's term alone: every other rank's x1 zeroed
        only_own = [x if s == r else np.zeros_like(x) for s, x in enumerate(x1s)]
        own = np.abs(golden_a2a_float64(only_own, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3"))
    u = 2.0 ** -8
    rounding = 2 * u * (np.abs(ref) + own) if local_matmul == 1 else u * np.abs(ref)
    bound = rounding + 2 * k_total * 2.0 ** -24 * absref + 1e-30
    assert_all_ranks(comm, np.all(np.abs(c - ref) <= bound), f"{impl} lm={local_matmul}")
    zero_passes = float(np.mean(np.abs(ref) <= bound))
    assert_all_ranks(comm, zero_passes < 0.02, f"C = 0 would pass on {zero_passes:.1%} of elements")


@pytest.mark.mpi(min_size=2)
def test_bitwise_reproducible_under_seeded_perturbation():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, ORI_M, KA, N, seed=3)
    ref = run(inp, impl="udma", local_matmul=1, block_dim=6)
    for seed in (1, 2):
        out = run(inp, impl="udma", local_matmul=1, block_dim=6, perturb=PerturbPolicy(seed, max_delay_s=1e-3))
        assert_all_ranks(comm, np.array_equal(out.view(np.uint16), ref.view(np.uint16)), f"perturb seed {seed}")
    out = run(inp, impl="hcomm", local_matmul=1, wait_order="in_order", block_dim=6,
              perturb=PerturbPolicy(5, max_delay_s=1e-3))
    assert_all_ranks(comm, np.array_equal(out.view(np.uint16), ref.view(np.uint16)), "hcomm vs udma")


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("kwargs, shape, rule", [
    ({}, (128, 96, 64), "A2A-1 Ka % 64 == 0"),
    ({"head_tile_size": 16}, (16 * 17, 64, 64), "A2A-4 commTurn <= 16"),
    ({"impl": "udma", "bias": True}, (64, 64, 64), "bias (udma)"),
    ({"impl": "tcp"}, (64, 64, 64), "impl"),
    ({"local_matmul": 3}, (64, 64, 64), "local_matmul"),
])
def test_constraint_violations_are_refused_on_every_rank(kwargs, shape, rule):
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, *shape)
    if kwargs.get("bias") is True:
        kwargs = dict(kwargs, bias=np.zeros(shape[2], np.float32))
    with pytest.raises(ConstraintError) as info:
        run(inp, **kwargs)
    assert info.value.rule == rule


@pytest.mark.mpi(min_size=2)
def test_a_bad_input_on_one_rank_fails_every_rank():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 64, 64)
    if r == size - 1:
        inp["x1_scale"] = inp["x1_scale"][:, :0]
    with pytest.raises(ConstraintError, match="x1_scale"):
        run(inp)


@pytest.mark.mpi(min_size=2)
def test_every_peer_needs_an_aiv_block():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 64, 64)
    with pytest.raises(ConstraintError) as info:
        all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], block_dim=size - 1)
    assert info.value.rule.startswith("A2A-5")


@pytest.mark.mpi(min_size=2)
def test_hcomm_local_matmul_2_aicpu_waits_beyond_commit():
    """SPEC §6: the LOCAL pass runs the REMOTE branch with splitKNum 1; the REMOTE pass waits again: AICPU
    returns -1 and C = sum of the terms of ranks 0..R-2 (a plain write over pass 1)."""
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 128, 64)
    with pytest.raises(HazardError) as info:
        # One AIC: with several, block 0's Finalize<true> may reset the finish counters while another AIC
        # still has Waits to make, which then hangs (the modelled Finalize race), depending on timing.
        run(inp, impl="hcomm", local_matmul=2, hccl_server="aicpu", wait_order="in_order", block_dim=1)
    assert "HCCL_WAIT_BEYOND_COMMIT" in info.value.names()
    x1s, x1ss = gathered(comm, inp)
    a, sa = gathered_operand(x1s, x1ss, r, 64)
    keep, ka, pairs = size - 1, 128, 2   # the terms of ranks 0..R-2: the first Ka of K
    part = golden_mx_matmul(a[:, : keep * ka], sa[:, : keep * pairs], inp["x2"][:, : keep * ka],
                            inp["x2_scale"][:, : keep * pairs], "e4m3", "bfloat16", trans_b=True)
    ulp = bf16_ulp_distance(info.value.output, part)
    assert_all_ranks(comm, ulp <= 1, f"C = sum_(s <= R-2) term_s: {ulp} ULP")


@pytest.mark.mpi(min_size=2)
def test_hcomm_bias_is_added_twice_with_local_matmul():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 128, 64)
    x1s, x1ss = gathered(comm, inp)
    g = golden_a2a(x1s, x1ss, inp["x2"], inp["x2_scale"], r, "e4m3", out_dtype="float32")
    # a bias the size of half of C, varying per column: a missing, single, tripled or shifted bias is off
    # by >= |bias| ~ C/2, far beyond the bound below
    bias = (0.5 * g.mean(axis=0) * (1 + (np.arange(64) % 3) / 4)).astype(np.float32)
    with pytest.raises(HazardError) as info:
        run(inp, impl="hcomm", local_matmul=1, wait_order="in_order", bias=bias, block_dim=2)
    assert "BIAS_DOUBLE_ADD" in info.value.names()
    got = info.value.output.astype(np.float32)
    # Bound: ST data and bias are positive; float32 accumulation errs by <= K 2^-24 (K = R * 128 <= 1024:
    # 2^-14) relatively; LOCAL writes bf16(T + bias), REMOTE converts (C - T + bias) to bf16 before the atomic
    # add, the add rounds to bf16 again: three roundings (u = 2^-8 each) of positive parts of C + 2 bias,
    # <= 3 * 2^-8 < 2^-6 of it; a bias off by one copy is off by >= C/3.
    want = g + 2 * bias
    assert_all_ranks(comm, np.all(np.abs(got - want) <= 2.0 ** -6 * want), "C = A B + 2 bias")


@pytest.mark.mpi(min_size=2)
def test_hcomm_local_matmul_2_ccu_hangs_and_is_diagnosed():
    comm = world()
    r, size = comm.Get_rank(), comm.Get_size()
    inp = gen_st_inputs(r, size, 64, 128, 64)
    with pytest.raises(DeadlockError) as info:
        run(inp, impl="hcomm", local_matmul=2, hccl_server="ccu", wait_order="in_order", block_dim=2, timeout=2.0)
    assert "HCCL handle 0 repeat 1 (never committed)" in str(info.value)
    comm.Barrier()
