"""The scenario registry: operators, their modes, and how the command line turns them into cases.

An operator plugs in with one `OperatorSpec` (see `mc2emu/cli/operators/`): its valid modes (the
default suite), its expected-hazard showcase modes, the rules that say which hazard a mode must reproduce,
its shapes, its own mode type (a frozen dataclass of its fields), its own command-line options (an
`OperatorOptions` dataclass) and four callables (make_inputs, golden, execute, compare). Nothing here tests
an operator, an option or a mode by name.

From options to cases (`plan_cases`):
1. operators: `--op` or every registered operator (a mode option `--op` does not declare is an error;
   without `--op`, an operator that does not declare a given mode option runs no case);
2. modes: the operator's valid modes, plus its hazard modes with `--hazards`;
3. a selecting mode option (`--impl`) keeps the modes with that value; every other mode option the user
   set (`--local-matmul`, `--wait-order`, ...) replaces that field in each mode that has it; a mode whose
   field is None (udma for `--hccl-server`) is dropped; duplicates are merged;
4. each resulting mode is classified by the operator's rules: a mode that must reproduce a hazard runs
   only with `--hazards` (otherwise it is dropped, and if nothing is left the error says so);
5. shape: `--m/--k/--n` over the operator's default (or `--quick`) shape; dtype: `--dtype` or the first
   the operator lists.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np

from mc2emu.cli.options import NoOptions, OperatorOptions, OptionError, RunOptions, option_name
from mc2emu.numerics.formats import ElemFormat
from mc2emu.numerics.payload import Payload
from mc2emu.runtime.hazards import Hazard

Arrays = dict[str, np.ndarray]


@dataclass(frozen=True)
class OperatorMode:
    """Base of every operator's mode type: a frozen dataclass of that operator's own fields (A2A: impl,
    local_matmul, wait_order, hccl_server, ...; QBMM: bias, atomic, batch, revision). A field whose value
    is None does not apply to that mode (e.g. hccl_server of a UDMA mode). `CONVERT` turns a dumped
    value back into the field's type (`from_dict`)."""

    CONVERT: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

    @classmethod
    def field_names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(cls))

    def with_overrides(self, overrides: Mapping[str, object],
                       selectors: frozenset[str] = frozenset()) -> OperatorMode | None:
        """This mode with the user's mode options applied; None if one of them does not apply here (the
        field is None) or a selector (e.g. the impl, whose modes have different fields) differs."""
        for name, value in overrides.items():
            have = getattr(self, name, None)
            if have is None or (name in selectors and have != value):
                return None
        return dataclasses.replace(self, **overrides)

    def impl_name(self) -> str:
        impl = getattr(self, "impl", None)
        return impl.value if impl is not None else ""

    def label_parts(self) -> list[str]:
        return []

    def label(self) -> str:
        return " ".join(self.label_parts()) or "-"

    def slug(self) -> str:
        return "-".join(p.replace("+", "") for p in [self.impl_name(), *" ".join(self.label_parts()).split()] if p)

    def as_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> OperatorMode:
        """The mode recorded by `as_dict` (keys of other operators' modes are ignored)."""
        vals = {}
        for name in cls.field_names():
            if name in d:
                v = d[name]
                vals[name] = None if v is None else cls.CONVERT.get(name, lambda x: x)(v)
        return cls(**vals)


def _plain(v: Any) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


@dataclass(frozen=True)
class NoMode(OperatorMode):
    """The mode type of an operator without options (the self-check)."""


@dataclass(frozen=True)
class Expect:
    """What a case must produce: nothing special (a pass), or these hazards / a caught deadlock.

    - `hang_ok`: timing may turn the case into a hang (e.g. block 0 finalizing HCCL while another AIC
      still waits, which under AICPU then hangs): a caught deadlock also reproduces it.
    - `optional`: whether the hazard happens at all depends on `optional_on` (timing, or the shape and
      rank count): a clean, correct run passes.
    - `compare`: the reported hazard's damage is predicted exactly by the operator's golden for this mode,
      so an expected hazard must also pass the comparison (else MISMATCH)."""

    hazards: frozenset[Hazard] = frozenset()
    deadlock: bool = False
    hang_ok: bool = False
    optional: bool = False
    compare: bool = False
    optional_on: str = "timing"

    @property
    def hazard_names(self) -> frozenset[str]:
        return frozenset(h.value for h in self.hazards)

    @property
    def is_hazard(self) -> bool:
        return self.deadlock or bool(self.hazards)

    @property
    def may_deadlock(self) -> bool:
        return self.deadlock or self.hang_ok

    def label(self) -> str:
        names = sorted(self.hazard_names) + (["DEADLOCK"] if self.deadlock else [])
        text = ", ".join(names) or "pass"
        if self.hang_ok and not self.deadlock:
            text += " or DEADLOCK"
        if self.compare:
            text += " + golden"
        return f"{text} (if {self.optional_on} allows)" if self.optional else text


PASS = Expect()


@dataclass(frozen=True)
class ModeRule:
    """`when` maps mode fields to a value or a tuple of accepted values; the first matching rule wins."""

    when: Mapping[str, object]
    expect: Expect
    why: str = ""

    def matches(self, mode: OperatorMode) -> bool:
        for name, want in self.when.items():
            have = getattr(mode, name)
            if isinstance(want, tuple):
                if have not in want:
                    return False
            elif have != want:
                return False
        return True


@dataclass(frozen=True)
class Shape:
    m: int
    k: int = 0
    n: int = 0

    def label(self) -> str:
        return "x".join(str(d) for d in (self.m, self.k, self.n) if d)


@dataclass(frozen=True)
class Comparison:
    """Output vs golden: `ok` under the operator's rule; max abs error and max ULP (bf16, or the output's
    own 16-bit dtype) when defined, both from `mc2emu.numerics.compare`."""

    ok: bool
    max_abs: float | None = None
    max_ulp: int | None = None
    note: str = ""


def comparison_refused(out: Any, ref: np.ndarray | None) -> Comparison | None:
    """The verdict that needs no operator rule: no golden, or an output of another shape (else None)."""
    if ref is None:
        return Comparison(False, note="no golden")
    if np.shape(out) != np.shape(ref):
        return Comparison(False, note=f"output shape {np.shape(out)}, golden {np.shape(ref)}")
    return None


@dataclass(frozen=True)
class ExecContext:
    """What `execute` gets besides the inputs: the common options, and the operator's own parsed options
    (`options`, of its `OperatorSpec.options` type; None: that type's defaults)."""

    rank: int
    size: int
    observers: tuple[Callable[[Any], None], ...] = ()
    check: bool = True
    timeout: float | None = None
    perturb: Any = None
    block_dim: int | None = None
    comm: Any = None
    options: OperatorOptions | None = None
    data: bool = True   # False: --protocol-only (inputs are Payloads, the output a Payload)
    # Facts of the launch the table must show (e.g. the host launched more blocks than the tiling's
    # usedCoreNum): the operator's `execute` appends them, the runner carries them into the report.
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Knob:
    """One point of an operator's `--predict` sweep: a mode and a block_dim (None: the tiling's), with the
    knob values shown in the table (name -> value, e.g. {"localMatmul": 1, "head tile": 64})."""

    mode: OperatorMode
    block_dim: int | None = None
    values: Mapping[str, object] = field(default_factory=dict)

    def label(self) -> str:
        return " ".join(f"{k} {v}" for k, v in self.values.items()) or self.mode.label()


# `--predict` block_dim sweep of a one-NPU operator: powers of two up to the DAV_3510 AIC count (and 24).
BLOCK_DIM_SWEEP = (1, 2, 4, 8, 16, 24, 32)


def block_dim_knobs(mode: OperatorMode, dims: Sequence[int] = BLOCK_DIM_SWEEP) -> list[Knob]:
    """One knob per block_dim (the AICs the tiling may use) of `mode`, shown as "block_dim"."""
    return [Knob(mode, bd, {"block_dim": bd}) for bd in dims]


@dataclass(frozen=True)
class Case:
    """One planned run of one operator in one mode on one shape."""

    op: str
    mode: OperatorMode
    shape: Shape
    dtype: ElemFormat | None
    seed: int
    expect: Expect = PASS
    timeout: float | None = None

    @property
    def case_id(self) -> str:
        parts = [self.op, self.mode.slug(), self.shape.label(), self.dtype.value if self.dtype else ""]
        return "_".join(p for p in parts if p)

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "mode": self.mode.as_dict(), "shape": [self.shape.m, self.shape.k, self.shape.n],
                "dtype": self.dtype.value if self.dtype else None, "seed": self.seed}


@dataclass(frozen=True)
class OperatorSpec:
    """Everything the CLI needs to know about one operator.

    - mode_type: the operator's own mode dataclass (an `OperatorMode`); every mode, hazard mode and rule
      is checked against it when the spec is built.
    - make_inputs(case, rank, size): this rank's inputs (named arrays, the names of `input_names`).
    - golden(case, inputs, comm): this rank's expected output (may be collective on `comm`; every rank
      calls it whatever the op did), or None when there is none.
    - execute(case, inputs, ctx): run the operator on this rank (with the common keywords of `ctx`), return
      its output; raise the runtime's errors (ConstraintError, HazardError with .output, DeadlockError).
    - compare(out, golden): the operator's pass rule; its max|err| and ULP figures come from
      `mc2emu.numerics.compare` (`max_abs_error`, `ulp_distance`).
    - validate(case, size): reasons the case cannot run at this world size (checked before any run).
    - predict_knobs(shape, size): the modes / block dims `--predict` compares (see mc2emu/cli/predict.py).
    - options: the operator's own command-line options (an `OperatorOptions` dataclass: its argparse group
      under `--help`); each mode option names a field of `mode_type`.
    - host_print(options, run): the printout its options ask for when `options.host_only()` (no ranks, no
      MPI); raises ConstraintError on a bad request.
    - collective: it takes `comm=` (`--repeat` runs its iterations on one `Communicator`).
    """

    name: str
    summary: str
    mode_type: type[OperatorMode]
    make_inputs: Callable[[Case, int, int], Arrays]
    golden: Callable[[Case, Arrays, Any], np.ndarray | None]
    execute: Callable[[Case, Arrays, ExecContext], np.ndarray]
    compare: Callable[[np.ndarray, np.ndarray | None], Comparison]
    modes: tuple[OperatorMode, ...] = ()
    hazard_modes: tuple[OperatorMode, ...] = ()
    rules: tuple[ModeRule, ...] = ()
    default_shape: Shape = Shape(1)
    quick_shape: Shape = Shape(1)
    dtypes: tuple[ElemFormat, ...] = ()
    input_names: tuple[str, ...] = ()
    validate: Callable[[Case, int], list[str]] = field(default=lambda case, size: [])
    # Deadline for cases that may deadlock by design when the user gave no --timeout (keeps them short).
    deadlock_timeout_s: float = 5.0
    # `--predict`: the knobs to compare for a shape at a world size (None: the operator has no sweep).
    predict_knobs: Callable[[Shape, int], Sequence[Knob]] | None = None
    options: type[OperatorOptions] = NoOptions
    host_print: Callable[[Any, RunOptions], str] | None = None
    # The operator communicates (takes `comm=`): `--repeat` runs it on one persistent Communicator.
    collective: bool = False

    def __post_init__(self) -> None:
        modes = self.modes or (self.mode_type(),)
        object.__setattr__(self, "modes", tuple(modes))
        for m in (*self.modes, *self.hazard_modes):
            if type(m) is not self.mode_type:
                raise TypeError(f"operator {self.name}: mode {m!r} is not a {self.mode_type.__name__}")
        fields = set(self.mode_type.field_names())
        for rule in self.rules:
            unknown = set(rule.when) - fields
            if unknown:
                raise TypeError(f"operator {self.name}: rule {rule.why!r} names {sorted(unknown)}, not fields "
                                f"of {self.mode_type.__name__}")
        unknown = set(self.options.mode_option_names()) - fields
        if unknown:
            raise TypeError(f"operator {self.name}: mode options {sorted(unknown)} are not fields of "
                            f"{self.mode_type.__name__}")

    def expectation(self, mode: OperatorMode) -> Expect:
        for rule in self.rules:
            if rule.matches(mode):
                return rule.expect
        return PASS


class Registry:
    """Operators by name, in registration order."""

    def __init__(self, specs: Sequence[OperatorSpec] = ()) -> None:
        self._specs: dict[str, OperatorSpec] = {}
        for s in specs:
            self.register(s)

    def register(self, spec: OperatorSpec) -> None:
        if spec.name in self._specs:
            raise ValueError(f"operator {spec.name!r} registered twice")
        self._specs[spec.name] = spec

    def get(self, name: str) -> OperatorSpec:
        return self._specs[name]

    def names(self) -> list[str]:
        return list(self._specs)

    def specs(self) -> list[OperatorSpec]:
        return list(self._specs.values())


def operator_options(spec: OperatorSpec, opts: RunOptions) -> OperatorOptions:
    """`spec`'s own parsed options (its options type's defaults when `opts` was parsed without it)."""
    own = opts.operators.get(spec.name)
    return own if isinstance(own, spec.options) else spec.options()


def foreign_mode_options(spec: OperatorSpec, opts: RunOptions) -> list[str]:
    """The mode options the user set that `spec` does not declare (field names)."""
    own = spec.options.mode_option_names()
    return [name for name in opts.mode_options_given() if name not in own]


def check_mode_options(spec: OperatorSpec, opts: RunOptions) -> None:
    """Mode options of `--op X` must be X's own: `--local-matmul` with `--op quant_batch_matmul_mx` is an
    error naming both."""
    for name in foreign_mode_options(spec, opts):
        have = ", ".join(option_name(f) for f in spec.options.mode_option_names()) or "no mode options"
        raise OptionError(f"{option_name(name)} does not apply to --op {spec.name} (its mode options: {have})")


def host_request(registry: Registry, opts: RunOptions) -> Callable[[], str] | None:
    """The host-only printout the options of `--op` ask for (a call returning its text), else None."""
    if opts.op is None or opts.op not in registry.names():
        return None
    spec = registry.get(opts.op)
    own = operator_options(spec, opts)
    printer = spec.host_print
    if printer is None or not own.host_only():
        return None
    return lambda: printer(own, opts)


def _shape(spec: OperatorSpec, opts: RunOptions) -> Shape:
    base = spec.quick_shape if opts.quick else spec.default_shape
    return Shape(opts.m or base.m, (opts.k or base.k) if base.k else 0, (opts.n or base.n) if base.n else 0)


def _dtype(spec: OperatorSpec, opts: RunOptions) -> ElemFormat | None:
    if not spec.dtypes:
        return None
    if opts.dtype is None:
        return spec.dtypes[0]
    if opts.dtype not in spec.dtypes:
        raise OptionError(f"--dtype {opts.dtype.value}: {spec.name} supports {', '.join(d.value for d in spec.dtypes)}")
    return opts.dtype


def operator_cases(spec: OperatorSpec, opts: RunOptions, *, base_modes: Sequence[OperatorMode] | None = None,
                   shape: Shape | None = None, dtype: ElemFormat | None = None,
                   seed: int | None = None) -> tuple[list[Case], list[OperatorMode]]:
    """(cases to run, modes dropped because they must reproduce a hazard and --hazards is off)."""
    if base_modes is None:
        base_modes = [*spec.modes, *(spec.hazard_modes if opts.hazards else ())]
    if foreign_mode_options(spec, opts):   # a mode option of another operator: none of this one's modes has it
        return [], []
    overrides = operator_options(spec, opts).mode_overrides()
    selectors = spec.options.selector_names()
    seen: list[OperatorMode] = []
    for m in base_modes:
        mm = m.with_overrides(overrides, selectors)
        if mm is not None and mm not in seen:
            seen.append(mm)
    cases: list[Case] = []
    held_back: list[OperatorMode] = []
    shp = shape or _shape(spec, opts)
    dt = dtype if dtype is not None else _dtype(spec, opts)
    for m in seen:
        expect = spec.expectation(m)
        if expect.is_hazard and not opts.hazards:
            held_back.append(m)
            continue
        timeout = opts.timeout
        if timeout is None and expect.may_deadlock:
            timeout = spec.deadlock_timeout_s
        cases.append(Case(spec.name, m, shp, dt, opts.seed if seed is None else seed, expect, timeout))
    # Hazard cases last, those that may deadlock at the very end: they may leave a peer state behind.
    cases.sort(key=lambda c: (c.expect.may_deadlock, c.expect.is_hazard))
    return cases, held_back


def plan_cases(registry: Registry, opts: RunOptions) -> list[Case]:
    """The cases `opts` selects (identical on every rank). Raises OptionError when nothing matches."""
    if opts.op is not None:
        if opts.op not in registry.names():
            raise OptionError(f"--op {opts.op!r}: not a registered operator; choose one of "
                              f"{', '.join(registry.names())}")
        check_mode_options(registry.get(opts.op), opts)
        specs = [registry.get(opts.op)]
    else:
        specs = registry.specs()
        if opts.dtype is not None:
            specs = [s for s in specs if not s.dtypes or opts.dtype in s.dtypes]
    cases: list[Case] = []
    held: list[str] = []
    for spec in specs:
        c, h = operator_cases(spec, opts)
        cases += c
        held += [f"{spec.name} {m.impl_name()} {m.label()}".replace("  ", " ") for m in h]
    cases.sort(key=lambda c: (c.expect.may_deadlock, c.expect.is_hazard))
    if not cases:
        if held:
            raise OptionError("the selected modes must reproduce a hazard (" + "; ".join(held) +
                              "): add --hazards to run them as the expected-hazard showcase")
        raise OptionError("no scenario matches the options (see --list)")
    return cases


def shape_only(inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A protocol-only run's inputs: tensors as Payloads of their shape and dtype; host-side integer lists (GMM's
    group_list, on which host and kernel branch) stay values."""
    return {name: a if a.dtype.kind in "iu" and a.dtype.itemsize > 1 else Payload(a.shape, a.dtype)  # type: ignore[misc]
            for name, a in inputs.items()}

