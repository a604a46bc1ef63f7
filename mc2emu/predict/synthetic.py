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
from collections.abc import Callable
from typing import Any

from mc2emu.runtime.comm_events import BarrierObserve, BarrierStore, Put, Quiet
from mc2emu.runtime.events import (
    CoreBegin,
    CoreEnd,
    Event,
    Fixpipe,
    FlagConsume,
    FlagRaise,
    FlagSet,
    GmRead,
    LaunchBegin,
    LaunchEnd,
    Mmad,
)

_ROUND_NS = 1_000_000_000
_BARRIER = "team_barrier"


def _load(buffer: str, nbytes: int) -> dict[str, Any]:
    """The fields of a GM read of `nbytes` contiguous bytes."""
    return dict(buffer=buffer, lo=0, hi=nbytes, offset=0, shape=(nbytes,), strides=(1,), item=1)


def synthetic_a2a(ranks: int, rounds: int = 2, *, aics: int = 4, mmads: int = 2, put_bytes: int = 4096,
                  tile: tuple[int, int, int] = (128, 128, 128), load_bytes: int = 16384,
                  fmt: str = "e4m3") -> dict[int, list[Event]]:
    """{rank: records} of one launch on `ranks` ranks (see the module docstring)."""
    out: dict[int, list[Event]] = {}
    for r in range(ranks):
        seq = itertools.count(1)
        t = itertools.count(1)
        recs: list[Event] = []

        def ev(cls: Callable[..., Event], core: str, round_: int = -1, r: int = r, recs: list[Event] = recs,
               seq: Any = seq, t: Any = t, **fields: Any) -> None:
            recs.append(cls(r, core, (round_ + 1) * _ROUND_NS + next(t), next(seq), **fields))

        aivs = [f"AIV{j}" for j in range(ranks)]
        ev(LaunchBegin, "host", launch="a2a", block_dim=aics, kernel_type="MIX_AIC_1_1")
        for j in range(aics):
            ev(CoreBegin, f"AIC{j}", launch="a2a")
        for a in aivs:
            ev(CoreBegin, a, launch="a2a")
        set_id = itertools.count(1)
        token = itertools.count(1)
        for rd in range(rounds):
            for j, a in enumerate(aivs):
                if j != r:
                    ev(GmRead, a, rd, **_load("x1", put_bytes))
                    ev(Put, a, rd, window="win", offset=r * put_bytes, nbytes=put_bytes, src_rank=r, pe=j, op_seq=0)
                    ev(Quiet, a, rd, src_rank=r, op_seq=0)
                ev(BarrierStore, a, rd, barrier=_BARRIER, slot=j, value=rd + 1)
                if j != r:
                    ev(BarrierObserve, a, rd, barrier=_BARRIER, peer=j, slot=r, value=rd + 1)
            sources = []
            for a in aivs:
                sid = next(set_id)
                sources.append((a, sid))
                ev(FlagSet, a, rd, fid=14, mode=0, pipe="PIPE_MTE3", set_id=sid)
            toks = {}
            for a in aivs:
                toks[a] = next(token)
                ev(FlagRaise, aivs[-1], rd, target=a, fid=14, count=1, mode=0, mode4=False, token=toks[a],
                   sources=tuple(sources))
            for a in aivs:
                ev(FlagConsume, a, rd, fid=14, count=0, mode=0, token=toks[a])
            for j in range(min(aics, ranks)):
                sid, tok = next(set_id), next(token)
                ev(FlagSet, aivs[j], rd, fid=rd, mode=2, pipe="PIPE_MTE3", set_id=sid)
                ev(FlagRaise, aivs[j], rd, target=f"AIC{j}", fid=rd, count=1, mode=2, mode4=False, token=tok,
                   sources=((aivs[j], sid),))
                core = f"AIC{j}"
                ev(FlagConsume, core, rd, fid=rd, count=0, mode=2, token=tok)
                for _ in range(mmads):
                    ev(GmRead, core, rd, **_load("win", load_bytes))
                    ev(GmRead, core, rd, **_load("x2", load_bytes))
                    ev(Mmad, core, rd, m=tile[0], n=tile[1], k=tile[2], tile=(0, 0), l0=0, aType=fmt, unitFlag=3,
                       cmatrixInitVal=True, bias=False)
                ev(Fixpipe, core, rd, tensor="C", origin=(0, 0), m=tile[0], n=tile[1], l0cOffset=0, dtype="bfloat16",
                   atomic=False, unitFlag=3)
        for j in range(aics):
            ev(CoreEnd, f"AIC{j}", rounds, launch="a2a")
        for a in aivs:
            ev(CoreEnd, a, rounds, launch="a2a")
        ev(LaunchEnd, "host", rounds, launch="a2a", block_dim=aics)
        out[r] = recs
    return out
