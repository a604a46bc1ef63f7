"""One calling convention for every operator: the same common keywords with the same defaults (those of
`CallOptions`, `comm` exactly on the collective ones), `return_stats` giving a frozen statistics value beside
the output, one enum parser (member or string; a bad value a ConstraintError naming the keyword and the allowed
values), and the one block_dim rule. Serial: the collective operators' keywords are checked through their
`validate` and, for refusals, a call on MPI.COMM_SELF (refused before any launch)."""

import dataclasses
import enum
import inspect

import ml_dtypes
import numpy as np
import pytest
from gmm_cases import split_m_case

import mc2emu.ops as ops
from mc2emu.apace.all_gather_qbmm_mx_kernel import AgKernelVariant
from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.apace.quant_matmul_reduce_scatter_rounds_impl import RsKernelVariant
from mc2emu.arch import ConstraintError, parse_enum
from mc2emu.arch.keywords import enum_strings
from mc2emu.blaze import QbmmMxRevision
from mc2emu.blaze.gemm.block.block_scheduler_gmm_aswt import TailSplitVariant
from mc2emu.blaze.gemm.kernel.weight_quant_matmul_kernel import WeightQuantMatmulMode
from mc2emu.comm.hccl_task import HcclServerType
from mc2emu.host import CallOptions, call_options
from mc2emu.numerics import ElemFormat, OutDtype
from mc2emu.ops import all_gather_quant_matmul_op as ag_op
from mc2emu.ops import all_to_all_quant_matmul_op as a2a_op
from mc2emu.ops import quant_matmul_reduce_scatter_op as qmrs_op
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs
from mc2emu.ops.grouped_matmul_mx_host import GmmGroupListType, GmmGroupType, GmmLaunchInfo
from mc2emu.ops.quant_batch_matmul_mx_host import QbmmLaunchInfo
from mc2emu.ops.weight_quant_matmul_host import WqmmLaunchInfo

COLLECTIVE = ("all_to_all_quant_matmul", "all_gather_quant_matmul", "quant_matmul_reduce_scatter")
LOCAL = ("quant_batch_matmul_mx", "grouped_matmul_mx", "weight_quant_matmul")
OPERATORS = COLLECTIVE + LOCAL
CALL_DEFAULTS = {f.name: f.default for f in dataclasses.fields(CallOptions)}
COMMON = ("check", "timeout", "perturb", "observers", "faults")
STATS = {"all_to_all_quant_matmul": a2a_op.A2ALaunchInfo, "all_gather_quant_matmul": ag_op.AgLaunchInfo,
         "quant_matmul_reduce_scatter": qmrs_op.QmrsLaunchInfo, "quant_batch_matmul_mx": QbmmLaunchInfo,
         "grouped_matmul_mx": GmmLaunchInfo, "weight_quant_matmul": WqmmLaunchInfo}
BF16 = ml_dtypes.bfloat16
TIMEOUT = 60.0


def _params(name):
    return inspect.signature(getattr(ops, name)).parameters


@pytest.mark.parametrize("name", OPERATORS)
def test_every_operator_takes_the_common_keywords_with_the_same_defaults(name):
    params = _params(name)
    want = COMMON + (("comm",) if name in COLLECTIVE else ())
    for key in want:
        assert key in params, f"{name} lacks {key}"
        assert params[key].kind is inspect.Parameter.KEYWORD_ONLY, (name, key)
        assert params[key].default == CALL_DEFAULTS[key], (name, key, params[key].default)
    assert ("comm" in params) == (name in COLLECTIVE), f"{name}: comm only where the call communicates"
    assert params["return_stats"].kind is inspect.Parameter.KEYWORD_ONLY
    assert params["return_stats"].default is False
    assert "stats" not in params, f"{name}: statistics come back through return_stats, not a dict argument"
    assert not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())


def test_the_common_keywords_are_the_same_everywhere():
    """Identical names, defaults and annotations across the six entries (one convention, not six)."""
    first = _params(OPERATORS[0])
    for name in OPERATORS[1:]:
        params = _params(name)
        for key in (*COMMON, "return_stats"):
            assert (params[key].default, params[key].annotation) == (first[key].default, first[key].annotation), \
                (name, key)


@pytest.mark.parametrize("name", OPERATORS)
def test_the_statistics_are_a_frozen_dataclass_with_the_launch(name):
    cls = STATS[name]
    assert dataclasses.is_dataclass(cls) and cls.__dataclass_params__.frozen
    assert {"block_dim", "wall_s"} <= {f.name for f in dataclasses.fields(cls)}


def test_call_options_is_built_once_and_refuses_bad_common_options():
    opts = call_options(check=False, timeout=2.5, observers=[print])
    assert opts == CallOptions(False, 2.5, None, (print,), None, None)
    with pytest.raises(dataclasses.FrozenInstanceError):
        opts.check = True   # type: ignore[misc]
    for bad in (0, -1.0, "5", True):
        with pytest.raises(ConstraintError) as info:
            call_options(timeout=bad)
        assert info.value.rule == "timeout"
    with pytest.raises(ConstraintError) as info:
        call_options(observers=[42])
    assert info.value.rule == "observers"


# -- the one enum parser --------------------------------------------------------------------------------------
class _Color(enum.Enum):
    DARK_RED = "dark_red"
    BLUE = "blue"


def test_parse_enum_takes_the_member_or_its_string_and_names_keyword_and_values_otherwise():
    assert parse_enum(_Color, _Color.BLUE, "color") is _Color.BLUE
    assert parse_enum(_Color, " Dark-Red ", "color") is _Color.DARK_RED
    assert parse_enum(_Color, "DARK_RED", "color") is _Color.DARK_RED
    for bad in ("green", 3, None, True, OutDtype.BF16):
        with pytest.raises(ConstraintError) as info:
            parse_enum(_Color, bad, "color")
        assert info.value.rule == "color"
        assert str(info.value) == f"color: color={bad!r} is not one of ['dark_red', 'blue']"
    errs: list = []
    assert parse_enum(_Color, "green", "color", errs) is None
    assert errs == [("color", "color='green' is not one of ['dark_red', 'blue']")]
    assert parse_enum(OutDtype, np.float16, "out_dtype") is OutDtype.FP16
    assert parse_enum(OutDtype, BF16, "out_dtype") is OutDtype.BF16
    assert parse_enum(ElemFormat, "float8_e4m3fn", "x1_format") is ElemFormat.E4M3


# Every enum keyword of every operator: (operator, keyword, enum, a member, its string).
ENUM_KEYWORDS = [
    ("all_to_all_quant_matmul", "impl", a2a_op.Impl, a2a_op.Impl.HCOMM, "hcomm"),
    ("all_to_all_quant_matmul", "wait_order", WaitOrder, WaitOrder.IN_ORDER, "in_order"),
    ("all_to_all_quant_matmul", "hccl_server", HcclServerType, HcclServerType.AICPU, "aicpu"),
    ("all_to_all_quant_matmul", "launch", a2a_op.LaunchMode, a2a_op.LaunchMode.SOURCE, "source"),
    ("all_to_all_quant_matmul", "out_dtype", OutDtype, OutDtype.FP16, "float16"),
    ("all_gather_quant_matmul", "protocol", ag_op.AgProtocol, ag_op.AgProtocol.SLOT_RING, "slot_ring"),
    ("all_gather_quant_matmul", "wait_order", WaitOrder, WaitOrder.IN_ORDER, "in_order"),
    ("all_gather_quant_matmul", "kernel_variant", AgKernelVariant, AgKernelVariant.SKIP_FLAG0_WAIT,
     "skip_flag0_wait"),
    ("all_gather_quant_matmul", "out_dtype", OutDtype, OutDtype.FP32, "float32"),
    ("quant_matmul_reduce_scatter", "impl", qmrs_op.QmrsImpl, qmrs_op.QmrsImpl.PER_BLOCK, "per_block"),
    ("quant_matmul_reduce_scatter", "split", qmrs_op.QmrsSplit, qmrs_op.QmrsSplit.K, "k"),
    ("quant_matmul_reduce_scatter", "kernel_variant", RsKernelVariant, RsKernelVariant.TEMPLATED_WAIT,
     "templated_wait"),
    ("quant_matmul_reduce_scatter", "out_dtype", OutDtype, OutDtype.BF16, "bfloat16"),
    ("quant_batch_matmul_mx", "out_dtype", OutDtype, OutDtype.FP32, "float32"),
    ("quant_batch_matmul_mx", "revision", QbmmMxRevision, QbmmMxRevision.CC21C0D6, "cc21c0d6"),
    ("quant_batch_matmul_mx", "x1_format", ElemFormat, ElemFormat.E4M3, "e4m3"),
    ("grouped_matmul_mx", "group_list_type", GmmGroupListType, GmmGroupListType.COUNT, "count"),
    ("grouped_matmul_mx", "group_type", GmmGroupType, GmmGroupType.SPLIT_M, "split_m"),
    ("grouped_matmul_mx", "variant", TailSplitVariant, TailSplitVariant.BLAZE, "blaze"),
    ("grouped_matmul_mx", "out_dtype", OutDtype, OutDtype.FP32, "float32"),
    ("grouped_matmul_mx", "weight_format", ElemFormat, ElemFormat.E4M3, "e4m3"),
    ("weight_quant_matmul", "mode", WeightQuantMatmulMode, WeightQuantMatmulMode.DEQUANT_ONLY, "dequant_only"),
    ("weight_quant_matmul", "out_dtype", OutDtype, OutDtype.FP32, "float32"),
]
IDS = [f"{op}-{kw}" for op, kw, *_ in ENUM_KEYWORDS]


def test_every_enum_keyword_of_every_operator_is_listed():
    """The table above covers each operator (so a new enum keyword is not missed silently)."""
    assert {op for op, *_ in ENUM_KEYWORDS} == set(OPERATORS)
    for op, kw, cls, member, text in ENUM_KEYWORDS:
        assert kw in _params(op), (op, kw)
        assert isinstance(member, cls) and parse_enum(cls, text, kw) is member


def _a2a_inputs():
    return gen_st_inputs(0, 1, 16, 64, 16, seed=1)


def _ag_inputs():
    return ops.gen_ag_st_inputs(256, 128, 64, 0)


def _qmrs_inputs():
    return ops.gen_qmrs_st_inputs(32, 128, 48, 0)


COLLECTIVE_INPUTS = {"all_to_all_quant_matmul": (_a2a_inputs, a2a_op.validate),
                     "all_gather_quant_matmul": (_ag_inputs, ag_op.validate),
                     "quant_matmul_reduce_scatter": (_qmrs_inputs, qmrs_op.validate)}
VALIDATE_DEFAULTS = {
    "all_to_all_quant_matmul": dict(impl="udma", local_matmul=0, wait_order="mask", hccl_server="ccu", bias=None,
                                    out_dtype="bfloat16"),
    "all_gather_quant_matmul": dict(wait_order=None, protocol="seed", slot_num=0, bias=None, out_dtype="bfloat16",
                                    kernel_variant="source"),
    "quant_matmul_reduce_scatter": dict(bias=None, split="m", impl="rounds", head_m_size=None, out_dtype="bfloat16",
                                        kernel_variant="source"),
}
# What the validated problem calls the keyword, where it differs.
PROBLEM_FIELD = {"impl": "impl", "wait_order": "wait_order", "hccl_server": "hccl_server", "launch": "launch",
                 "out_dtype": "out", "protocol": "protocol", "kernel_variant": "variant", "split": "split"}


def _collective_kwargs(op, kw, value):
    kwargs = {**VALIDATE_DEFAULTS[op], kw: value}
    if op == "all_gather_quant_matmul" and kw == "protocol":
        kwargs["wait_order"] = "in_order"
    if op == "quant_matmul_reduce_scatter" and kw == "impl":
        kwargs["head_m_size"] = None
    return kwargs


@pytest.mark.parametrize(("op", "kw", "cls", "member", "text"),
                         [e for e in ENUM_KEYWORDS if e[0] in COLLECTIVE],
                         ids=[i for i, e in zip(IDS, ENUM_KEYWORDS, strict=True) if e[0] in COLLECTIVE])
def test_collective_enum_keywords_take_member_or_string(op, kw, cls, member, text):
    make, validate = COLLECTIVE_INPUTS[op]
    inp = make()
    args = (inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"])
    got = []
    for value in (member, text, text.upper()):
        problem, errs = validate(*args, rank=0, rank_size=1, **_collective_kwargs(op, kw, value))
        assert not errs, errs
        got.append(getattr(problem, PROBLEM_FIELD[kw]))
    assert got == [member] * 3


@pytest.mark.parametrize(("op", "kw", "cls", "member", "text"), ENUM_KEYWORDS, ids=IDS)
def test_a_bad_enum_value_is_refused_naming_the_keyword_and_the_values(op, kw, cls, member, text):
    if op in COLLECTIVE:
        from mpi4py import MPI

        inp = COLLECTIVE_INPUTS[op][0]()
        args, extra = (inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"]), {"comm": MPI.COMM_SELF}
    else:
        args, extra = LOCAL_CALLS[op](), {}
    allowed = enum_strings(cls)
    with pytest.raises(ConstraintError) as info:
        getattr(ops, op)(*args, **{kw: "no_such_value"}, timeout=TIMEOUT, **extra)
    assert info.value.rule == kw
    assert f"{kw}='no_such_value' is not one of {allowed}" in str(info.value)


# -- the serial operators: one small call each ----------------------------------------------------------------
def _qbmm_args():
    rng = np.random.default_rng(3)
    x1 = rng.uniform(1, 4, (16, 64)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    x2 = rng.uniform(1, 4, (64, 32)).astype(np.float32).astype(ml_dtypes.float8_e4m3fn)
    s1 = np.full((16, 1, 2), 127, np.uint8)
    s2 = np.full((1, 32, 2), 127, np.uint8)
    return x1, s1, x2, s2


def _gmm_args():
    return split_m_case([10, 20], 64, 128).args()


def _wqmm_args():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((16, 64)).astype(BF16)
    w = rng.integers(-128, 128, (64, 32)).astype(np.int8)
    s = (rng.random(32) * 0.02 + 0.0025).astype(BF16)
    return x, w, s


LOCAL_CALLS = {"quant_batch_matmul_mx": _qbmm_args, "grouped_matmul_mx": _gmm_args,
               "weight_quant_matmul": _wqmm_args}


@pytest.mark.parametrize(("op", "kw", "cls", "member", "text"),
                         [e for e in ENUM_KEYWORDS if e[0] in LOCAL],
                         ids=[i for i, e in zip(IDS, ENUM_KEYWORDS, strict=True) if e[0] in LOCAL])
def test_local_enum_keywords_take_member_or_string_with_the_same_output(op, kw, cls, member, text):
    args = LOCAL_CALLS[op]()
    fn = getattr(ops, op)
    by_member = fn(*args, **{kw: member}, timeout=TIMEOUT)
    by_string = fn(*args, **{kw: text}, timeout=TIMEOUT)
    assert by_member.dtype == by_string.dtype
    np.testing.assert_array_equal(by_member.view(np.uint8), by_string.view(np.uint8))


@pytest.mark.parametrize("op", LOCAL)
def test_return_stats_gives_the_frozen_statistics_beside_the_same_output(op):
    args = LOCAL_CALLS[op]()
    fn = getattr(ops, op)
    plain = fn(*args, timeout=TIMEOUT)
    out, stats = fn(*args, timeout=TIMEOUT, return_stats=True)
    np.testing.assert_array_equal(plain.view(np.uint8), out.view(np.uint8))
    assert isinstance(stats, STATS[op])
    assert 1 <= stats.block_dim <= 32 and stats.wall_s > 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        stats.block_dim = 0


@pytest.mark.parametrize("op", LOCAL)
@pytest.mark.parametrize("block_dim", [0, 33, 2.5])
def test_the_one_block_dim_rule_on_every_serial_operator(op, block_dim):
    with pytest.raises(ConstraintError) as info:
        getattr(ops, op)(*LOCAL_CALLS[op](), block_dim=block_dim, timeout=TIMEOUT)
    assert info.value.rule == "block_dim"
    assert f"block_dim must be None or an integer in [1, 32] (AI cores of DAV_3510), got {block_dim!r}" \
        in str(info.value)


def test_the_dtype_pair_rule_has_one_home():
    """QBMM's can_implement and A2A's validation state the FP8 / FP4 pair rule through one function."""
    from mc2emu.tiling.quant_matmul_tiling_swat import QuantMatmulArgs, can_implement, dtype_pair_violations

    (reason,) = dtype_pair_violations(ElemFormat.E2M1, ElemFormat.E4M3)
    assert dtype_pair_violations(ElemFormat.E5M2, ElemFormat.E4M3) == []
    assert can_implement(QuantMatmulArgs(16, 32, 64, 1, False, False, ElemFormat.E2M1, ElemFormat.E4M3)) == [reason]
    inp = _a2a_inputs()
    x1 = np.zeros(inp["x1"].shape, ml_dtypes.float4_e2m1fn)
    _, errs = a2a_op.validate(x1, inp["x1_scale"], inp["x2"], inp["x2_scale"], rank=0, rank_size=1,
                              **VALIDATE_DEFAULTS["all_to_all_quant_matmul"])
    assert ("x1/x2 dtypes", reason) in errs
