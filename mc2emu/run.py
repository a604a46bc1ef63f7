"""`mpirun -n 8 python -m mc2emu.run` — the main job: every available operator x impl x valid mode at a
moderate shape, checks on, compared with its golden; one progress line per case and one table (rank 0).

Started without mpirun, it relaunches itself under the installed `mpiexec` with `--np` ranks (default 8).
`--hazards` adds the expected-hazard showcase (each hazard must be reported); `--list` shows the
registry. Cases an operator cannot run at this world size are listed as not applicable, the rest runs.
Exit code: 0 all that ran pass, 1 a mismatch with the golden, 2 bad input or options (or nothing can run at
this world size), 3 a hazard or a deadlock (or an expected one that was not reported). See docs/cli.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
import traceback
from typing import TYPE_CHECKING, Any

from mc2emu.launcher import RANK_ENV, mpiexec_command, under_mpirun

if TYPE_CHECKING:  # the cli modules load numpy: imported in main(), after the BLAS thread pinning
    from mc2emu.cli.options import RunOptions
    from mc2emu.cli.scenarios import Registry

# Exit code for bad options; the runtime's EXIT_BAD_INPUT, repeated so that option errors need no numpy.
EXIT_OPTIONS = 2
EXIT_INTERNAL = 3


def _err(text: str) -> None:
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()


def _out(text: str) -> None:
    sys.stdout.write(text.rstrip("\n") + "\n")
    sys.stdout.flush()


def _world_rank() -> int:
    from mpi4py import MPI

    return MPI.COMM_WORLD.Get_rank()


def _relaunch(argv: list[str], np_: int) -> int:
    cmd, env = mpiexec_command(np_, ["-m", "mc2emu.run", *argv])
    try:
        return subprocess.run(cmd, env=env, check=False).returncode
    except KeyboardInterrupt:
        return EXIT_INTERNAL


def _run_ranks(opts: RunOptions, registry: Registry) -> int:
    from mpi4py import MPI

    from mc2emu.cli.options import OptionError
    from mc2emu.cli.runner import CaseRunner, Planned, PlanSplit, Watchdog, plan_replay, split_plan, validate_plan
    from mc2emu.cli.scenarios import plan_cases

    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    if opts.predict:
        return _run_predict(opts, registry, comm)
    if opts.source_cases is not None:
        return _run_source_cases(opts, comm)
    if opts.scenario == "layers":
        return _run_layers(opts, comm)
    try:
        if opts.inputs is not None:  # a replay runs every dumped case or none
            split = PlanSplit(plan_replay(registry, opts, size), 0, {})
            reasons = validate_plan(registry, split.runnable, size)
        else:  # the suite: the cases that cannot run at this world size are listed, the rest runs
            plan = [Planned(c) for c in plan_cases(registry, opts)]
            split = split_plan(registry, plan, size)
            reasons = [] if split.runnable else validate_plan(registry, plan, size)
        if reasons:
            raise OptionError("; ".join(reasons))
    except OptionError as exc:
        if rank == 0:
            _err(f"mc2emu: {exc}")
        return EXIT_OPTIONS
    watchdog = Watchdog(comm, sys.stderr)
    runner = CaseRunner(registry, opts, comm, sys.stdout, sys.stderr, watchdog)
    checks = "checks on" if opts.check else "checks off"
    extra = f", perturb seed {opts.perturb}" if opts.perturb is not None else ""
    left = f", {split.skipped} not applicable" if split.skipped else ""
    runner.say(f"mc2emu: {len(split.runnable)} case(s) on {size} rank(s){left}, {checks}{extra}")
    for line in split.lines(size):
        runner.say(line)
    try:
        return runner.run(split.runnable, split.skipped)
    except BaseException as exc:  # a bug here must end every rank, never leave the others in a collective
        _err(f"mc2emu: rank {rank}: internal error, aborting every rank:\n"
             + "".join(traceback.format_exception(exc)))
        comm.Abort(EXIT_INTERNAL)
        return EXIT_INTERNAL
    finally:
        watchdog.stop()


def _run_predict(opts: RunOptions, registry: Registry, comm: Any) -> int:
    from mc2emu.arch.errors import ConstraintError
    from mc2emu.cli.options import OptionError
    from mc2emu.cli.predict import run_predict

    rank = comm.Get_rank()

    def say(text: str) -> None:
        if rank == 0:
            _out(text)

    try:
        return run_predict(opts, registry, comm, say)
    except (OptionError, ConstraintError) as exc:   # raised identically on every rank (options, cost model)
        if rank == 0:
            _err(f"mc2emu: {exc}")
        return EXIT_OPTIONS
    except BaseException as exc:  # never leave the other ranks in a collective
        _err(f"mc2emu: rank {rank}: internal error, aborting every rank:\n" + "".join(traceback.format_exception(exc)))
        comm.Abort(EXIT_INTERNAL)
        return EXIT_INTERNAL


def _run_layers(opts: RunOptions, comm: Any) -> int:
    """The layer loops (`--scenario layers`, mc2emu/cli/layers.py)."""
    from mc2emu.cli.layers import run_layers
    from mc2emu.cli.options import chains_calling, window_offsets

    rank = comm.Get_rank()

    def say(text: str) -> None:
        if rank == 0:
            _out(text)

    first = opts.perturb if opts.perturb is not None else 0
    seeds: list[int | None] = [first + i for i in range(opts.seeds)]
    try:
        return run_layers(comm, opts.layers, seeds, opts.timeout, say, check=opts.check,
                          window_offsets=window_offsets(opts), data=not opts.protocol_only,
                          chains=chains_calling(opts.op))
    except BaseException as exc:  # never leave the other ranks in a collective
        _err(f"mc2emu: rank {rank}: the layer loop failed, aborting every rank:\n"
             + "".join(traceback.format_exception(exc)))
        comm.Abort(EXIT_INTERNAL)
        return EXIT_INTERNAL


def _run_source_cases(opts: RunOptions, comm: Any) -> int:
    """The source's case tables replayed (`comm` None: a host-only replay, this process alone)."""
    from mc2emu.cli.source_cases import replay

    rank = comm.Get_rank() if comm is not None else 0

    def say(text: str) -> None:
        if rank == 0:
            _out(text)

    try:
        return replay(opts, comm, say)
    except BaseException as exc:  # never leave the other ranks in a collective
        _err(f"mc2emu: rank {rank}: internal error, aborting every rank:\n" + "".join(traceback.format_exception(exc)))
        if comm is not None:
            comm.Abort(EXIT_INTERNAL)
        return EXIT_INTERNAL


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    mpi = under_mpirun()
    # BLAS threads must be pinned before numpy loads (8 ranks x threaded BLAS on 2 cores: 13x slower).
    for var, value in RANK_ENV.items():
        os.environ.setdefault(var, value)

    from mc2emu.arch.errors import ConstraintError
    from mc2emu.cli.operators import default_registry
    from mc2emu.cli.options import OptionError, help_text, parse_options
    from mc2emu.cli.report import format_listing
    from mc2emu.cli.scenarios import host_request, plan_cases
    from mc2emu.cli.source_cases import check_options, needs_ranks

    rank = _world_rank() if mpi else 0
    try:
        registry = default_registry()    # an operator module that does not import is an error, never skipped
        opts = parse_options(args, registry.specs(), __doc__ or "")
        check_options(opts)
    except OptionError as exc:
        if rank == 0:
            _err(f"mc2emu: {exc}")
        return EXIT_OPTIONS
    if opts.help:
        if rank == 0:
            _out(help_text(registry.specs(), __doc__ or ""))
        return 0
    printout = host_request(registry, opts)
    if printout is not None:  # an operator's host-only printout: no relaunch, no MPI
        try:
            text = printout()
        except ConstraintError as exc:
            if rank == 0:
                _err(f"mc2emu: {exc}")
            return EXIT_OPTIONS
        if rank == 0:
            _out(text)
        return 0
    if opts.list:
        if rank == 0:
            _out(format_listing(registry))
        return 0
    if opts.source_cases is not None and not needs_ranks(opts):
        return _run_source_cases(opts, None) if rank == 0 else 0
    if not mpi:
        if opts.inputs is None and not opts.predict and opts.source_cases is None and opts.scenario is None:
            try:
                plan_cases(registry, opts)  # fail fast, before starting any rank
            except OptionError as exc:
                _err(f"mc2emu: {exc}")
                return EXIT_OPTIONS
        return _relaunch(args, opts.np)
    return _run_ranks(opts, registry)


if __name__ == "__main__":
    sys.exit(main())
