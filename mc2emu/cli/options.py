"""Command-line options of `python -m mc2emu.run`: the parser, the common `RunOptions`, and `OperatorOptions`,
the base of each operator's own options.

The parser has the common groups (what to run, data, execution, predict, output) and one group per registered
operator holding the options that operator declares: a frozen `OperatorOptions` dataclass whose fields carry
an `Option` (`option(...)`). A flag two operators declare alike (`--wait-order`: the all-to-all and the
all-gather) appears once, in the first one's group. Enums are parsed here, once; each operator's values come
back typed, as its own options object (`RunOptions.operators[name]`).

Parsing never prints and never exits: a bad value raises `OptionError` (exit code 2) so that under mpirun
rank 0 alone prints one message while every rank, having parsed the same argv, exits 2 without any
collective call.
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Protocol

from mc2emu.numerics.formats import ElemFormat
from mc2emu.runtime.hazards import EXIT_BAD_INPUT

DEFAULT_NP = 8
DEFAULT_SEED = 42


class OptionError(Exception):
    """A command-line value breaks a rule; the message names the option."""

    exit_code = EXIT_BAD_INPUT


# -- an operator's own options -------------------------------------------------------------------------------
_OPTION = "mc2emu.cli.option"


@dataclass(frozen=True)
class Option:
    """How one operator option parses and what it does.

    - `enum`: the value is a member of this enum, given by its value (case-insensitive);
    - `parse`: else a converter of the text (raising `argparse.ArgumentTypeError` naming the option);
    - `switch`: a flag without a value (store_true);
    - `mode`: sets the operator's mode field of the same name: a mode that has another value is overridden
      (or, with `select`, dropped), a mode whose field is None is dropped, and an operator that does not
      declare the option runs no case. Otherwise the option is read by the operator's `execute` /
      `host_print` from its options object, and operators without it ignore it.
    """

    help: str
    enum: type[enum.Enum] | None = None
    parse: Callable[[str], Any] | None = None
    switch: bool = False
    metavar: str | None = None
    mode: bool = False
    select: bool = False

    def same_parse(self, other: Option) -> bool:
        """Whether two operators' declarations of one flag parse alike (the help may differ)."""
        return (self.enum, self.parse, self.switch, self.mode, self.select) == \
            (other.enum, other.parse, other.switch, other.mode, other.select)


def option(help: str, *, enum: type[enum.Enum] | None = None, parse: Callable[[str], Any] | None = None,
           switch: bool = False, metavar: str | None = None, mode: bool = False, select: bool = False,
           default: Any = None) -> Any:
    """A field of an `OperatorOptions` dataclass that is a command-line option (`--field-name`)."""
    return field(default=False if switch else default,
                 metadata={_OPTION: Option(help, enum, parse, switch, metavar, mode, select)})


def option_name(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class OperatorOptions:
    """Base of an operator's own command-line options: a frozen dataclass whose every field is an `option(...)`
    (the flag is the field name, `--field-name`). The parsed object reaches the operator's `execute` as
    `ExecContext.options`; a field left at its default was not given."""

    @classmethod
    def declared(cls) -> tuple[tuple[str, Option, Any], ...]:
        """(field name, its Option, its default) of every option, in declaration order."""
        out = []
        for f in dataclasses.fields(cls):
            opt = f.metadata.get(_OPTION)
            if not isinstance(opt, Option):
                raise TypeError(f"{cls.__name__}.{f.name}: every field of an OperatorOptions is an option(...)")
            out.append((f.name, opt, f.default))
        return tuple(out)

    @classmethod
    def mode_option_names(cls) -> tuple[str, ...]:
        return tuple(name for name, opt, _ in cls.declared() if opt.mode)

    @classmethod
    def selector_names(cls) -> frozenset[str]:
        return frozenset(name for name, opt, _ in cls.declared() if opt.mode and opt.select)

    def given(self) -> dict[str, object]:
        """The options the user set (field name -> value)."""
        return {name: getattr(self, name) for name, _, default in self.declared() if getattr(self, name) != default}

    def mode_overrides(self) -> dict[str, object]:
        """The mode options the user set (mode field name -> value)."""
        modes = self.mode_option_names()
        return {name: value for name, value in self.given().items() if name in modes}

    def validate(self, run: RunOptions, op: str) -> None:
        """This operator's rules across options (`op`: its name); raises `OptionError`."""

    def host_only(self) -> bool:
        """Whether these options ask for a printout that needs no ranks (the operator's `host_print`)."""
        return False


@dataclass(frozen=True)
class NoOptions(OperatorOptions):
    """The options of an operator that has none of its own."""


class OperatorEntry(Protocol):
    """What the parser needs of a registered operator (an `OperatorSpec`)."""

    @property
    def name(self) -> str: ...

    @property
    def summary(self) -> str: ...

    @property
    def options(self) -> type[OperatorOptions]: ...


# -- the common options ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RunOptions:
    """The options every operator shares, and each registered operator's own (`operators`: name -> its
    `OperatorOptions`)."""

    op: str | None = None
    m: int | None = None
    k: int | None = None
    n: int | None = None
    dtype: ElemFormat | None = None
    seed: int = DEFAULT_SEED
    block_dim: int | None = None
    check: bool = True
    protocol_only: bool = False
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
    # --predict: compare the operator's knobs on the DAV_3510 cost model (mc2emu/cli/predict.py).
    predict: bool = False
    plot: Path | None = None
    cost: tuple[str, ...] = ()
    # --source-cases OP: replay the source's case tables (mc2emu/cli/source_cases.py), m / --scale.
    source_cases: str | None = None
    scale: int = 1
    # --repeat N: each case N times back to back on one Communicator, every iteration against the golden;
    # --scenario layers: the chained layer loops (mc2emu/cli/layers.py).
    repeat: int = 1
    scenario: str | None = None
    layers: int = 2
    seeds: int = 1
    window_offset: tuple[str, ...] = ()
    case: tuple[str, ...] = ()
    operators: Mapping[str, OperatorOptions] = field(default_factory=dict)

    def mode_options_given(self) -> tuple[str, ...]:
        """The mode options the user set, of any operator (field names, each once, in declaration order)."""
        names: dict[str, None] = {}
        for o in self.operators.values():
            names.update(dict.fromkeys(o.mode_overrides()))
        return tuple(names)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise OptionError(f"{self.prog}: {message}")

    def exit(self, status: int = 0, message: str | None = None) -> NoReturn:
        raise OptionError(message or f"{self.prog}: exit {status}")


def enum_parser(cls: type[enum.Enum], option: str) -> Callable[[str], enum.Enum]:
    def conv(text: str) -> enum.Enum:
        try:
            return cls(text.strip().lower())
        except ValueError:
            allowed = ", ".join(m.value for m in cls)
            raise argparse.ArgumentTypeError(f"{option} {text!r}: choose one of {allowed}") from None
    conv.__name__ = option
    return conv


def int_at_least(lo: int, option: str) -> Callable[[str], int]:
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


def _positive_float(option: str) -> Callable[[str], float]:
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


def int_choice(choices: Sequence[int], option: str) -> Callable[[str], int]:
    """An integer out of `choices`."""
    at_least = int_at_least(min(choices), option)

    def conv(text: str) -> int:
        v = at_least(text)
        if v not in choices:
            raise argparse.ArgumentTypeError(f"{option} {v}: choose one of {', '.join(map(str, choices))}")
        return v
    conv.__name__ = option
    return conv


def _dtype(text: str) -> ElemFormat:
    key = text.strip().lower()
    for fmt in ElemFormat:
        if key == fmt.value:
            return fmt
    raise argparse.ArgumentTypeError(f"--dtype {text!r}: choose one of {', '.join(f.value for f in ElemFormat)}")


def _common_parser(description: str) -> argparse.ArgumentParser:
    ap = _Parser(prog="python -m mc2emu.run", description=description, add_help=False,
                 formatter_class=argparse.RawDescriptionHelpFormatter, allow_abbrev=False)
    sel = ap.add_argument_group("what to run (each narrows the suite; an operator's mode options, in its group "
                                "below, override its modes)")
    sel.add_argument("--op", help="one operator (see --list)")
    sel.add_argument("--hazards", action="store_true", help="add the expected-hazard showcase cases")
    sel.add_argument("--quick", action="store_true", help="small shapes (the suite in well under 30 s)")
    shp = ap.add_argument_group("data")
    shp.add_argument("--m", type=int_at_least(1, "--m"), help="rows of C per rank (oriM)")
    shp.add_argument("--k", type=int_at_least(1, "--k"), help="K per rank (Ka)")
    shp.add_argument("--n", type=int_at_least(1, "--n"), help="columns of C (N)")
    shp.add_argument("--dtype", type=_dtype, help="element format: e4m3 (default) | e5m2 | e2m1 | e1m2")
    shp.add_argument("--seed", type=int_at_least(0, "--seed"), default=DEFAULT_SEED, help="input seed")
    shp.add_argument("--inputs", type=Path, metavar="DIR", help="replay inputs written by --dump DIR")
    run = ap.add_argument_group("execution")
    run.add_argument("--block-dim", type=int_at_least(1, "--block-dim"), help="blocks per launch (default: tiling)")
    run.add_argument("--check", dest="check", action="store_true", default=True, help="hazard checkers on (default)")
    run.add_argument("--no-check", dest="check", action="store_false", help="hazard checkers off")
    run.add_argument("--protocol-only", dest="protocol_only", action="store_true",
                     help="the full control flow, events and checks, no tensor bytes (no golden; docs/architecture.md)")
    run.add_argument("--perturb", type=int_at_least(0, "--perturb"), metavar="SEED",
                     help="seeded timing perturbation")
    run.add_argument("--timeout", type=_positive_float("--timeout"), help="wait deadline in seconds")
    run.add_argument("--repeat", type=int_at_least(1, "--repeat"), default=1, metavar="N",
                     help="run each case N times back to back on one persistent Communicator (collective "
                          "operators; 20 = the source ST's perf loop) and check every iteration; with --predict: "
                          "predict each setting's loop of N launches, with the drift between ranks")
    run.add_argument("--scenario", choices=("layers",), help="layers: the chained layer loops (TP MLP "
                     "all_gather_quant_matmul -> quant_matmul_reduce_scatter; MoE all_to_all_quant_matmul -> "
                     "grouped_matmul_mx) on one Communicator, each layer's output feeding the next; with --op only the "
                     "chain(s) calling that operator")
    run.add_argument("--layers", type=int_at_least(1, "--layers"), default=2, metavar="L",
                     help="with --scenario layers: the number of layers (default 2)")
    run.add_argument("--seeds", type=int_at_least(1, "--seeds"), default=1, metavar="S",
                     help="with --scenario layers: run the loop under S perturbation seeds (from --perturb, "
                          "default 0); every seed's output must be bitwise equal")
    run.add_argument("--window-offset", action="append", default=[], metavar="NAME=BYTES",
                     help="with --repeat / --scenario layers: start the data window NAME (e.g. qmrs_data) at "
                          "BYTES of the communicator buffer (default: every window at its base)")
    run.add_argument("--np", type=int_at_least(1, "--np"), default=DEFAULT_NP,
                     help=f"ranks when relaunching under mpiexec (default {DEFAULT_NP})")
    prd = ap.add_argument_group("predict the device (docs/predict.md)")
    prd.add_argument("--predict", action="store_true",
                     help="compare the operator's knobs (A2A localMatmul x head tile, QBMM block_dim, AG wait x "
                          "block_dim) by predicted DAV_3510 time and recommend one; --trace then writes the "
                          "recommended run in virtual and wall time")
    prd.add_argument("--plot", type=Path, metavar="FILE", help="with --predict: predicted time vs the knob "
                                                                 "(PNG / SVG; needs the plot extra)")
    prd.add_argument("--cost", action="append", default=[], metavar="NAME=VALUE",
                     help="with --predict: override a cost model field, e.g. link_bw=4e12, put_latency_s=1e-6")
    src = ap.add_argument_group("the source's case tables (tests/data/source_cases)")
    src.add_argument("--source-cases", metavar="OP",
                     help="replay OP's source case tables as the source's ST / UT does: its shapes and R, its "
                          "data recipe and verify rule, one row per case (cases at another R are listed)")
    src.add_argument("--scale", type=int_at_least(1, "--scale"), default=1, metavar="M_DIV",
                     help="with --source-cases: divide m by M_DIV where the case keeps its tiles per rank and "
                          "tail (CI); the full size is the reference")
    src.add_argument("--case", action="append", default=[], metavar="NAME",
                     help="with --source-cases: replay only this case (its name in the table's case column, e.g. "
                          "a2a#1; repeatable)")
    out = ap.add_argument_group("output")
    out.add_argument("--trace", type=Path, metavar="FILE", help="write a Chrome trace (Perfetto) of every case")
    out.add_argument("--dump", type=Path, metavar="DIR", help="write each rank's inputs and outputs (rank{r}.npz)")
    out.add_argument("--list", action="store_true", help="list operators and scenarios, then exit")
    out.add_argument("-h", "--help", action="store_true", help="show this help, then exit")
    return ap


HELP_WIDTH = 100  # an operator group's description (RawDescriptionHelpFormatter does not wrap it)
COMMON_FIELDS = tuple(f.name for f in dataclasses.fields(RunOptions) if f.name != "operators")


def build_parser(operators: Sequence[OperatorEntry], description: str = "") -> argparse.ArgumentParser:
    """The common options, then one group per operator with options of its own, titled with its name. A flag
    declared by several operators must parse alike (`Option.same_parse`, the same default): it is added
    once, in the first one's group; the later groups name it."""
    ap = _common_parser(description)
    first: dict[str, tuple[str, Option, Any]] = {}
    for entry in operators:
        declared = entry.options.declared()
        if not declared:
            continue
        shared = []
        own = []
        for name, opt, default in declared:
            if name in COMMON_FIELDS:
                raise TypeError(f"operator {entry.name}: option {option_name(name)} is a common option")
            if name in first:
                owner, have, have_default = first[name]
                if not opt.same_parse(have) or default != have_default:
                    raise TypeError(f"operator {entry.name}: {option_name(name)} is declared otherwise by {owner}")
                shared.append(f"{option_name(name)} (under {owner})")
                continue
            first[name] = (entry.name, opt, default)
            own.append((name, opt, default))
        desc = textwrap.fill(entry.summary, HELP_WIDTH) + (f"\nalso takes {', '.join(shared)}" if shared else "")
        grp = ap.add_argument_group(f"{entry.name} (--op {entry.name})", desc)
        for name, opt, default in own:
            flag = option_name(name)
            if opt.switch:
                grp.add_argument(flag, dest=name, action="store_true", help=opt.help)
                continue
            conv = enum_parser(opt.enum, flag) if opt.enum is not None else opt.parse
            if conv is None:
                raise TypeError(f"operator {entry.name}: {flag} declares neither enum=, parse= nor switch=True")
            grp.add_argument(flag, dest=name, type=conv, default=default, metavar=opt.metavar, help=opt.help)
    return ap


def parse_options(argv: list[str], operators: Sequence[OperatorEntry], description: str = "") -> RunOptions:
    """Parse and check argv against the common options and `operators`' own; raises `OptionError` (never
    prints)."""
    ns = build_parser(operators, description).parse_args(argv)
    values = vars(ns)
    values["cost"] = tuple(values.get("cost") or ())
    values["case"] = tuple(values.get("case") or ())
    values["window_offset"] = tuple(values.get("window_offset") or ())
    per_op = {e.name: e.options(**{name: values[name] for name, _, _ in e.options.declared()}) for e in operators}
    opts = RunOptions(**{name: values[name] for name in COMMON_FIELDS}, operators=per_op)
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
    for name, own in per_op.items():
        own.validate(opts, name)
    window_offsets(opts)
    if opts.scenario == "layers" and opts.op is not None:
        chains_calling(opts.op)
    if opts.repeat > 1 and (opts.inputs is not None or opts.source_cases is not None):
        raise OptionError("--repeat: runs the suite's cases; --inputs and --source-cases do not apply")
    if opts.inputs is not None and opts.dump is not None and opts.inputs.resolve() == opts.dump.resolve():
        raise OptionError("--inputs and --dump name the same directory: the dump would overwrite the replayed files")
    return opts


# `--scenario layers`: each layer chain and the operators it calls (mc2emu/cli/layers.py runs them).
LAYER_CHAINS: dict[str, tuple[str, ...]] = {
    "tp_mlp": ("all_gather_quant_matmul", "quant_matmul_reduce_scatter"),
    "moe": ("all_to_all_quant_matmul", "grouped_matmul_mx"),
}


def chains_calling(op: str | None) -> list[str]:
    """The layer chains that call operator `op` (every chain: None); an operator no chain calls is an
    OptionError."""
    names = [name for name, ops in LAYER_CHAINS.items() if op is None or op in ops]
    if not names:
        calls = "; ".join(f"{name}: {', '.join(ops)}" for name, ops in LAYER_CHAINS.items())
        raise OptionError(f"--scenario layers --op {op}: no layer chain calls it ({calls})")
    return names


def window_offsets(opts: RunOptions) -> dict[str, int]:
    """`--window-offset NAME=BYTES` as {name: offset}; a malformed one is an OptionError."""
    out: dict[str, int] = {}
    for item in opts.window_offset:
        name, _, value = item.partition("=")
        if not name or not value.isdigit():
            raise OptionError(f"--window-offset {item!r}: expected NAME=BYTES (a window name, a byte offset >= 0)")
        out[name] = int(value)
    return out


def help_text(operators: Sequence[OperatorEntry], description: str = "") -> str:
    return build_parser(operators, description).format_help()
