"""Synthetic records of a UDMA all-to-all matmul at any rank count (the replay's scale measurement and its
self-consistency tests; no emulator run needed).

The records follow the shape of what `PredictRecorder` records from `all_to_all_quant_matmul` (UDMA,
localMatmul 0): per round t, AIV j of rank r (j != r) loads and puts `put_bytes` to rank j, quiets, stores
its TeamBarrier slot and observes rank j's; every AIV then Sets a mode-0 SyncAll round (its raise records
every Set as a source) and consumes it; AIV j < `aics` Sets mode-2 flag t to AIC j, which consumes it, loads
its operands, runs `mmads` MMADs and one FIXPIPE. Wall times grow round by round on every rank, as they
would on one host.
"""

from __future__ import annotations

import itertools
from typing import Any

from mc2emu.trace.chrome_trace import TraceRecord

_ROUND_NS = 1_000_000_000
_BARRIER = "team_barrier"


def synthetic_a2a(ranks: int, rounds: int = 2, *, aics: int = 4, mmads: int = 2, put_bytes: int = 4096,
                  tile: tuple[int, int, int] = (128, 128, 128), load_bytes: int = 16384,
                  fmt: str = "e4m3") -> dict[int, list[TraceRecord]]:
    """{rank: records} of one launch on `ranks` ranks (see the module docstring)."""
    out: dict[int, list[TraceRecord]] = {}
    for r in range(ranks):
        seq = itertools.count(1)
        t = itertools.count(1)
        recs: list[TraceRecord] = []

        def ev(kind: str, core: str, obj: str = "", value: Any = None, round_: int = -1,
               r: int = r, recs: list[TraceRecord] = recs, seq: Any = seq, t: Any = t, **extra: Any) -> None:
            recs.append(TraceRecord(kind, r, core, (round_ + 1) * _ROUND_NS + next(t), next(seq), obj, value,
                                    extra))

        aivs = [f"AIV{j}" for j in range(ranks)]
        ev("launch_begin", "host", "a2a", aics, kernel_type="MIX_AIC_1_1")
        for j in range(aics):
            ev("core_begin", f"AIC{j}", "a2a")
        for a in aivs:
            ev("core_begin", a, "a2a")
        set_id = itertools.count(1)
        token = itertools.count(1)
        for rd in range(rounds):
            for j, a in enumerate(aivs):
                if j != r:
                    ev("gm_read", a, "x1", None, rd, nbytes=put_bytes)
                    ev("put", a, "win", put_bytes, rd, pe=j, src_rank=r, nbytes=put_bytes, window="win",
                       offset=r * put_bytes)
                    ev("quiet", a, "quiet", None, rd)
                ev("barrier", a, f"TeamBarrier.store({j})", rd + 1, rd, barrier=_BARRIER, slot=j, store=rd + 1)
                if j != r:
                    ev("barrier", a, f"TeamBarrier.observe({j})", rd + 1, rd, barrier=_BARRIER, peer=j, slot=r,
                       observed=rd + 1)
            sources = []
            for a in aivs:
                sid = next(set_id)
                sources.append([a, sid])
                ev("flag_set", a, "flag14", 0, rd, pipe="PIPE_MTE3", set_id=sid)
            toks = {}
            for a in aivs:
                toks[a] = next(token)
                ev("flag_raise", aivs[-1], f"{a}.flag14", 1, rd, token=toks[a], sources=sources, target=a, mode=0)
            for a in aivs:
                ev("flag_raise", a, f"{a}.flag14", 0, rd, token=toks[a], consumed=True, mode=0)
            for j in range(min(aics, ranks)):
                sid, tok = next(set_id), next(token)
                ev("flag_set", aivs[j], f"flag{rd}", 2, rd, pipe="PIPE_MTE3", set_id=sid)
                ev("flag_raise", aivs[j], f"AIC{j}.flag{rd}", 1, rd, token=tok, sources=[[aivs[j], sid]],
                   target=f"AIC{j}", mode=2)
                core = f"AIC{j}"
                ev("flag_raise", core, f"{core}.flag{rd}", 0, rd, token=tok, consumed=True, mode=2)
                for _ in range(mmads):
                    ev("gm_read", core, "win", None, rd, nbytes=load_bytes)
                    ev("gm_read", core, "x2", None, rd, nbytes=load_bytes)
                    ev("mmad", core, "mmad", list(tile), rd, aType=fmt)
                ev("fixpipe", core, "C", [0, 0, tile[0], tile[1]], rd, dtype="bfloat16")
        for j in range(aics):
            ev("core_end", f"AIC{j}", "a2a", None, rounds)
        for a in aivs:
            ev("core_end", a, "a2a", None, rounds)
        ev("launch_end", "host", "a2a", aics, rounds)
        out[r] = recs
    return out
