"""Step 3 of the deadlock diagnosis (`DeadlockDiagnosis._decide`): which declarer writes the one report,
from what this rank learned in its collection. Pure: no MPI."""

from __future__ import annotations

from mc2emu.check.deadlock import DeadlockDiagnosis, DiagnosisState, lost_signals


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


# -- lost signals: a wait against its releaser's last post (`lost_signals`) --------------------------------
F32_ONE = 0x3F80_0000      # the bits of 1.0f: per_block's status SET
F32_HALF = 0x3F00_0000     # its poll: >= bits(0.5f) on the low 32 bits
LOW32 = 0xFFFF_FFFF


def _lost(current, post, *, launch=3, value=F32_HALF, mask=LOW32, cmp=">="):
    waiting = {(0, "AIV1"): {"signal": ("status", 0x20, cmp, value, mask, launch), "current": current,
                             "waits_for": [(1, "*")]}}
    snaps = {0: {"posts": {}}, 1: {"posts": {} if post is None else {(0, "status", 0x20): post}}}
    return lost_signals(waiting, snaps)


def test_a_set_of_the_waits_launch_that_satisfies_it_and_is_gone_is_a_lost_signal():
    (line,) = _lost(0xDEAD_0000_0000_0000, (3, "AIV0", "SET", F32_ONE))
    assert line == ("  LOST_SIGNAL: rank 0 AIV1 waits (launch 3) for signal status+0x20 >= 0x3f000000; rank 1 AIV0 "
                    "SET it to 0x3f800000 in launch 3 and that post completed, yet the word reads "
                    "0xdead000000000000: a store on rank 0 overwrote the post after it landed (a reset of an earlier "
                    "launch racing the peer's next post: the wait can never pass)")


def test_no_lost_signal_without_the_evidence():
    one = (3, "AIV0", "SET", F32_ONE)
    assert _lost(0, None) == []                                   # the releaser never posted to the word
    assert _lost(0, (2, "AIV0", "SET", F32_ONE)) == []            # its last post is of an earlier launch
    assert _lost(0, (3, "AIV0", "ADD", F32_ONE)) == []            # an ADD: not judged from the last post alone
    assert _lost(0, (3, "AIV0", "SET", 0x3E00_0000)) == []        # the post itself does not satisfy the wait
    assert _lost(F32_ONE, one) == []                              # the word holds it: the wait passes next poll
    assert _lost(0xFFFF_FFFF_0000_0000 | F32_ONE, one) == []      # masked: the low half holds it
    assert _lost(0, (3, "AIV0", "SET", F32_ONE), cmp="==", value=F32_ONE) != []
    assert _lost("<unreadable>", one) == []                       # no value: no inference
