"""Recorded outputs of the operators: a fixed set of cases whose output bytes are pinned by sha256 digest in
`recorded_outputs.json` (QBMM / A2A recorded before the issue-12 refactor; all_gather_quant_matmul,
quant_matmul_reduce_scatter, grouped_matmul_mx and weight_quant_matmul added after they landed, each output
checked against its operator's golden under that operator's own rule before it was recorded).

The inputs are made here from raw codes (numpy + ml_dtypes only, no package helper), so a change to an
input generator of the package cannot move the pins. Signed element codes and varied E8M0 scales
exercise signs, cancellation and the K order of every accumulation: any change to the order of mmads,
waits, atomic adds or roundings shows up as a different digest.

Record (overwrites the entries of the named groups; default: every group of that kind; serial groups are
world-size independent, collective ones are recorded per world size):

    python tests/ops/recorded_cases.py [qbmm] [gmm] [wqmm]               # serial operators
    mpirun -n R python tests/ops/recorded_cases.py [a2a] [ag] [qmrs]     # collective, at R = 2, 4, 8

The recorder refuses to record an output that fails its golden (`check_*` below; QBMM / A2A excepted: their
pins are the pre-refactor bytes).

The bytes depend on the host BLAS (each MMAD step is a float32 BLAS product), so the file holds one set of
pins per BLAS fingerprint (`blas_fingerprint`: the bits of float32 products at the step shapes). A host whose
fingerprint has no set fails the pinned tests with that fingerprint named: check the goldens there (the
operators' test files), then record its set with the commands above, from the commit the pins must hold for.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

DIGESTS = Path(__file__).with_name("recorded_outputs.json")
TIMEOUT = 60.0
# E8M0 exponents around 2^0 (bias 127): varied magnitudes without overflow in bf16.
SCALE_LO, SCALE_HI = 121, 133
ELEM = {"e4m3": ml_dtypes.float8_e4m3fn, "e5m2": ml_dtypes.float8_e5m2, "e2m1": ml_dtypes.float4_e2m1fn}


def _codes(rng: np.random.Generator, shape: tuple[int, ...], elem: str) -> np.ndarray:
    """Random element codes of `elem`, NaN / Inf codes excluded, as the ml_dtypes array."""
    if elem == "e2m1":
        return rng.integers(0, 16, size=shape, dtype=np.uint8).view(ELEM[elem])
    codes = rng.integers(0, 256, size=shape, dtype=np.uint8)
    vals = codes.view(ELEM[elem]).astype(np.float32)
    codes[~np.isfinite(vals)] = 0x38   # 1.0 (e4m3) / 0.5 (e5m2): any finite code
    return codes.view(ELEM[elem])


def _scales(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(SCALE_LO, SCALE_HI + 1, size=shape, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)


def digest(out: np.ndarray) -> str:
    a = np.ascontiguousarray(out)
    h = hashlib.sha256(f"{a.dtype.name}{a.shape}".encode())
    h.update(a.view(np.uint8).tobytes())
    return h.hexdigest()


# -- all_to_all_quant_matmul ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class A2ACase:
    name: str
    ori_m: int
    ka: int
    n: int
    kwargs: dict[str, Any] = field(default_factory=dict)
    elem: str = "e4m3"
    bias: bool = False
    # Error-severity hazards the call raises by design (its HazardError.output is pinned instead).
    hazards: frozenset[str] = frozenset()

    def inputs(self, rank: int, size: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([12, rank, size, self.ori_m, self.ka, self.n])
        pairs = -(-self.ka // 64)
        out = {"x1": _codes(rng, (size * self.ori_m, self.ka), self.elem),
               "x1_scale": _scales(rng, (size * self.ori_m, pairs, 2)),
               "x2": _codes(rng, (self.n, size * self.ka), self.elem),
               "x2_scale": _scales(rng, (self.n, size * pairs, 2))}
        if self.bias:
            out["bias"] = rng.uniform(-4, 4, self.n).astype(np.float32)
        return out


# oriM 72 with head tiles of 16 rows: 5 communication tiles, the last one a tail of 8 rows; N 80 and
# oriM 72 leave tails against the base tiles.
A2A_CASES: tuple[A2ACase, ...] = (
    *(A2ACase(f"udma-lm{lm}-{wo}-5tiles", 72, 128, 80, {"impl": "udma", "local_matmul": lm, "wait_order": wo,
                                                           "head_tile_size": 16})
      for lm in (0, 1, 2) for wo in ("mask", "in_order")),
    A2ACase("udma-lm0-mask-st-rule", 72, 128, 80, {"impl": "udma", "local_matmul": 0, "wait_order": "mask"}),
    A2ACase("udma-lm1-in_order-2tiles-bd8", 40, 256, 48, {"impl": "udma", "local_matmul": 1,
                                                         "wait_order": "in_order", "head_tile_size": 32,
                                                         "block_dim": 8}),
    A2ACase("udma-lm2-mask-e5m2", 48, 128, 64, {"impl": "udma", "local_matmul": 2, "wait_order": "mask",
                                               "head_tile_size": 16}, elem="e5m2"),
    A2ACase("udma-lm0-in_order-e2m1", 48, 128, 64, {"impl": "udma", "local_matmul": 0, "wait_order": "in_order",
                                                   "head_tile_size": 16}, elem="e2m1"),
    *(A2ACase(f"hcomm-lm{lm}-in_order-5tiles", 72, 128, 80, {"impl": "hcomm", "local_matmul": lm,
                                                             "wait_order": "in_order", "head_tile_size": 16})
      for lm in (0, 1)),
    A2ACase("hcomm-lm0-mask-st-rule", 72, 128, 80, {"impl": "hcomm", "local_matmul": 0, "wait_order": "mask"}),
    A2ACase("hcomm-lm0-in_order-bias-bd2", 72, 128, 80, {"impl": "hcomm", "local_matmul": 0,
                                                        "wait_order": "in_order", "head_tile_size": 32,
                                                        "block_dim": 2}, bias=True),
    A2ACase("hcomm-lm1-in_order-bias-double-add", 48, 128, 64, {"impl": "hcomm", "local_matmul": 1,
                                                                "wait_order": "in_order"},
            bias=True, hazards=frozenset({"BIAS_DOUBLE_ADD"})),
    A2ACase("hcomm-lm0-in_order-aicpu-bd1", 48, 128, 64, {"impl": "hcomm", "local_matmul": 0,
                                                         "wait_order": "in_order", "hccl_server": "aicpu",
                                                         "head_tile_size": 16, "block_dim": 1}),
    A2ACase("hcomm-lm0-in_order-e2m1", 48, 128, 64, {"impl": "hcomm", "local_matmul": 0, "wait_order": "in_order",
                                                    "head_tile_size": 16}, elem="e2m1"),
)


def run_a2a_case(case: A2ACase, comm: Any) -> np.ndarray:
    from mc2emu.ops import all_to_all_quant_matmul
    from mc2emu.runtime import HazardError

    inp = case.inputs(comm.Get_rank(), comm.Get_size())
    try:
        out = all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], bias=inp.get("bias"),
                                      comm=comm, timeout=TIMEOUT, **case.kwargs)
    except HazardError as exc:
        if not case.hazards or exc.names() != set(case.hazards):
            raise
        return np.asarray(exc.output)
    assert not case.hazards, f"{case.name}: expected {sorted(case.hazards)}, the call raised nothing"
    return out


# -- quant_batch_matmul_mx --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class QbmmCase:
    name: str
    m: int
    k: int
    n: int
    trans_a: bool = False
    trans_b: bool = True
    fmt: str = "e4m3"
    batch_a: tuple[int, ...] = ()
    batch_b: tuple[int, ...] = ()
    bias: str | None = None           # bias dtype
    kwargs: dict[str, Any] = field(default_factory=dict)
    c_init: bool = False
    hazards: frozenset[str] = frozenset()

    def inputs(self) -> dict[str, Any]:
        rng = np.random.default_rng([4, self.m, self.k, self.n, len(self.batch_a), len(self.batch_b)])
        pairs = -(-self.k // 64)
        elem = "e2m1" if self.fmt == "e1m2" else self.fmt
        a_shape = (*self.batch_a, self.k, self.m) if self.trans_a else (*self.batch_a, self.m, self.k)
        b_shape = (*self.batch_b, self.n, self.k) if self.trans_b else (*self.batch_b, self.k, self.n)
        x1, x2 = _codes(rng, a_shape, elem), _codes(rng, b_shape, elem)
        out: dict[str, Any] = {
            "x1": x1, "x2": x2,
            "x1_scale": _scales(rng, (*self.batch_a, pairs, self.m, 2) if self.trans_a
                                else (*self.batch_a, self.m, pairs, 2)),
            "x2_scale": _scales(rng, (*self.batch_b, self.n, pairs, 2) if self.trans_b
                                else (*self.batch_b, pairs, self.n, 2)),
        }
        if self.fmt == "e1m2":   # E1M2 goes as uint8 codes with the format named
            out["x1"], out["x2"] = x1.view(np.uint8), x2.view(np.uint8)
            out["x1_format"] = out["x2_format"] = "e1m2"
        if self.bias is not None:
            out["bias"] = rng.uniform(-8, 8, self.n).astype(self.bias)
        if self.c_init:
            c_shape = (*np.broadcast_shapes(self.batch_a, self.batch_b), self.m, self.n)
            out["c_init"] = rng.uniform(-2, 2, c_shape).astype(self.kwargs.get("out_dtype", ml_dtypes.bfloat16))
        return out


QBMM_CASES: tuple[QbmmCase, ...] = (
    QbmmCase("nt-tails", 200, 384, 330),
    QbmmCase("nt-bd3", 200, 384, 330, kwargs={"block_dim": 3}),
    QbmmCase("nn", 96, 256, 144, trans_b=False),
    QbmmCase("tt-k70", 96, 70, 130, trans_a=True),
    QbmmCase("tn", 64, 192, 80, trans_a=True, trans_b=False),
    QbmmCase("long-k", 37, 3584, 301),
    QbmmCase("bias-f32", 33, 192, 48, bias="float32"),
    QbmmCase("bias-bf16-out-f16", 33, 192, 48, bias="bfloat16", kwargs={"out_dtype": "float16"}),
    QbmmCase("out-f32", 64, 256, 96, kwargs={"out_dtype": "float32"}),
    QbmmCase("e5m2", 40, 256, 64, fmt="e5m2"),
    QbmmCase("e2m1", 40, 256, 64, fmt="e2m1"),
    QbmmCase("e1m2", 40, 256, 64, fmt="e1m2"),
    # QBMM's SetAtomicAdd<float> adds in float: the atomic cases write a float32 C (over bf16: ATOMIC_DTYPE_MISMATCH)
    QbmmCase("atomic-c-init-f32", 64, 256, 96, kwargs={"atomic": True, "out_dtype": "float32"}, c_init=True),
    QbmmCase("batch2-fixed-rev", 48, 128, 64, batch_a=(2,), kwargs={"revision": "cc21c0d6"}),
    QbmmCase("batch-broadcast-fixed-rev", 32, 128, 48, batch_a=(2, 1), batch_b=(1, 3),
             kwargs={"revision": "cc21c0d6"}),
    QbmmCase("batch2-default-rev-check-off", 48, 128, 64, batch_a=(2,), kwargs={"check": False}),
    QbmmCase("batch2-atomic-default-rev-f32", 48, 128, 64, batch_a=(2,),
             kwargs={"atomic": True, "out_dtype": "float32"},
             hazards=frozenset({"ATOMIC_LEFT_SET", "SCALE_BATCH_OFFSET_MISSING"})),
)


def run_qbmm_case(case: QbmmCase) -> np.ndarray:
    from mc2emu.blaze import QbmmMxRevision
    from mc2emu.ops import quant_batch_matmul_mx
    from mc2emu.runtime import HazardError

    inp = case.inputs()
    kw = dict(case.kwargs)
    if "revision" in kw:
        kw["revision"] = QbmmMxRevision(kw["revision"])
    try:
        out = quant_batch_matmul_mx(inp.pop("x1"), inp.pop("x1_scale"), inp.pop("x2"), inp.pop("x2_scale"),
                                    trans_a=case.trans_a, trans_b=case.trans_b, timeout=TIMEOUT, **inp, **kw)
    except HazardError as exc:
        if not case.hazards or exc.names() != set(case.hazards):
            raise
        return np.asarray(exc.output)
    assert not case.hazards, f"{case.name}: expected {sorted(case.hazards)}, the call raised nothing"
    return out


# -- shared by the four operators added after issue 12 ------------------------------------------------------
# E4M3 codes of the integers -8 .. 8 and E8M0 scales 2^-2 .. 2^2: every product and every FP32 sum of the
# collective cases is exact, so the goldens (one FP32 matmul) are bit-exact whatever the K order, while the
# bf16 roundings of the partials and the FP32 order over ranks (QMRS) still show in the digest.
_E4M3_ALL = np.arange(256, dtype=np.uint8).view(ml_dtypes.float8_e4m3fn).astype(np.float32)
INT_E4M3_CODES = np.array([c for c in range(256) if np.isfinite(_E4M3_ALL[c]) and abs(_E4M3_ALL[c]) <= 8
                           and _E4M3_ALL[c] == np.round(_E4M3_ALL[c])], dtype=np.uint8)
INT_SCALE_LO, INT_SCALE_HI = 125, 129


def _int_codes(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.choice(INT_E4M3_CODES, size=shape).view(ml_dtypes.float8_e4m3fn)


def _int_scales(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.integers(INT_SCALE_LO, INT_SCALE_HI + 1, size=shape, dtype=np.uint8).view(ml_dtypes.float8_e8m0fnu)


def _bf16_ulp(a: np.ndarray, b: np.ndarray) -> int:
    """Max ULP distance (bf16 / fp16) between two same-dtype arrays: `mc2emu.numerics.compare.ulp_distance`
    (+-0 0 apart, sign crossings count every value between, NaN facing a number beyond any finite distance)."""
    from mc2emu.numerics.compare import ulp_distance

    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, b.dtype, a.shape, b.shape)
    return ulp_distance(a, b)


def _raise_or_output(run: Any, hazards: frozenset[str], name: str) -> np.ndarray:
    from mc2emu.runtime import HazardError

    try:
        out = run()
    except HazardError as exc:
        if not hazards or exc.names() != set(hazards):
            raise
        return np.asarray(exc.output)
    assert not hazards, f"{name}: expected {sorted(hazards)}, the call raised nothing"
    return np.asarray(out)


# -- all_gather_quant_matmul ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class AgCase:
    """block_dim = R (the least that serves every peer: below it PEER_NOT_SERVED): ceil(R * m / 256) *
    ceil(n / 256) >= R keeps baseM 256, which divides the 512-row communication tiles, at every world size (no
    block straddles two regions)."""
    name: str
    m: int
    k: int
    n: int
    wait_order: str
    slot_num: int | None = None   # None: the seed protocol; else protocol "slot_ring" with these slots

    def inputs(self, rank: int, size: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([15, rank, size, self.m, self.k, self.n])
        pairs = -(-self.k // 64)
        return {"x1": _int_codes(rng, (self.m, self.k)), "x1_scale": _int_scales(rng, (self.m, pairs, 2)),
                "x2": _int_codes(rng, (self.n, self.k)), "x2_scale": _int_scales(rng, (self.n, pairs, 2))}


AG_CASES: tuple[AgCase, ...] = (
    AgCase("in_order-2tiles", 1024, 128, 64, "in_order"),     # two whole 512-row tiles per rank
    AgCase("mask-1tile-k256", 512, 256, 48, "mask"),          # one whole tile, two scale pairs
    AgCase("mask-tile-tail13", 525, 128, 64, "mask"),         # one tile + a 13-row tail (padded to 16)
    # the slot ring with one slot: the tail round reuses slot 0 (same inputs as the seed case above, so the
    # same bytes are pinned: the two protocols agree bit for bit)
    AgCase("slot_ring1-tile-tail13", 525, 128, 64, "in_order", slot_num=1),
)


def run_ag_case(case: AgCase, comm: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    from mc2emu.ops import all_gather_quant_matmul

    inp = case.inputs(comm.Get_rank(), comm.Get_size())
    proto = {} if case.slot_num is None else {"protocol": "slot_ring", "slot_num": case.slot_num}
    out = all_gather_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], comm=comm, timeout=TIMEOUT,
                                  wait_order=case.wait_order, block_dim=comm.Get_size(), **proto)
    return out, inp


def check_ag_case(out: np.ndarray, inp: dict[str, np.ndarray], comm: Any) -> str | None:
    """AG ST verify rule: bit-exact or within 1 bf16 ULP of the golden (here exact inputs: 0 expected)."""
    from mc2emu.ops import golden_all_gather_quant_matmul

    g = golden_all_gather_quant_matmul(comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"]), inp["x2"],
                                       inp["x2_scale"])
    ulp = _bf16_ulp(out, g)
    return None if ulp <= 1 else f"{ulp} ULP from the golden"


# -- quant_matmul_reduce_scatter ------------------------------------------------------------------------------
@dataclass(frozen=True)
class QmrsCase:
    """`seg` rows per rank segment (M = R * seg); rounds run on R + 2 cores, per_block on R // 2 + 1."""
    name: str
    seg: int
    k: int
    n: int
    kwargs: dict[str, Any] = field(default_factory=dict)
    hazards: frozenset[str] = frozenset()

    def inputs(self, rank: int, size: int) -> dict[str, np.ndarray]:
        rng = np.random.default_rng([18, rank, size, self.seg, self.k, self.n])
        pairs = -(-self.k // 64)
        m = size * self.seg
        return {"x1": _int_codes(rng, (m, self.k)), "x1_scale": _int_scales(rng, (m, pairs, 2)),
                "x2": _int_codes(rng, (self.n, self.k)), "x2_scale": _int_scales(rng, (self.n, pairs, 2))}

    def block_dim(self, size: int) -> int:
        return size // 2 + 1 if self.kwargs.get("impl") == "per_block" else size + 2


QMRS_CASES: tuple[QmrsCase, ...] = (
    QmrsCase("rounds-T1", 32, 128, 48),
    # a 32-row round + a 16-row tail; N 40 is past the design spec's N % 16 (RS-12): run with ragged_n
    QmrsCase("rounds-T2-tail-ragged-n", 48, 128, 40, {"head_m_size": 32, "ragged_n": True}),
    QmrsCase("rounds-k-split", 16, 128, 48, {"split": "k"}),
    # the shipped kernel's single-batch path: every AIC that ran a block keeps one flag-9 round unconsumed
    QmrsCase("per_block-source", 16, 128, 300, {"impl": "per_block"}, hazards=frozenset({"UNCONSUMED_FLAG"})),
)


def run_qmrs_case(case: QmrsCase, comm: Any) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    from mc2emu.ops import quant_matmul_reduce_scatter

    inp = case.inputs(comm.Get_rank(), comm.Get_size())
    out = _raise_or_output(lambda: quant_matmul_reduce_scatter(
        inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], comm=comm, timeout=TIMEOUT,
        block_dim=case.block_dim(comm.Get_size()), **case.kwargs), case.hazards, case.name)
    return out, inp


def check_qmrs_case(out: np.ndarray, inp: dict[str, np.ndarray], comm: Any) -> str | None:
    """Bit for bit the golden (bf16 partials summed in FP32 over ranks 0, 1, ..., R - 1); both splits."""
    from mc2emu.ops.quant_matmul_reduce_scatter_golden import golden_quant_matmul_reduce_scatter

    al = {key: comm.allgather(v) for key, v in inp.items()}
    g = golden_quant_matmul_reduce_scatter(al["x1"], al["x1_scale"], al["x2"], al["x2_scale"], comm.Get_rank())
    from mc2emu.numerics.compare import bit_exact

    return None if bit_exact(out, g) else f"{_bf16_ulp(out, g)} ULP from the golden (bit-exact rule)"


# -- grouped_matmul_mx ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class GmmCase:
    """split_m: `sizes` are rows per group (or (group, rows) when sparse), weight (g, k, n) / (g, n, k);
    split_k: `sizes` are the groups' K extents, x (K, M), scales (K / 64 + g, ., 2)."""
    name: str
    sizes: tuple[Any, ...]
    k: int
    n: int
    m: int | None = None
    groups: int | None = None
    group_type: str = "split_m"
    group_list_type: str = "count"
    trans_b: bool = False
    fp4: bool = False
    bias: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> dict[str, Any]:
        rng = np.random.default_rng([16, self.k, self.n, len(self.sizes), self.trans_b, self.fp4])
        elem = "e2m1" if self.fp4 else "e4m3"
        if self.group_type == "split_k":
            k, g = sum(self.sizes), len(self.sizes)
            m = self.m or 0
            rows = k // 64 + g
            x, w = _codes(rng, (k, m), elem), _codes(rng, (k, self.n), elem)
            sx, sw = _scales(rng, (rows, m, 2)), _scales(rng, (rows, self.n, 2))
            ext = list(self.sizes)
        else:
            ext = [s for _g, s in self.sizes] if self.group_list_type == "sparse" else list(self.sizes)
            g = self.groups if self.groups is not None else len(self.sizes)
            m = sum(ext) if self.m is None else self.m
            pairs = -(-self.k // 64)
            x = _codes(rng, (m, self.k), elem)
            w = _codes(rng, (g, self.n, self.k) if self.trans_b else (g, self.k, self.n), elem)
            sx = _scales(rng, (m, pairs, 2))
            sw = _scales(rng, (g, self.n, pairs, 2) if self.trans_b else (g, pairs, self.n, 2))
        if self.group_list_type == "cumsum":
            gl = np.cumsum(ext).astype(np.int64)
        else:
            gl = np.asarray(self.sizes, dtype=np.int64)
        out: dict[str, Any] = {"x": x, "x_scale": sx, "weight": w, "weight_scale": sw, "group_list": gl}
        if self.bias:
            out["bias"] = rng.uniform(-4, 4, (g, self.n)).astype(np.float32)
        return out

    def attrs(self) -> dict[str, Any]:
        return {"group_type": self.group_type, "group_list_type": self.group_list_type, "trans_b": self.trans_b,
                **self.kwargs}


GMM_CASES: tuple[GmmCase, ...] = (
    GmmCase("split_m-count-empty-group-tails", (25, 0, 17, 30), 256, 96),
    GmmCase("split_m-cumsum-nt-k320", (0, 30, 7), 320, 80, group_list_type="cumsum", trans_b=True),
    GmmCase("split_m-bd2", (40, 33), 192, 300, kwargs={"block_dim": 2}),
    GmmCase("split_m-sparse-stops-at-empty", ((0, 20), (2, 0), (1, 30), (3, 11)), 320, 96, m=70, groups=4,
            group_list_type="sparse"),
    GmmCase("split_m-fp4-bias-f32", (40, 0, 24), 256, 64, fp4=True, bias=True, kwargs={"out_dtype": "float32"}),
    GmmCase("split_k-cumsum-zero-groups", (128, 0, 200, 0), 0, 96, m=40, group_type="split_k",
            group_list_type="cumsum", kwargs={"trans_a": True}),
    GmmCase("split_k-count", (64, 192), 0, 80, m=48, group_type="split_k", kwargs={"trans_a": True}),
)


def run_gmm_case(case: GmmCase) -> tuple[np.ndarray, dict[str, Any]]:
    from mc2emu.ops import grouped_matmul_mx

    inp = case.inputs()
    out = grouped_matmul_mx(inp["x"], inp["x_scale"], inp["weight"], inp["weight_scale"], inp["group_list"],
                            bias=inp.get("bias"), timeout=TIMEOUT, **case.attrs())
    return out, inp


def check_gmm_case(case: GmmCase, out: np.ndarray, inp: dict[str, Any]) -> str | None:
    """The GMM tests' rule: AG ST (at most 1 ULP of the output dtype; fp32 output: rtol 1e-6, atol 1e-5)."""
    from mc2emu.ops import golden_grouped_matmul_mx

    attrs = {key: v for key, v in case.attrs().items() if key not in ("trans_a", "block_dim", "variant")}
    g = golden_grouped_matmul_mx(inp["x"], inp["x_scale"], inp["weight"], inp["weight_scale"], inp["group_list"],
                                 bias=inp.get("bias"), **attrs)
    if out.dtype != g.dtype or out.shape != g.shape:
        return f"{out.dtype}{out.shape} vs golden {g.dtype}{g.shape}"
    if out.dtype == np.float32:
        return None if np.allclose(out, g, rtol=1e-6, atol=1e-5) else "fp32 output off the golden"
    ulp = _bf16_ulp(out, g)
    return None if ulp <= 1 else f"{ulp} ULP from the golden"


# -- weight_quant_matmul --------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WqmmCase:
    name: str
    m: int
    n: int
    k: int
    weight: str                       # "int8", "float8_e4m3fn", "float8_e5m2"
    dtype: str = "bfloat16"           # x / scale / offset dtype
    trans_b: bool = False
    offset: bool = False
    bias: bool = False
    kwargs: dict[str, Any] = field(default_factory=dict)

    def inputs(self) -> dict[str, Any]:
        rng = np.random.default_rng([17, self.m, self.n, self.k, self.trans_b, self.offset, self.bias,
                                     len(self.weight)])
        dt = np.dtype(ml_dtypes.bfloat16) if self.dtype == "bfloat16" else np.dtype(self.dtype)
        shape = (self.n, self.k) if self.trans_b else (self.k, self.n)
        x = rng.integers(0, 1 << 16, size=(self.m, self.k), dtype=np.uint16)
        x &= 0xBFFF                                       # exponent bit 14 clear: finite, |x| < 2
        if self.weight == "int8":
            w = rng.integers(-128, 128, size=shape, dtype=np.int8)
        else:
            w = _codes(rng, shape, "e4m3" if self.weight == "float8_e4m3fn" else "e5m2")
        out: dict[str, Any] = {
            "x": x.view(dt), "weight": w,
            "antiquant_scale": (rng.random(self.n) * 0.02 + 0.0025).astype(dt),
            "antiquant_offset": (rng.standard_normal(self.n) * 3).astype(dt) if self.offset else None,
            "bias": rng.standard_normal(self.n).astype(np.float32) if self.bias else None}
        return out


WQMM_CASES: tuple[WqmmCase, ...] = (
    WqmmCase("int8-nn-bf16", 70, 90, 176, "int8", kwargs={"block_dim": 3}),
    WqmmCase("int8-nt-offset-bias-f16", 70, 96, 176, "int8", "float16", trans_b=True, offset=True, bias=True,
             kwargs={"block_dim": 3}),
    WqmmCase("e4m3-nt-bf16", 40, 96, 176, "float8_e4m3fn", trans_b=True, kwargs={"block_dim": 2}),
    WqmmCase("e5m2-nn-offset-f16", 40, 64, 96, "float8_e5m2", "float16", offset=True, kwargs={"block_dim": 2}),
    WqmmCase("e4m3-nn-offset-bias-out-f32", 40, 64, 96, "float8_e4m3fn", offset=True, bias=True,
             kwargs={"block_dim": 2, "out_dtype": "float32"}),
    WqmmCase("int8-nn-offset-3kl1-chunks", 100, 160, 208, "int8", offset=True, bias=True,
             kwargs={"block_dim": 2, "tiling_overrides": {"kL1": 80, "kUbSize": 48, "baseM": 48, "baseN": 64,
                                                          "nUbSize": 128}}),
    WqmmCase("e4m3-nn-offset-a_only_mmad", 40, 64, 96, "float8_e4m3fn", offset=True,
             kwargs={"block_dim": 2, "mode": "a_only_mmad"}),
    WqmmCase("int8-nt-offset-dequant_only", 40, 96, 176, "int8", trans_b=True, offset=True,
             kwargs={"block_dim": 2, "mode": "dequant_only"}),
)


def run_wqmm_case(case: WqmmCase) -> tuple[np.ndarray, dict[str, Any]]:
    from mc2emu.ops import weight_quant_matmul

    inp = case.inputs()
    out = weight_quant_matmul(inp["x"], inp["weight"], inp["antiquant_scale"], inp["antiquant_offset"],
                              bias=inp["bias"], trans_b=case.trans_b, timeout=TIMEOUT, **case.kwargs)
    return out, inp


def check_wqmm_case(case: WqmmCase, out: np.ndarray, inp: dict[str, Any]) -> str | None:
    """The WQMM tests' rule: B_dequant (dequant_only) bit for bit; C within 1 ULP of its 16-bit dtype, or
    rtol = atol = 1e-5 for an fp32 C."""
    from mc2emu.ops import golden_weight_dequant, golden_weight_quant_matmul

    if case.kwargs.get("mode") == "dequant_only":
        g = golden_weight_dequant(inp["weight"], inp["antiquant_scale"], inp["antiquant_offset"], trans_b=case.trans_b)
        from mc2emu.numerics.compare import bit_exact

        return None if bit_exact(out, g) else "B_dequant differs from the golden"
    g = golden_weight_quant_matmul(inp["x"], inp["weight"], inp["antiquant_scale"], inp["antiquant_offset"],
                                   bias=inp["bias"], trans_b=case.trans_b, out_dtype=case.kwargs.get("out_dtype"))
    if out.dtype != g.dtype or out.shape != g.shape:
        return f"{out.dtype}{out.shape} vs golden {g.dtype}{g.shape}"
    if out.dtype == np.float32:
        return None if np.allclose(out, g, rtol=1e-5, atol=1e-5) else "fp32 C off the golden"
    ulp = _bf16_ulp(out, g)
    return None if ulp <= 1 else f"{ulp} ULP from the golden"


# -- the pinned digests -----------------------------------------------------------------------------------------
SERIAL_GROUPS = ("qbmm", "gmm", "wqmm")
COLLECTIVE_GROUPS = ("a2a", "ag", "qmrs")


# The MMAD steps are float32 BLAS products (SPEC §4), whose bits depend on the host BLAS kernel (its
# summation order and FMA use: the same code gives other bits on an AVX-512 host than on an AVX2 one). The
# pins are therefore kept per BLAS fingerprint: the digest of float32 products at the step shapes the
# recorded cases take, in both B layouts.
FINGERPRINT_SHAPES = ((16, 64, 16), (40, 256, 48), (48, 128, 64), (72, 128, 80), (112, 128, 112),
                      (200, 128, 330), (256, 128, 256), (128, 64, 7))


def blas_fingerprint() -> str:
    """16 hex digits naming this host's float32 matmul bits (numpy's BLAS as it runs here)."""
    h = hashlib.sha256()
    for m, k, n in FINGERPRINT_SHAPES:
        rng = np.random.default_rng([m, k, n])
        a = rng.standard_normal((m, k), dtype=np.float32)
        b = rng.standard_normal((k, n), dtype=np.float32)
        for bb in (b, np.asfortranarray(b)):
            h.update(np.matmul(a, bb).tobytes())
            h.update(np.matmul(np.asfortranarray(a), bb).tobytes())
    return h.hexdigest()[:16]


def _host_note() -> str:
    cpu = "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"numpy {np.__version__}, {cpu}"


def _all_sets() -> dict[str, Any]:
    return json.loads(DIGESTS.read_text()) if DIGESTS.exists() else {}


def missing_pins_reason() -> str | None:
    """Why this host has no pins (its BLAS fingerprint was never recorded), or None."""
    sets = _all_sets()
    fp = blas_fingerprint()
    if fp in sets:
        return None
    known = ", ".join(f"{k} ({v.get('host', '?')})" for k, v in sets.items()) or "none"
    return (f"no outputs recorded for this host's BLAS (fingerprint {fp}, {_host_note()}); recorded: {known}. "
            "Check the operators' goldens pass here, then record this host's set (module docstring).")


def load_digests() -> dict[str, Any]:
    """The pins of this host's BLAS fingerprint (every group present, empty when never recorded)."""
    data = _all_sets().get(blas_fingerprint(), {})
    for group in SERIAL_GROUPS + COLLECTIVE_GROUPS:
        data.setdefault(group, {})
    return data


def _save(data: dict[str, Any]) -> None:
    sets = _all_sets()
    data["host"] = _host_note()
    sets[blas_fingerprint()] = data
    DIGESTS.write_text(json.dumps(sets, indent=1, sort_keys=True) + "\n")


def serial_outputs(group: str) -> dict[str, np.ndarray]:
    """Every case's output of a serial group, each checked against its golden first (not QBMM: pre-refactor)."""
    if group == "qbmm":
        return {c.name: run_qbmm_case(c) for c in QBMM_CASES}
    cases: tuple[Any, ...] = GMM_CASES if group == "gmm" else WQMM_CASES
    run = run_gmm_case if group == "gmm" else run_wqmm_case
    check = check_gmm_case if group == "gmm" else check_wqmm_case
    outs = {}
    for c in cases:
        out, inp = run(c)
        bad = check(c, out, inp)
        assert bad is None, f"{group} {c.name}: {bad}; not recorded"
        outs[c.name] = out
    return outs


def collective_outputs(group: str, comm: Any) -> dict[str, np.ndarray]:
    """This rank's output of every case of a collective group, each checked against its golden first on every
    rank (not A2A: its pins are the pre-refactor bytes)."""
    if group == "a2a":
        return {c.name: run_a2a_case(c, comm) for c in A2A_CASES}
    cases: tuple[Any, ...] = AG_CASES if group == "ag" else QMRS_CASES
    run = run_ag_case if group == "ag" else run_qmrs_case
    check = check_ag_case if group == "ag" else check_qmrs_case
    outs = {}
    for c in cases:
        out, inp = run(c, comm)
        bad = comm.allgather(check(out, inp, comm))
        assert not any(bad), f"{group} {c.name}: {dict(enumerate(bad))}; not recorded"
        outs[c.name] = out
    return outs


def _record(groups: list[str]) -> None:
    import os

    if "PMI_RANK" not in os.environ and "OMPI_COMM_WORLD_RANK" not in os.environ:
        data = load_digests()
        for group in groups or SERIAL_GROUPS:
            assert group in SERIAL_GROUPS, f"{group} is recorded under mpirun"
            data[group] = {name: digest(out) for name, out in serial_outputs(group).items()}
            print(f"recorded {len(data[group])} {group} digests")
        _save(data)
        return
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    mine = {}
    for group in groups or COLLECTIVE_GROUPS:
        assert group in COLLECTIVE_GROUPS, f"{group} is recorded without mpirun"
        mine[group] = {name: digest(out) for name, out in collective_outputs(group, comm).items()}
    every = comm.gather(mine, root=0)
    if rank == 0:
        assert every is not None
        data = load_digests()
        for group, pins in mine.items():
            data[group][str(size)] = {name: [every[r][group][name] for r in range(size)] for name in pins}
            print(f"recorded {len(pins)} {group} cases x {size} ranks")
        _save(data)


if __name__ == "__main__":
    import sys

    _record(sys.argv[1:])
