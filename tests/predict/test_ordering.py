"""Happens-before over recorded events (`mc2emu.predict.ordering`) on synthetic UDMA all-to-all records: what the
synchronization orders (a round's quiets before the MMADs its flag releases, program order), what it leaves
concurrent (two AICs, two AIVs' transfers that only a link's FIFO queued, the next round's puts and this
round's MMADs), and that a cycle is refused."""

from __future__ import annotations

import dataclasses

import pytest

from mc2emu.predict import ReplayError
from mc2emu.predict.ordering import event_order
from mc2emu.predict.synthetic import synthetic_a2a
from mc2emu.runtime.comm_events import Put, Quiet
from mc2emu.runtime.events import FlagConsume, FlagRaise, FlagSet, Mmad


def nodes(order, rank, core, kind, nth=None):
    """Graph nodes of the records of class `kind` of (rank, core), in program order (the nth only when given)."""
    out = [order.node_of[pos] for pos, r in enumerate(order.records)
           if r.rank == rank and r.core == core and isinstance(r, kind) and pos in order.node_of]
    return out if nth is None else out[nth]


@pytest.fixture(scope="module")
def order():
    return event_order(synthetic_a2a(3, rounds=2, aics=2, mmads=2))


def test_a_round_of_puts_happens_before_the_mmads_its_flag_releases(order):
    """AIV j quiets its round-0 put, joins the SyncAll, Sets flag 0 to AIC j: every round-0 quiet of the rank
    is before every round-0 MMAD of its AICs, and program order keeps AIC0's MMADs in order."""
    quiets = [nodes(order, 0, core, Quiet, 0) for core in ("AIV1", "AIV2")]
    for aic in ("AIC0", "AIC1"):
        mm = nodes(order, 0, aic, Mmad)
        assert len(mm) == 4
        assert all(order.before(q, m) for q in quiets for m in mm[:2])
        assert order.before(mm[0], mm[3]) and not order.before(mm[3], mm[0])


def test_what_nothing_waits_for_is_concurrent(order):
    mm0 = nodes(order, 0, "AIC0", Mmad)
    mm1 = nodes(order, 0, "AIC1", Mmad)
    assert order.concurrent(mm0[0], mm1[0])            # two AICs released by the same SyncAll
    # the transfers of AIV1 and AIV2 of rank 0 (round 0) leave through one egress link: the replay queues them,
    # nothing synchronizes them
    t1, t2 = nodes(order, 0, "AIV1", Put, 0), nodes(order, 0, "AIV2", Put, 0)
    assert order.concurrent(t1, t2)
    # the AIVs never wait for the AICs: round-1 puts overlap round-0 MMADs
    assert order.concurrent(nodes(order, 0, "AIV1", Put, 1), mm0[1])
    assert not order.concurrent(mm0[0], mm0[0])


def test_records_that_contradict_each_other_are_refused():
    recs = synthetic_a2a(2, rounds=1, aics=1, mmads=1)
    # a Wait whose raise needs a Set recorded after the Wait on the same core: a cycle
    r0 = recs[0]
    wait = next(r for r in r0 if isinstance(r, FlagConsume) and r.core == "AIC0")
    late = FlagSet(wait.rank, wait.core, wait.t_ns, r0[-1].seq + 1, fid=9, mode=2, pipe="PIPE_FIX", set_id=999)
    i = next(i for i, r in enumerate(r0) if isinstance(r, FlagRaise) and r.subject == "AIC0.flag0")
    r0[i] = dataclasses.replace(r0[i], sources=(("AIC0", 999),))
    recs[0] = [*r0[:-1], late, r0[-1]]
    with pytest.raises(ReplayError, match="cycle"):
        event_order(recs)
    with pytest.raises(ReplayError):
        event_order({})
