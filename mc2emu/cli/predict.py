"""`--predict`: run an operator in each of its knob settings with the predictor's recorder, replay the records
on the DAV_3510 cost model, and recommend the setting with the shortest predicted device time.

Operator-agnostic: an operator offers its sweep as `OperatorSpec.predict_knobs(shape, size)` (A2A: localMatmul
x head tile; QBMM: block_dim; AG: wait order x block_dim); everything else goes through the spec's own
make_inputs / execute and the event records (`mc2emu.predict`).

    table = predict_operator(spec, Shape(512, 512, 1024))          # collective over MPI.COMM_WORLD
    print(format_predict_table(table))

Per knob, on every rank: inputs, the call with a `PredictRecorder` (checks off by default: the hazard checkers
add nothing to the prediction), one gather of every rank's records to rank 0, which replays them. A knob whose
tiling breaks a rule (ConstraintError on every rank) is a refused row, not an error. The finished table is
broadcast, so every rank returns the same table.

`repeat=N` (`--predict --repeat N`): per knob a loop of N calls back to back, as `--repeat` runs them: a
collective operator's on one `Communicator` (stream order, no host barrier), replayed as one stream
(`replay(stream=True)`), so ranks drift and a launch may wait on a peer still in the launch before; a one-NPU
operator's launches follow each other on its stream (the loop is their sum). The row's time is the loop's;
`PredictRow.loop` has every launch (`mc2emu.predict.loop`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mc2emu.arch.errors import ConstraintError, Mc2EmuError
from mc2emu.cli.options import OptionError, window_offsets
from mc2emu.cli.runner import quiet_allgather, quiet_bcast
from mc2emu.cli.scenarios import (
    Case,
    ExecContext,
    Knob,
    OperatorSpec,
    Shape,
    check_mode_options,
    operator_options,
    shape_only,
)
from mc2emu.comm.communicator import Communicator
from mc2emu.launcher import idle_barrier
from mc2emu.numerics.formats import ElemFormat
from mc2emu.predict import DEFAULT_COST_MODEL, CostModel, Prediction, PredictRecorder, gather_records, replay
from mc2emu.predict.loop import LoopPrediction, chain_loop, format_loop, loop_of
from mc2emu.runtime.events import Event

US = 1e6
# Critical-path categories named in the table (the largest first), at most this many.
PATH_PARTS = 2


@dataclass(frozen=True)
class PredictRow:
    """One knob setting: its prediction, or why it did not run (`refused`)."""

    knob: Knob
    total_s: float | None = None
    comm_s: float = 0.0
    hidden_share: float | None = None
    cube_utilisation: float = 0.0
    critical: tuple[tuple[str, float], ...] = ()
    refused: str = ""
    wall_s: float = 0.0
    loop: LoopPrediction | None = None   # with repeat: the loop's launches (total_s is the loop's time)

    @property
    def ok(self) -> bool:
        return self.total_s is not None


@dataclass
class PredictTable:
    op: str
    shape: Shape
    dtype: ElemFormat | None
    ranks: int
    model: CostModel
    rows: list[PredictRow]
    repeat: int | None = None   # None: one call per knob; N: a loop of N calls per knob
    # rank 0 only, with keep_records: the replay and the records of each row (None for refused rows)
    predictions: list[Prediction | None] = field(default_factory=list, repr=False)
    records: list[dict[int, tuple[int, list[Event]]] | None] = field(default_factory=list, repr=False)

    def best(self) -> int | None:
        """Index of the row with the shortest predicted time (the first of equals), None if none ran."""
        ran = [i for i, r in enumerate(self.rows) if r.ok]
        return min(ran, key=lambda i: self.rows[i].total_s or 0.0) if ran else None


def _world(comm: Any) -> Any:
    if comm is not None:
        return comm
    from mpi4py import MPI

    return MPI.COMM_WORLD


def predict_operator(spec: OperatorSpec, shape: Shape, *, comm: Any = None, dtype: ElemFormat | None = None,
                     model: CostModel = DEFAULT_COST_MODEL, seed: int = 42, knobs: Sequence[Knob] | None = None,
                     timeout: float | None = None, check: bool = False, keep_records: bool = False,
                     data: bool = True, repeat: int | None = None,
                     window_offsets: Mapping[str, int] | None = None,
                     progress: Callable[[str], None] | None = None) -> PredictTable:
    """Predict every knob of `spec` (or `knobs`) for `shape` on this world (collective over `comm`, default
    MPI.COMM_WORLD); every rank returns the same table. `repeat=N`: per knob a loop of N calls (module
    docstring). `progress`: called on rank 0 with one line per knob as it is done."""
    if repeat is not None and (isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1):
        raise ConstraintError("repeat", f"repeat must be None or a positive number of calls, got {repeat!r}")
    comm = _world(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    if knobs is None:
        if spec.predict_knobs is None:
            raise ConstraintError("--predict", f"operator {spec.name} offers no knobs to compare")
        knobs = list(spec.predict_knobs(shape, size))
    dt = dtype if dtype is not None else (spec.dtypes[0] if spec.dtypes else None)
    rows: list[PredictRow] = []
    preds: list[Prediction | None] = []
    kept: list[dict[int, tuple[int, list[Event]]] | None] = []
    for knob in knobs:
        # Rank 0 replays the knob before (Python, minutes at production shapes) while the others would spin in the
        # next knob's first MPI collective, taking 15/16 of the CPUs from it at 16 ranks on 2: they sleep here.
        idle_barrier(comm)
        case = Case(spec.name, knob.mode, shape, dt, seed, timeout=timeout)
        reasons = spec.validate(case, size)
        refused = "; ".join(reasons)
        recs = [PredictRecorder()]
        t0 = time.perf_counter()
        if not refused:
            inputs = spec.make_inputs(case, rank, size)
            if not data:   # --protocol-only: the same record without tensor bytes
                inputs = shape_only(inputs)
            ctx = ExecContext(rank, size, observers=(recs[0],), check=check, timeout=timeout,
                              block_dim=knob.block_dim, comm=comm, data=data)
            if repeat is None:
                refused = _call(spec, case, inputs, ctx)
            elif spec.collective:
                refused = _stream_loop(spec, case, inputs, ctx, repeat, window_offsets)
            else:   # one NPU: each call its own device, the launches one after the other on its stream
                recs = [PredictRecorder() for _ in range(repeat)]
                refused = next((r for r in (_call(spec, case, inputs, replace(ctx, observers=(x,))) for x in recs)
                                if r), "")
        wall = time.perf_counter() - t0
        refusals = quiet_allgather(comm, refused)
        refused = next((r for r in refusals if r), "")
        gathers = [gather_records(comm, x, root=0) for x in recs] if not refused else None
        if rank != 0:
            continue
        if refused or gathers is None or gathers[0] is None:
            rows.append(PredictRow(knob, refused=refused, wall_s=wall))
            if progress is not None:
                progress(f"  {len(rows)}/{len(knobs)} {knob.label()}: refused")
            preds.append(None)
            kept.append(None)
            continue
        gathered = gathers[0]
        loop: LoopPrediction | None = None
        if repeat is not None and len(gathers) > 1:
            singles = [replay(x, model) for x in gathers if x is not None]
            loop = chain_loop(singles)
            p = singles[0]
        else:
            p = replay(gathered, model, timeline=keep_records, stream=repeat is not None)
            loop = loop_of(p) if repeat is not None else None
        crit = tuple(sorted(((k, v) for k, v in p.critical_by_cat.items() if v > 0 and k != "mark"),
                            key=lambda kv: -kv[1]))
        total = loop.total_s if loop is not None else p.total_s
        rows.append(PredictRow(knob, total, p.comm_s, p.hidden_share, p.cube_utilisation, crit, wall_s=wall,
                               loop=loop))
        if progress is not None:
            progress(f"  {len(rows)}/{len(knobs)} {knob.label()}: {total * US:.2f} us predicted ({p.events} events;"
                     f" run {wall:.1f} s, gather + replay {time.perf_counter() - t0 - wall:.1f} s)")
        preds.append(p if keep_records else None)
        kept.append(gathered if keep_records else None)
    rows = quiet_bcast(comm, rows if rank == 0 else None)
    return PredictTable(spec.name, shape, dt, size, model, rows, repeat, preds if rank == 0 else [],
                        kept if rank == 0 else [])


def _call(spec: OperatorSpec, case: Case, inputs: dict[str, Any], ctx: ExecContext) -> str:
    """One call; its refusal ("" when it ran)."""
    try:
        spec.execute(case, inputs, ctx)
    except ConstraintError as exc:
        return str(exc)
    except Mc2EmuError as exc:
        return f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
    return ""


def _stream_loop(spec: OperatorSpec, case: Case, inputs: dict[str, Any], ctx: ExecContext, repeat: int,
                 window_offsets: Mapping[str, int] | None) -> str:
    """`repeat` calls back to back on one new `Communicator` (as `--repeat` runs them), closed after; the first
    refusal ("" when every call ran)."""
    stream = Communicator(ctx.comm, check=ctx.check, timeout=ctx.timeout, data=ctx.data,
                          window_offsets=window_offsets)
    ctx = replace(ctx, comm=stream)
    refused = ""
    try:
        for it in range(repeat):
            refused = _call(spec, case, inputs, ctx)
            if refused:
                refused = f"iteration {it} of {repeat}: {refused}"
                break
    finally:   # collective unless a call failed (its harness marked the communicator failed: no barrier then)
        stream.close()
    return refused


# -- output -----------------------------------------------------------------------------------------------------
def _fmt_us(s: float | None) -> str:
    return "-" if s is None else f"{s * US:.2f}"


def format_predict_table(t: PredictTable) -> str:
    """The table and the recommendation (plain text)."""
    m = t.model
    head = (f"{t.op} {t.shape.label()}{' ' + t.dtype.value if t.dtype else ''} on {t.ranks} rank(s): predicted "
            f"device time on {m.platform.name} (clock {m.clock_hz / 1e9:.2f} GHz, GM {m.gm_bw / 1e12:.1f} TB/s, "
            f"link {m.link_bw / 1e12:.1f} TB/s, put latency {m.put_latency_s * US:.1f} us; docs/predict.md)")
    if t.repeat is not None:
        head += (f"\nper setting a loop of {t.repeat} launch(es) back to back on one stream (predicted us: the loop, "
                 f"first begin to last end; comm, hidden, cube util and critical path: over the loop, for a one-NPU "
                 f"operator its first launch)")
    keys = list(dict.fromkeys(k for r in t.rows for k in r.knob.values)) or ["mode"]
    best = t.best()
    best_s = t.rows[best].total_s if best is not None else None
    cols = [*keys, "predicted us", "vs best", "comm us", "hidden", "cube util", "critical path"]
    body: list[list[str]] = []
    for r in t.rows:
        vals = [str(r.knob.values.get(k, r.knob.mode.label() if k == "mode" else "-")) for k in keys]
        if not r.ok:
            body.append([*vals, "-", "-", "-", "-", "-", f"refused: {r.refused}"])
            continue
        assert r.total_s is not None and best_s is not None
        ratio = r.total_s / best_s if best_s > 0 else 1.0
        path = ", ".join(f"{k} {v * US:.2f}" for k, v in r.critical[:PATH_PARTS])
        body.append([*vals, _fmt_us(r.total_s), f"{ratio:.2f}x", _fmt_us(r.comm_s),
                     "-" if r.hidden_share is None else f"{r.hidden_share:.0%}", f"{r.cube_utilisation:.0%}", path])
    widths = [max(len(c), *(len(b[i]) for b in body)) if body else len(c) for i, c in enumerate(cols)]
    lines = [head, "  ".join(c.ljust(w) for c, w in zip(cols, widths, strict=True)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(b, widths, strict=True)).rstrip() for b in body]
    lines.append(recommendation(t))
    if best is not None and t.rows[best].loop is not None:
        loop = t.rows[best].loop
        assert loop is not None
        lines.append(format_loop(loop, f"the loop of the recommended setting ({t.rows[best].knob.label()}), per "
                                       f"launch:"))
    return "\n".join(lines)


def recommendation(t: PredictTable) -> str:
    best = t.best()
    if best is None:
        return "recommend: nothing (no setting ran)"
    r = t.rows[best]
    ran = [x.total_s for x in t.rows if x.total_s is not None]
    worst = max(ran)
    assert r.total_s is not None
    gain = f", {worst / r.total_s:.2f}x faster than the slowest" if r.total_s > 0 and worst > r.total_s else ""
    top = f"; its critical path is mostly {r.critical[0][0]}" if r.critical else ""
    return f"recommend: {r.knob.label()} ({_fmt_us(r.total_s)} us predicted{gain}{top})"


def write_plot(t: PredictTable, path: Path) -> Path:
    """Predicted time vs the knob (PNG or SVG by suffix). Needs matplotlib (`pip install mc2emu[plot]`)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as exc:
        raise ConstraintError("--plot", "needs matplotlib: pip install 'mc2emu[plot]'") from exc
    keys = list(dict.fromkeys(k for r in t.rows for k in r.knob.values))
    fig, ax = plt.subplots(figsize=(7, 4))
    ran = [r for r in t.rows if r.ok]
    if len(keys) >= 2:   # one line per value of the first knob over the second
        series: dict[object, list[tuple[Any, float]]] = {}
        for r in ran:
            series.setdefault(r.knob.values[keys[0]], []).append((r.knob.values[keys[1]], (r.total_s or 0) * US))
        for name, pts in series.items():
            xs, ys = zip(*sorted(pts, key=lambda p: str(p[0]) if not isinstance(p[0], int) else p[0]), strict=True)
            ax.plot(xs, ys, marker="o", label=f"{keys[0]} {name}")
        ax.set_xlabel(keys[1])
        ax.legend()
    else:
        labels = [r.knob.label() for r in ran]
        ax.bar(range(len(ran)), [(r.total_s or 0) * US for r in ran])
        ax.set_xticks(range(len(ran)), labels, rotation=30, ha="right")
    ax.set_ylabel("predicted device time (us)")
    ax.set_title(f"{t.op} {t.shape.label()} on {t.ranks} rank(s)")
    fig.tight_layout()
    path = Path(path)
    fig.savefig(path)
    plt.close(fig)
    return path


def parse_cost_overrides(items: Sequence[str]) -> CostModel:
    """`NAME=VALUE` pairs (CostModel field names, float values) over the default model."""
    changes: dict[str, float | int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        try:
            v = float(value)
        except ValueError:
            v = math.nan
        if not sep or not math.isfinite(v):
            raise ConstraintError("--cost", f"{item!r}: give NAME=NUMBER, e.g. link_bw=4e12")
        name = name.strip()
        default = getattr(DEFAULT_COST_MODEL, name, None)
        changes[name] = int(v) if isinstance(default, int) and v.is_integer() else v
    return DEFAULT_COST_MODEL.with_overrides(**changes) if changes else DEFAULT_COST_MODEL


# -- the command line -------------------------------------------------------------------------------------------
EXIT_OK, EXIT_NOTHING_RAN = 0, 1


def _knobs_for(spec: OperatorSpec, shape: Shape, size: int, opts: Any) -> list[Knob]:
    """The operator's knobs narrowed by the user's mode options (`--local-matmul 1` keeps localMatmul 1) and
    `--block-dim` (given to knobs that leave it to the tiling)."""
    assert spec.predict_knobs is not None
    out = []
    filters = operator_options(spec, opts).mode_overrides()
    for k in spec.predict_knobs(shape, size):
        if any(getattr(k.mode, name, None) not in (None, value) for name, value in filters.items()):
            continue
        if k.block_dim is None and opts.block_dim is not None:
            k = Knob(k.mode, opts.block_dim, k.values)
        out.append(k)
    return out


def run_predict(opts: Any, registry: Any, comm: Any, say: Any) -> int:
    """`python -m mc2emu.run --predict [--op X] ...` on every rank; rank 0 prints (through `say`)."""
    rank, size = comm.Get_rank(), comm.Get_size()
    if opts.op is not None:
        if opts.op not in registry.names():
            names = ", ".join(registry.names())
            raise OptionError(f"--op {opts.op!r}: not a registered operator; choose one of {names}")
        spec = registry.get(opts.op)
        if spec.predict_knobs is None:
            have = ", ".join(s.name for s in registry.specs() if s.predict_knobs is not None)
            raise OptionError(f"--predict: {opts.op} offers no knobs to compare (operators that do: {have})")
        check_mode_options(spec, opts)
        specs = [spec]
    else:
        specs = [s for s in registry.specs() if s.predict_knobs is not None]
    try:
        model = parse_cost_overrides(opts.cost)
    except ConstraintError as exc:
        raise OptionError(str(exc)) from None
    ran = 0
    for spec in specs:
        base = spec.quick_shape if opts.quick else spec.default_shape
        shape = Shape(opts.m or base.m, (opts.k or base.k) if base.k else 0, (opts.n or base.n) if base.n else 0)
        dtype = opts.dtype if opts.dtype is not None and opts.dtype in spec.dtypes else None
        knobs = _knobs_for(spec, shape, size, opts)
        if not knobs:
            raise OptionError(f"--predict: the mode options leave no knob of {spec.name} to compare")
        loops = f", a loop of {opts.repeat} launches each" if opts.repeat > 1 else ""
        say(f"mc2emu: predicting {spec.name} {shape.label()}: {len(knobs)} setting(s){loops} on {size} rank(s)")
        table = predict_operator(spec, shape, comm=comm, dtype=dtype, model=model, seed=opts.seed, knobs=knobs,
                                 timeout=opts.timeout, check=False, keep_records=opts.trace is not None,
                                 data=not opts.protocol_only, repeat=opts.repeat if opts.repeat > 1 else None,
                                 window_offsets=window_offsets(opts), progress=say)
        ran += sum(1 for r in table.rows if r.ok)
        say(format_predict_table(table))
        if rank == 0:
            suffix = f".{spec.name}" if len(specs) > 1 else ""
            if opts.plot is not None:
                p = Path(opts.plot)
                say(f"plot: {write_plot(table, p.with_name(p.stem + suffix + p.suffix))}")
            best = table.best()
            if opts.trace is not None and best is not None:
                from mc2emu.predict.virtual_trace import write_virtual_trace

                tp = Path(opts.trace)
                pred, recs = table.predictions[best], table.records[best]
                assert pred is not None and recs is not None
                out = write_virtual_trace(tp.with_name(tp.stem + suffix + tp.suffix), pred, recs,
                                          title=f"{spec.name} {table.rows[best].knob.label()}")
                say(f"trace: {out} (the recommended setting: device model and emulator wall time)")
    return EXIT_OK if ran else EXIT_NOTHING_RAN
