"""The scenario registry: operators, their modes, and how the command line turns them into cases.

An operator plugs in with one `OperatorSpec` (see `mc2emu/cli/operators/`): its valid modes (the
default suite), its expected-hazard showcase modes, the rules that say which hazard a mode must reproduce,
its shapes, and five callables (available, make_inputs, golden, execute, compare). Nothing here tests
an operator or mode by name.

From options to cases (`plan_cases`):
1. operators: `--op` or every registered operator whose implementation imports;
2. modes: the operator's valid modes, plus its hazard modes with `--hazards`;
3. `--impl` keeps the modes of that impl; every other mode option the user set (`--local-matmul`,
   `--wait-order`, `--hccl-server`) replaces that field in each mode that has it; a mode without the
   field (e.g. the self-check, or udma for `--hccl-server`) is dropped; duplicates are merged;
4. each resulting mode is classified by the operator's rules: a mode that must reproduce a hazard runs
   only with `--hazards` (otherwise it is dropped, and if nothing is left the error says so);
5. shape: `--m/--k/--n` over the operator's default (or `--quick`) shape; dtype: `--dtype` or the first
   the operator lists.
"""

from __future__ import annotations

import dataclasses
import enum
import importlib
import inspect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from mc2emu.cli.options import HcclServer, Impl, OptionError, RunOptions
from mc2emu.numerics.formats import ElemFormat
from mc2emu.tiling.all_to_all_quant_matmul_tiling import WaitOrder

Arrays = dict[str, np.ndarray]


# Mode fields the command line selects by (a mode with another value is dropped); the others it overrides.
SELECTORS = frozenset({"impl"})


@dataclass(frozen=True)
class Mode:
    """How an operator runs. None = the field does not apply to the operator (e.g. the self-check)."""

    impl: Impl | None = None
    local_matmul: int | None = None
    wait_order: WaitOrder | None = None
    hccl_server: HcclServer | None = None
    bias: bool = False
    atomic: bool = False   # compile-time atomic write-out (QBMM's MatmulWithScaleMx<.., atomic>)
    batch: int = 1         # leading batch of x1 (QBMM's multi-batch path when > 1)
    comm_tiles: int = 0    # communication tiles per rank's row block (MC2 operators; 0: the CANN ST rule)
    revision: str | None = None  # a kernel source revision other than the operator's default (QBMM)

    def with_overrides(self, overrides: Mapping[str, object]) -> Mode | None:
        """This mode with the user's mode options applied; None if one of them does not apply here or a
        selector (`SELECTORS`: the impl, whose modes have different fields) differs."""
        for name, value in overrides.items():
            have = getattr(self, name)
            if have is None or (name in SELECTORS and have != value):
                return None
        return dataclasses.replace(self, **overrides)  # type: ignore[arg-type]

    def label(self) -> str:
        parts = []
        if self.local_matmul is not None:
            parts.append(f"lm{self.local_matmul}")
        if self.wait_order is not None:
            parts.append(self.wait_order.value)
        if self.hccl_server is not None:
            parts.append(self.hccl_server.value)
        if self.bias:
            parts.append("+bias")
        if self.revision is not None:
            parts.append(f"rev {self.revision}")
        if self.atomic:
            parts.append("atomic")
        if self.batch != 1:
            parts.append(f"batch{self.batch}")
        if self.comm_tiles:
            parts.append(f"{self.comm_tiles}tiles")
        return " ".join(parts) or "-"

    def slug(self) -> str:
        return "-".join(p.replace("+", "") for p in [self.impl.value if self.impl else "", *self.label().split()]
                        if p and p != "-")

    def as_dict(self) -> dict[str, Any]:
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Mode:
        conv: dict[str, Callable[[Any], Any]] = {"impl": Impl, "wait_order": WaitOrder, "hccl_server": HcclServer,
                                                 "local_matmul": int, "bias": bool, "atomic": bool, "batch": int,
                                                 "comm_tiles": int}
        kw: dict[str, Any] = {k: (None if d.get(k) is None else conv[k](d[k])) for k in conv if k in d}
        return cls(**kw)


def _plain(v: Any) -> Any:
    return v.value if isinstance(v, enum.Enum) else v


@dataclass(frozen=True)
class Expect:
    """What a case must produce: nothing special (a pass), or these hazards / a caught deadlock.

    - `hang_ok`: timing may turn the case into a hang (e.g. block 0 finalizing HCCL while another AIC
      still waits, which under AICPU then hangs): a caught deadlock also reproduces it.
    - `optional`: whether the hazard happens at all depends on timing: a clean, correct run passes."""

    hazards: frozenset[str] = frozenset()
    deadlock: bool = False
    hang_ok: bool = False
    optional: bool = False

    @property
    def is_hazard(self) -> bool:
        return self.deadlock or bool(self.hazards)

    @property
    def may_deadlock(self) -> bool:
        return self.deadlock or self.hang_ok

    def label(self) -> str:
        names = sorted(self.hazards) + (["DEADLOCK"] if self.deadlock else [])
        text = ", ".join(names) or "pass"
        if self.hang_ok and not self.deadlock:
            text += " or DEADLOCK"
        return f"{text} (if timing allows)" if self.optional else text


PASS = Expect()


@dataclass(frozen=True)
class ModeRule:
    """`when` maps Mode fields to a value or a tuple of accepted values; the first matching rule wins."""

    when: Mapping[str, object]
    expect: Expect
    why: str = ""

    def matches(self, mode: Mode) -> bool:
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
    """Output vs golden: `ok` under the operator's rule; max abs error and max bf16 ULP when defined."""

    ok: bool
    max_abs: float | None = None
    max_ulp: int | None = None
    note: str = ""


@dataclass(frozen=True)
class ExecContext:
    """What `execute` gets besides the inputs."""

    rank: int
    size: int
    observers: tuple[Callable[[Any], None], ...] = ()
    check: bool = True
    timeout: float | None = None
    perturb: Any = None
    block_dim: int | None = None
    comm: Any = None


@dataclass(frozen=True)
class Case:
    """One planned run of one operator in one mode on one shape."""

    op: str
    mode: Mode
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

    - available(): None when the implementation imports, else the reason it does not.
    - make_inputs(case, rank, size): this rank's inputs (named arrays, the names of `input_names`).
    - golden(case, inputs, comm): this rank's expected output (may be collective on `comm`; every rank
      calls it whatever the op did), or None when there is none.
    - execute(case, inputs, ctx): run the operator on this rank, return its output; raise the runtime's
      errors (ConstraintError, HazardError with .output, DeadlockError).
    - compare(out, golden): the operator's acceptance rule.
    - validate(case, size): reasons the case cannot run at this world size (checked before any run).
    """

    name: str
    summary: str
    available: Callable[[], str | None]
    make_inputs: Callable[[Case, int, int], Arrays]
    golden: Callable[[Case, Arrays, Any], np.ndarray | None]
    execute: Callable[[Case, Arrays, ExecContext], np.ndarray]
    compare: Callable[[np.ndarray, np.ndarray | None], Comparison]
    modes: tuple[Mode, ...] = (Mode(),)
    hazard_modes: tuple[Mode, ...] = ()
    rules: tuple[ModeRule, ...] = ()
    default_shape: Shape = Shape(1)
    quick_shape: Shape = Shape(1)
    dtypes: tuple[ElemFormat, ...] = ()
    input_names: tuple[str, ...] = ()
    validate: Callable[[Case, int], list[str]] = field(default=lambda case, size: [])
    # Deadline for cases that may deadlock by design when the user gave no --timeout (keeps them short).
    deadlock_timeout_s: float = 5.0

    def expectation(self, mode: Mode) -> Expect:
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


def import_available(module: str, attr: str) -> Callable[[], str | None]:
    """An `available` callable: the operator is there when `module` imports and has `attr`."""

    def available() -> str | None:
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:
            return f"{module} does not import ({exc})"
        except Exception as exc:  # a half-written module must not break the suite of the others
            return f"{module} failed to import: {type(exc).__name__}: {exc}"
        return None if hasattr(mod, attr) else f"{module} has no {attr}"

    return available


def resolve(module: str, attr: str) -> Callable[..., Any]:
    """`module.attr` (imported on first use, so a registry entry costs nothing until it runs)."""
    return getattr(importlib.import_module(module), attr)


def call_accepting(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """`fn(*args, **kwargs)` without the keyword arguments `fn` does not take (optional hooks such as
    `observers` or `perturb` that an operator may not offer yet)."""
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    return fn(*args, **kwargs)


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


def operator_cases(spec: OperatorSpec, opts: RunOptions, *, base_modes: Sequence[Mode] | None = None,
                   shape: Shape | None = None, dtype: ElemFormat | None = None,
                   seed: int | None = None) -> tuple[list[Case], list[Mode]]:
    """(cases to run, modes dropped because they must reproduce a hazard and --hazards is off)."""
    if base_modes is None:
        base_modes = [*spec.modes, *(spec.hazard_modes if opts.hazards else ())]
    overrides = opts.mode_filters()
    seen: list[Mode] = []
    for m in base_modes:
        mm = m.with_overrides(overrides)
        if mm is not None and mm not in seen:
            seen.append(mm)
    cases: list[Case] = []
    held_back: list[Mode] = []
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
        why = registry.get(opts.op).available()
        if why:
            raise OptionError(f"--op {opts.op}: not available yet: {why}")
        specs = [registry.get(opts.op)]
    else:
        specs = [s for s in registry.specs() if s.available() is None]
        if opts.dtype is not None:
            specs = [s for s in specs if not s.dtypes or opts.dtype in s.dtypes]
    cases: list[Case] = []
    held: list[str] = []
    for spec in specs:
        c, h = operator_cases(spec, opts)
        cases += c
        held += [f"{spec.name} {m.impl.value if m.impl else ''} {m.label()}".replace("  ", " ") for m in h]
    cases.sort(key=lambda c: (c.expect.may_deadlock, c.expect.is_hazard))
    if not cases:
        if held:
            raise OptionError("the selected modes must reproduce a hazard (" + "; ".join(held) +
                              "): add --hazards to run them as the expected-hazard showcase")
        raise OptionError("no scenario matches the options (see --list)")
    return cases
