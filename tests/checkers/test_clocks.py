"""The happens-before check's vector clocks against a brute-force closure of the same graph.

`_Clocks(entities, lengths, preds)`: event (ent, pos) happens after (ent, pos - 1) and after each of its sources
`preds[(r, core, pos)]`. An event is swept when its program-order predecessor and all its sources are (events on
or after a cycle never are); a swept event's clock counts, per entity, the events of that entity that happen
before or at it."""

import numpy as np
import pytest

from mc2emu.check.happens_before_clocks import _Clocks


def _random_graph(rng, cycles):
    entities = [(int(r), f"C{c}") for r in range(int(rng.integers(1, 3))) for c in range(int(rng.integers(1, 4)))]
    lengths = {ent: int(rng.integers(0, 12)) for ent in entities}
    events = [(ent, p) for ent in entities for p in range(lengths[ent])]
    preds = {}
    for ent, p in events:
        if rng.random() < 0.35:
            others = [(e, q) for e, q in events if e != ent]
            if not cycles:
                # sources only among earlier "times": a DAG (time = position, ties broken by entity order)
                others = [(e, q) for e, q in others if (q, entities.index(e)) < (p, entities.index(ent))]
            if others:
                k = int(rng.integers(1, min(3, len(others)) + 1))
                picks = rng.choice(len(others), size=k, replace=False)
                preds[(*ent, p)] = [(*others[int(i)][0], others[int(i)][1]) for i in picks]
            else:
                preds[(*ent, p)] = []   # an event whose source list is empty (a Wait no Set reached)
    return entities, lengths, preds


def _brute(entities, lengths, preds):
    """(swept prefix per entity, clock per swept event) by fixpoint and by walking every event's ancestry."""
    swept = set()
    changed = True
    while changed:
        changed = False
        for ent in entities:
            for p in range(lengths[ent]):
                if (ent, p) in swept:
                    continue
                srcs = preds.get((*ent, p), [])
                if (p == 0 or (ent, p - 1) in swept) and all(((s[0], s[1]), s[2]) in swept for s in srcs):
                    swept.add((ent, p))
                    changed = True
    prefix = {ent: sum(1 for p in range(lengths[ent]) if (ent, p) in swept) for ent in entities}
    clocks = {}
    for ent, p in swept:
        seen, stack = set(), [(ent, p)]
        while stack:
            e, q = stack.pop()
            if (e, q) in seen:
                continue
            seen.add((e, q))
            if q > 0:
                stack.append((e, q - 1))
            stack.extend(((s[0], s[1]), s[2]) for s in preds.get((*e, q), []))
        clocks[(ent, p)] = [max((q + 1 for e, q in seen if e == other), default=0) for other in entities]
    return prefix, clocks


def test_clocks_equal_the_closure_of_random_graphs_with_and_without_cycles():
    rng = np.random.default_rng(11)
    for trial in range(300):
        entities, lengths, preds = _random_graph(rng, cycles=trial % 3 == 0)
        prefix, clocks = _brute(entities, lengths, preds)
        if trial % 2:
            # the check hands tuples (one per distinct source list, shared, joined once by identity)
            preds = {node: tuple(srcs) for node, srcs in preds.items()}
        got = _Clocks(entities, lengths, preds)
        for ent in entities:
            assert got.swept(ent) == prefix[ent], (trial, ent)
            for p in range(prefix[ent]):
                assert list(got.at(ent, p)) == clocks[(ent, p)], (trial, ent, p)
                assert [got.component(ent, p, j) for j in range(len(entities))] == clocks[(ent, p)]


def test_clocks_over_tracked_entities_equal_the_closure_on_them():
    """`tracked`: clocks of those components only (one rank's check reads the cores that put into it and its
    own readers): on them every swept event's clock equals the full closure's; the sweep is unchanged."""
    rng = np.random.default_rng(12)
    for trial in range(300):
        entities, lengths, preds = _random_graph(rng, cycles=trial % 3 == 0)
        prefix, clocks = _brute(entities, lengths, preds)
        keep = [i for i in range(len(entities)) if rng.random() < 0.5]
        tracked = [entities[i] for i in keep]
        got = _Clocks(entities, lengths, preds, tracked=tracked)
        assert got.n == len(tracked) and list(got.index) == tracked
        for ent in entities:
            assert got.swept(ent) == prefix[ent], (trial, ent)
            for p in range(prefix[ent]):
                want = [clocks[(ent, p)][i] for i in keep]
                assert list(got.at(ent, p)) == want, (trial, ent, p)
                assert [got.component(ent, p, j) for j in range(len(keep))] == want


def test_a_two_entity_cycle_leaves_both_unswept_from_the_cycle_on():
    a, b = (0, "AIC0"), (1, "AIV0")
    # a1 waits on b1, b1 waits on a1: neither can be ordered; a0 and b0 are.
    clocks = _Clocks([a, b], {a: 3, b: 2}, {(0, "AIC0", 1): [(1, "AIV0", 1)], (1, "AIV0", 1): [(0, "AIC0", 1)]})
    assert (clocks.swept(a), clocks.swept(b)) == (1, 1)
    assert list(clocks.at(a, 0)) == [1, 0] and list(clocks.at(b, 0)) == [0, 1]


def test_a_wait_sees_everything_before_its_source_and_nothing_after():
    a, b = (0, "AIV0"), (0, "AIC0")
    # b2 acquires a1 (the Set); a's later events do not reach b.
    clocks = _Clocks([a, b], {a: 4, b: 4}, {(0, "AIC0", 2): [(0, "AIV0", 1)]})
    assert list(clocks.at(b, 1)) == [0, 2]
    assert list(clocks.at(b, 2)) == [2, 3]
    assert list(clocks.at(b, 3)) == [2, 4]
    assert list(clocks.at(a, 3)) == [4, 0]


@pytest.mark.parametrize("kind", [list, tuple])
def test_rounds_of_an_all_to_all_barrier_share_one_source_list(kind):
    """SyncAll-like rounds: every core's Set of round t, then every core's Wait sourced by all the Sets of
    round t (one source list shared by every waiter; as a tuple, the object the check shares), checked
    against the closure."""
    entities = [(r, f"AIV{c}") for r in range(2) for c in range(3)]
    rounds = 3
    lengths = dict.fromkeys(entities, 2 * rounds)
    preds = {}
    for t in range(rounds):
        sets = kind((*ent, 2 * t) for ent in entities)
        for ent in entities:
            preds[(*ent, 2 * t + 1)] = sets
    prefix, clocks = _brute(entities, lengths, preds)
    got = _Clocks(entities, lengths, preds)
    assert all(got.swept(ent) == 2 * rounds == prefix[ent] for ent in entities)
    for ent in entities:
        for p in range(2 * rounds):
            assert list(got.at(ent, p)) == clocks[(ent, p)]
    # after round t's Wait, every core has seen every core's Set of round t
    assert list(got.at(entities[0], 3)) == [4, 3, 3, 3, 3, 3]


def _chained_graph(rng, cycles):
    """A random graph whose entities are the launches of a few cores (`C0@0`, `C0@1`, ...): each launch's first
    event has the last event of every core's previous launch among its sources (stream order)."""
    entities, lengths, preds = _random_graph(rng, cycles)
    launches = int(rng.integers(1, 4))
    cores = sorted({ent for ent in entities})
    ents = [(r, f"{c}@{k}") for k in range(launches) for r, c in cores]
    lengths = {(r, f"{c}@{k}"): max(1, lengths[(r, c)]) for k in range(launches) for r, c in cores}
    out = {}
    for (r, c, p), srcs in preds.items():
        for k in range(launches):
            if p < lengths[(r, f"{c}@{k}")]:
                out[(r, f"{c}@{k}", p)] = [(sr, f"{sc}@{k}", sp) for sr, sc, sp in srcs
                                           if sp < lengths[(sr, f"{sc}@{k}")]]
    for k in range(1, launches):
        for r, c in cores:
            ends = [(rr, f"{cc}@{k - 1}", lengths[(rr, f"{cc}@{k - 1}")] - 1) for rr, cc in cores if rr == r]
            out[(r, f"{c}@{k}", 0)] = [*out.get((r, f"{c}@{k}", 0), []), *ends]
    chains = [[(r, f"{c}@{k}") for k in range(launches)] for r, c in cores]
    return ents, lengths, out, chains


def test_chained_launches_share_a_component_and_equal_the_closure():
    """`chains`: a core's launches on one rank, stream-ordered, count on one component (event p of launch k at
    offset + p): every swept event's clock equals the closure summed over each chain (the latest event of the
    chain at or before it), with and without `tracked`, and `happens_before` equals reachability."""
    rng = np.random.default_rng(13)
    for trial in range(200):
        entities, lengths, preds, chains = _chained_graph(rng, cycles=trial % 4 == 0)
        prefix, clocks = _brute(entities, lengths, preds)
        offset = {}
        for chain in chains:
            total = 0
            for ent in chain:
                offset[ent] = total
                total += lengths[ent]
        keep = [c for c in chains if trial % 2 == 0 or rng.random() < 0.5]
        tracked = [ent for c in keep for ent in c[:1]] if trial % 2 else None
        got = _Clocks(entities, lengths, preds, tracked=tracked, chains=chains)
        assert got.n == len(keep)
        for ent in entities:
            assert got.swept(ent) == prefix[ent], (trial, ent)
            for p in range(prefix[ent]):
                full = dict(zip(entities, clocks[(ent, p)], strict=True))
                want = [max(offset[e] + full[e] if full[e] else 0 for e in c) for c in keep]
                assert list(got.at(ent, p)) == want, (trial, ent, p)
                for c in keep:
                    for a in c:
                        for q in range(lengths[a]):
                            assert got.happens_before(a, q, ent, p) == (full[a] >= q + 1), (trial, a, q, ent, p)
