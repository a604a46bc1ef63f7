"""Step 3 of the deadlock diagnosis (`DeadlockDiagnosis._decide`): which declarer writes the one report,
from what this rank learned in its collection. Pure: no MPI."""

from __future__ import annotations

from mc2emu.check.deadlock import DeadlockDiagnosis, DiagnosisState


def _decide(me: int, replies: dict[int, tuple[DiagnosisState, int | None] | None], rivals=()) -> int:
    diag = DeadlockDiagnosis.__new__(DeadlockDiagnosis)   # the decision reads only rank and rivals
    diag.rank = me
    diag._rivals = set(rivals)
    snaps = {me: {"registry": []}}
    for q, reply in replies.items():
        snaps[q] = None if reply is None else {"state": reply[0].value, "defers_to": reply[1]}
    return diag._decide(snaps)


def test_alone_the_declarer_reports():
    assert _decide(2, {0: (DiagnosisState.IDLE, None), 1: None, 3: (DiagnosisState.IDLE, None)}) == 2


def test_the_lowest_collecting_declarer_reports_one_rank_higher_does_not():
    assert _decide(2, {1: (DiagnosisState.COLLECTING, None), 3: (DiagnosisState.IDLE, None)}) == 1
    assert _decide(2, {3: (DiagnosisState.COLLECTING, None), 1: (DiagnosisState.IDLE, None)}) == 2


def test_a_rank_that_reported_wins_even_over_a_lower_declarer():
    # rank 3 reported before rank 1 declared (rank 1 starved); rank 0 still collecting would be lower
    assert _decide(1, {3: (DiagnosisState.REPORTED, None), 0: (DiagnosisState.COLLECTING, None)}) == 3
    assert _decide(1, {3: (DiagnosisState.REPORTED, None), 2: (DiagnosisState.REPORTED, None)}) == 2


def test_a_deferred_rank_names_its_reporter_an_idle_or_deferred_rank_is_no_rival():
    # rank 3 deferred to rank 0, which did not answer this rank: rank 0 is still the reporter
    assert _decide(1, {0: None, 3: (DiagnosisState.DEFERRED, 0)}) == 0
    # a deferred rank itself never reports; an idle one never declared
    assert _decide(1, {0: (DiagnosisState.DEFERRED, 1), 2: (DiagnosisState.IDLE, None)}) == 1


def test_a_request_received_while_collecting_makes_its_sender_a_rival_even_without_its_reply():
    assert _decide(2, {0: None, 1: (DiagnosisState.IDLE, None)}, rivals={0}) == 0
    assert _decide(0, {1: None}, rivals={1}) == 0


def test_an_unanswered_rank_is_no_declarer():
    assert _decide(3, {0: None, 1: None, 2: None}) == 3
