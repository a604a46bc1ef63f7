"""Command-line options of `python -m mc2emu.run`: the parser, the option enums and `RunOptions`.

Parsing never prints and never exits: a bad value raises `OptionError` (exit code 2) so that under mpirun
rank 0 alone prints one message while every rank, having parsed the same argv, exits 2 without any
collective call.
"""

from __future__ import annotations

import argparse
import enum
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, NoReturn

from mc2emu.apace.comm_policy import WaitOrder
from mc2emu.comm.hccl_task import HcclServerType as HcclServer
from mc2emu.numerics.formats import ElemFormat
from mc2emu.ops.all_to_all_quant_matmul_op import Impl, LaunchMode
from mc2emu.runtime.hazards import EXIT_BAD_INPUT

DEFAULT_NP = 8
DEFAULT_SEED = 42


class OptionError(Exception):
    """A command-line value breaks a rule; the message names the option."""

    exit_code = EXIT_BAD_INPUT


LOCAL_MATMUL_CHOICES = (0, 1, 2)


@dataclass(frozen=True)
class RunOptions:
    op: str | None = None
    impl: Impl | None = None
    local_matmul: int | None = None
    wait_order: WaitOrder | None = None
    hccl_server: HcclServer | None = None
    isolate: str | None = None
    m: int | None = None
    k: int | None = None
    n: int | None = None
    dtype: ElemFormat | None = None
    seed: int = DEFAULT_SEED
    block_dim: int | None = None
    launch: LaunchMode = LaunchMode.CONVENIENT
    check: bool = True
    perturb: int | None = None
    timeout: float | None = None
    trace: Path | None = None
    dump: Path | None = None
    inputs: Path | None = None
    list: bool = False
    quick: bool = False
    hazards: bool = False
    np: int = DEFAULT_NP
    help: bool = False
    # Host-only printouts (no MPI): --op grouped_matmul_mx --print-tiling / --print-schedule.
    print_tiling: bool = False
    print_schedule: bool = False
    shape: tuple[int, int, int] | None = None
    group_list: tuple[int, ...] | None = None
    trans_b: bool = False
    split_k: bool = False
    json: bool = False
    gmm_variant: str | None = None  # grouped_matmul_mx: cgmct | blaze | blaze_sample (a mode option, and the plan's)
    # --predict: compare the operator's knobs on the DAV_3510 cost model (mc2emu/cli/predict.py).
    predict: bool = False
    plot: Path | None = None
    cost: tuple[str, ...] = ()

    # Options that set a field of an operator's mode type (validated against the operator's mode type).
    MODE_OPTIONS: ClassVar[tuple[str, ...]] = ("impl", "local_matmul", "wait_order", "hccl_server", "isolate",
                                               "gmm_variant")

    def mode_filters(self) -> dict[str, object]:
        """The mode options the user set (field name -> value)."""
        out: dict[str, object] = {}
        for name in self.MODE_OPTIONS:
            v = getattr(self, name)
            if v is not None:
                out[name] = v
        return out


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise OptionError(message or f"{self.prog}: exit {status}")


def _enum_type(cls: type[enum.Enum], option: str):
    def conv(text: str) -> enum.Enum:
        try:
            return cls(text.strip().lower())
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise argparse.ArgumentTypeError(f"{option} {text!r}: choose one of {allowed}") from None
    conv.__name__ = option
    return conv


def _int_at_least(lo: int, option: str):
    def conv(text: str) -> int:
        try:
            v = int(text, 0)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: not an integer") from None
        if v < lo:
            raise argparse.ArgumentTypeError(f"{option} {v}: must be >= {lo}")
        return v
    conv.__name__ = option
    return conv


def _positive_float(option: str):
    def conv(text: str) -> float:
        try:
            v = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} {text!r}: not a number") from None
        if not v > 0 or v == float("inf"):
            raise argparse.ArgumentTypeError(f"{option} {text}: must be a positive, finite number of seconds")
        return v
    conv.__name__ = option
    return conv


def _local_matmul(text: str) -> int:
    v = _int_at_least(0, "--local-matmul")(text)
    if v not in LOCAL_MATMUL_CHOICES:
        allowed = ", ".join(map(str, LOCAL_MATMUL_CHOICES))
        raise argparse.ArgumentTypeError(f"--local-matmul {v}: choose one of {allowed}")
    return v


def _dtype(text: str) -> ElemFormat:
    key = text.strip().lower()
    for fmt in ElemFormat:
        if key == fmt.value:
            return fmt
    raise argparse.ArgumentTypeError(f"--dtype {text!r}: choose one of {', '.join(f.value for f in ElemFormat)}")


def _shape(text: str) -> tuple[int, int, int]:
    parts = text.replace("x", ",").split(",")
    try:
        vals = tuple(int(p, 0) for p in parts)
    except ValueError:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: give M,N,K as three integers") from None
    if len(vals) != 3 or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"--shape {text!r}: give M,N,K as three integers >= 0")
    return vals[0], vals[1], vals[2]


def _group_list(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(p, 0) for p in text.split(","))
    except ValueError:
        raise argparse.ArgumentTypeError(f"--group-list {text!r}: give per-group sizes, e.g. 25,25,0,50") from None
    if not vals or min(vals) < 0:
        raise argparse.ArgumentTypeError(f"--group-list {text!r}: sizes must be >= 0")
    return vals


PLAN_OPS = ("grouped_matmul_mx",)  # operators with host-only --print-tiling / --print-schedule


def build_parser(description: str = "") -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m mc2emu.run", description=description, add_help=False,
                 formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    sel = ap.add_argument_group("what to run (each narrows the suite; mode options override its modes)")
    sel.add_argument("--op", help="one operator (see --list)")
    sel.add_argument("--impl", type=_enum_type(Impl, "--impl"), help="udma | hcomm")
    sel.add_argument("--local-matmul", type=_local_matmul, help="0 | 1 | 2")
    sel.add_argument("--wait-order", type=_enum_type(WaitOrder, "--wait-order"), help="mask | in_order")
    sel.add_argument("--hccl-server", type=_enum_type(HcclServer, "--hccl-server"), help="ccu | aicpu (hcomm)")
    sel.add_argument("--isolate", choices=("full", "a_only_mmad", "dequant_only"),
                     help="full | a_only_mmad | dequant_only (weight_quant_matmul: the seed's isolation modes)")
    sel.add_argument("--hazards", action="store_true", help="add the expected-hazard showcase cases")
    sel.add_argument("--quick", action="store_true", help="small shapes (the suite in well under 30 s)")
    shp = ap.add_argument_group("data")
    shp.add_argument("--m", type=_int_at_least(1, "--m"), help="rows of C per rank (oriM)")
    shp.add_argument("--k", type=_int_at_least(1, "--k"), help="K per rank (Ka)")
    shp.add_argument("--n", type=_int_at_least(1, "--n"), help="columns of C (N)")
    shp.add_argument("--dtype", type=_dtype, help="element format: e4m3 (default) | e5m2 | e2m1 | e1m2")
    shp.add_argument("--seed", type=_int_at_least(0, "--seed"), default=DEFAULT_SEED, help="input seed")
    shp.add_argument("--inputs", type=Path, metavar="DIR", help="replay inputs written by --dump DIR")
    run = ap.add_argument_group("execution")
    run.add_argument("--block-dim", type=_int_at_least(1, "--block-dim"), help="blocks per launch (default: tiling)")
    run.add_argument("--launch", type=_enum_type(LaunchMode, "--launch"), default=LaunchMode.CONVENIENT,
                     help="UDMA blocks without --block-dim: convenient (usedCoreNum, raised to R and noted) | "
                          "source (usedCoreNum exactly, as the ST host: A2A-5 when below R)")
    run.add_argument("--check", dest="check", action="store_true", default=True, help="hazard checkers on (default)")
    run.add_argument("--no-check", dest="check", action="store_false", help="hazard checkers off")
    run.add_argument("--perturb", type=_int_at_least(0, "--perturb"), metavar="SEED",
                     help="seeded timing perturbation")
    run.add_argument("--timeout", type=_positive_float("--timeout"), help="wait deadline in seconds")
    run.add_argument("--np", type=_int_at_least(1, "--np"), default=DEFAULT_NP,
                     help=f"ranks when relaunching under mpiexec (default {DEFAULT_NP})")
    pln = ap.add_argument_group("plans, printed without MPI (--op grouped_matmul_mx)")
    pln.add_argument("--print-tiling", action="store_true", help="print the host tiling (seed 002 §15 fields)")
    pln.add_argument("--print-schedule", action="store_true", help="print every tile each core runs")
    pln.add_argument("--shape", type=_shape, metavar="M,N,K", help="M = all rows of x, N, K (total K for split-K)")
    pln.add_argument("--group-list", type=_group_list, metavar="G0,G1,..",
                     help="per-group rows (split-M) or K (--split-k); default one group")
    pln.add_argument("--trans-b", action="store_true", help="weight [g, N, K]")
    pln.add_argument("--split-k", action="store_true", help="group along K (x [K, M], transA)")
    pln.add_argument("--json", action="store_true", help="JSON with the source's field names")
    pln.add_argument("--gmm-variant", choices=("cgmct", "blaze", "blaze_sample"),
                     help="grouped_matmul_mx kernel: cgmct (default) | blaze (IS_BLAZE) | blaze_sample; also "
                          "narrows a run's modes")
    prd = ap.add_argument_group("predict the device (docs/predict.md)")
    prd.add_argument("--predict", action="store_true",
                     help="compare the operator's knobs (A2A localMatmul x head tile, QBMM block_dim, AG wait x "
                          "block_dim) by predicted DAV_3510 time and recommend one; --trace then writes the "
                          "recommended run in virtual and wall time")
    prd.add_argument("--plot", type=Path, metavar="FILE", help="with --predict: predicted time vs the knob "
                                                                 "(PNG / SVG; needs the plot extra)")
    prd.add_argument("--cost", action="append", default=[], metavar="NAME=VALUE",
                     help="with --predict: override a cost model field, e.g. link_bw=4e12, put_latency_s=1e-6")
    out = ap.add_argument_group("output")
    out.add_argument("--trace", type=Path, metavar="FILE", help="write a Chrome trace (Perfetto) of every case")
    out.add_argument("--dump", type=Path, metavar="DIR", help="write each rank's inputs and outputs (rank{r}.npz)")
    out.add_argument("--list", action="store_true", help="list operators and scenarios, then exit")
    out.add_argument("-h", "--help", action="store_true", help="show this help, then exit")
    return ap


def parse_options(argv: list[str], description: str = "") -> RunOptions:
    """Parse and check argv; raises `OptionError` (never prints)."""
    ns = build_parser(description).parse_args(argv)
    values = vars(ns)
    values["cost"] = tuple(values.get("cost") or ())
    opts = RunOptions(**values)
    if (opts.plot is not None or opts.cost) and not opts.predict:
        raise OptionError("--plot / --cost: only with --predict")
    if opts.predict and (opts.hazards or opts.dump is not None or opts.inputs is not None):
        raise OptionError("--predict: runs the operator's knob sweep; --hazards, --dump and --inputs do not apply")
    if opts.trace is not None and opts.trace.is_dir():
        raise OptionError(f"--trace {opts.trace}: is a directory, give a file name")
    if opts.dump is not None and opts.dump.exists() and not opts.dump.is_dir():
        raise OptionError(f"--dump {opts.dump}: exists and is not a directory")
    if opts.inputs is not None and not opts.inputs.is_dir():
        raise OptionError(f"--inputs {opts.inputs}: no such directory")
    plan_only = ("shape", "group_list", "trans_b", "split_k", "json")
    if opts.print_tiling or opts.print_schedule:
        what = "--print-tiling" if opts.print_tiling else "--print-schedule"
        if opts.op not in PLAN_OPS:
            raise OptionError(f"{what}: needs --op {' | '.join(PLAN_OPS)} (got --op {opts.op})")
        if opts.shape is None:
            raise OptionError(f"{what}: needs --shape M,N,K")
    else:
        given = [f"--{name.replace('_', '-')}" for name in plan_only if getattr(opts, name)]
        if given:
            raise OptionError(f"{', '.join(given)}: only with --print-tiling or --print-schedule")
    if opts.inputs is not None and opts.dump is not None and opts.inputs.resolve() == opts.dump.resolve():
        raise OptionError("--inputs and --dump name the same directory: the dump would overwrite the replayed files")
    return opts


def help_text(description: str = "") -> str:
    return build_parser(description).format_help()
