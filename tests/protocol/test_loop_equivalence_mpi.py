"""Protocol-only on a `Communicator`: a loop of launches back to back with `data=False` records the same events as
the full loop (tests/protocol/record.py, per core as multisets), its buffer holding only the control prefix for
real, and the cross-launch checks name the same hazards (QMRS per_block's by name). Any world size; toy shapes."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from record import Recorder, differences

from mc2emu.arch.errors import ConstraintError
from mc2emu.comm import Communicator
from mc2emu.numerics.payload import Payload
from mc2emu.ops.all_gather_quant_matmul_op import all_gather_quant_matmul
from mc2emu.ops.all_to_all_quant_matmul_op import all_to_all_quant_matmul
from mc2emu.ops.quant_matmul_reduce_scatter_op import quant_matmul_reduce_scatter
from mc2emu.runtime.hazards import DeadlockError, HazardError, Severity

E4M3, E8M0 = ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e8m0fnu
LAUNCHES = 2
HANG_RETRIES = 3
TIMEOUT_S = 60.0
BUFFER = 4 << 20
# The counter value a flag round leaves (FlagRaise / FlagConsume `count`) depends on whether the core consumed the
# round before when the next Set lands: arrival order (two full loops of rounds differ in it the same way).
ARRIVAL_ORDER = {"FlagRaise": "count", "FlagConsume": "count"}


def _protocol(events):
    """The record without the fields arrival order decides."""
    out = []
    for kind, core, fields in events:
        drop = ARRIVAL_ORDER.get(kind)
        out.append((kind, core, tuple(f for f in fields if f[0] != drop)))
    return out


def _world():
    from mpi4py import MPI
    return MPI.COMM_WORLD


def _mx(m: int, k: int, n: int) -> list[tuple[tuple[int, ...], object]]:
    pairs = -(-k // 64)
    return [((m, k), E4M3), ((m, pairs, 2), E8M0), ((n, k), E4M3), ((n, pairs, 2), E8M0)]


def _a2a(R: int, ori_m: int, ka: int, n: int) -> list[tuple[tuple[int, ...], object]]:
    pairs = -(-ka // 64)
    return [((R * ori_m, ka), E4M3), ((R * ori_m, pairs, 2), E8M0), ((n, R * ka), E4M3), ((n, R * pairs, 2), E8M0)]


def _loops(op, shapes, *, may_hang: bool = False, **kw):
    """Per data mode: (record, hazard names of the calls, hazard names of close(), the communicator's buffer).
    `may_hang` (a loop whose source can lose a status between launches): a hang is accepted only when its one
    report names LOST_SIGNAL, and returns None (every rank agrees)."""
    world = _world()
    rng = np.random.default_rng(11 + world.Get_rank())
    full_in = [rng.uniform(1, 8, s).astype(d) for s, d in shapes]
    out = []
    for data in (True, False):
        rec = Recorder()
        ins = full_in if data else [Payload(s, d) for s, d in shapes]
        comm = Communicator(world, buffer_size=BUFFER, timeout=TIMEOUT_S, data=data)
        held = comm.buffer.mem.shape[0]
        calls: set[str] = set()
        hung: DeadlockError | None = None
        try:
            for _ in range(LAUNCHES):
                try:
                    y = op(*ins, data=data, observers=[rec], comm=comm, **kw)
                except HazardError as err:
                    y = err.output
                    calls |= {h.hazard.name for h in err.hazards if h.severity is not Severity.WARNING}
                assert isinstance(y, Payload) == (not data)
        except DeadlockError as err:
            if not may_hang:
                raise
            hung = err
            comm.fail(str(err).splitlines()[0])
            comm.close()
        closing: set[str] = set()
        if hung is None:
            try:   # a peer still in the hung launch fails the closing barrier here
                closing = {h.hazard.name for h in comm.close() if h.severity is not Severity.WARNING}
            except DeadlockError as err:
                if not may_hang:
                    raise
                hung = err
        everyone = world.allgather(None if hung is None else (hung.declared_elsewhere, hung.report or str(hung)))
        if any(e is not None for e in everyone):
            reports = [text for e in everyone if e is not None and not e[0] for text in [e[1]]]
            assert len(reports) == 1 and "  LOST_SIGNAL: rank " in reports[0], everyone
            return None
        out.append((rec.events, calls, closing, held))
    return out


@pytest.mark.mpi(min_size=2)
@pytest.mark.parametrize("case", ["ag-seed", "ag-slot_ring", "a2a-udma", "a2a-hcomm", "qmrs-rounds"])
def test_a_correct_protocol_only_loop_records_the_full_loops_events(case):
    R = _world().Get_size()
    if case.startswith("ag"):
        (full, hf, cf, held_f), (proto, hp, cp, held_p) = _loops(
            all_gather_quant_matmul, _mx(48, 256, 96), protocol=case.split("-")[1], wait_order="in_order")
    elif case.startswith("a2a"):
        (full, hf, cf, held_f), (proto, hp, cp, held_p) = _loops(
            all_to_all_quant_matmul, _a2a(R, 48, 256, 160), impl=case.split("-")[1], wait_order="in_order")
    else:   # two rounds of 16 rows (at one round the loop is unsafe: docs/hazards.md "Between launches")
        (full, hf, cf, held_f), (proto, hp, cp, held_p) = _loops(
            quant_matmul_reduce_scatter, _mx(32 * R, 128, 48), impl="rounds", head_m_size=16, block_dim=R + 3)
    assert held_f == BUFFER and held_p == 1 << 20        # protocol-only: only the control prefix is real
    assert len(full) > 200 and sum(1 for e in full if e[0] == "LaunchBegin") == LAUNCHES
    # No hazard across the loop; within a call only the source's own FRAGMENT_OUT_OF_RANGE (AG's small-m blocks
    # straddle two ranks' regions at 4 ranks and more), the same in both runs.
    assert (cf, cp) == (set(), set()) and hf == hp and hf <= {"FRAGMENT_OUT_OF_RANGE"}
    assert differences(_protocol(full), _protocol(proto)) == []


@pytest.mark.mpi(min_size=2)
def test_per_block_protocol_only_loop_names_the_cross_launch_hazards():
    """QMRS per_block back to back (no barrier after ReadRemoteDataAdd, 4cecfe3b
    quant_matmul_reduce_scatter_impl.h:117-122, 233-267): the protocol-only loop, whose status words live in the
    buffer's real prefix, records the full loop's events and its closing check names the same hazards. The
    source's race can also lose a status for real (a peer's launch-1 SET landing before this rank's launch-0 reset:
    tests/check/test_cross_launch_qmrs_mpi.py makes it happen by seed); which loop it hits is thread timing, so a
    loop that hangs with LOST_SIGNAL named is run again, up to HANG_RETRIES times."""
    R = _world().Get_size()
    for _ in range(HANG_RETRIES):
        loops = _loops(quant_matmul_reduce_scatter, _mx(64 * R, 256, 96), may_hang=True,
                       impl="per_block", split="k", kernel_variant="final_wait")
        if loops is not None:
            break
    else:
        pytest.fail(f"the per_block loop hung (LOST_SIGNAL) in all {HANG_RETRIES} tries")
    (full, hf, cf, _), (proto, hp, cp, _) = loops
    assert {"LOST_SIGNAL", "WRITE_AFTER_READ_ACROSS_LAUNCH"} <= cf
    assert cp == cf and hp == hf
    assert differences(_protocol(full), _protocol(proto)) == []


@pytest.mark.mpi(min_size=2)
def test_status_words_past_the_real_prefix_are_refused():
    """per_block's status area (1 MB at its window's base) moved past a protocol-only buffer's real prefix: refused
    before its launch with the inequality, and the communicator stays usable."""
    world = _world()
    shapes = _mx(64 * world.Get_size(), 256, 96)
    ins = [Payload(s, d) for s, d in shapes]
    comm = Communicator(world, buffer_size=BUFFER, timeout=60.0, data=False, check=False,
                        window_offsets={"qmrs_hccl_window": 512})
    with pytest.raises(ConstraintError, match=r"512 \+ 1048576 = 1049088 > the 1048576 real bytes"):
        quant_matmul_reduce_scatter(*ins, impl="per_block", data=False, comm=comm, check=False)
    with pytest.raises(ConstraintError, match="data=True on a Communicator created with data=False"):
        quant_matmul_reduce_scatter(*ins, impl="rounds", comm=comm, check=False)
    quant_matmul_reduce_scatter(*ins, impl="rounds", data=False, comm=comm, check=False)
    comm.close()
