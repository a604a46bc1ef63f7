"""`--dump DIR` / `--inputs DIR`: each rank's inputs and outputs of a case as `rank{r}.npz`.

File layout (numpy .npz, no pickles):
- every array is stored as its raw codes, unsigned integers of the element width (float8 / float4 /
  E8M0 -> uint8, bfloat16 / float16 -> uint16, float32 -> uint32, ...), so formats numpy does not know
  survive any reader;
- `__meta__`: a JSON string: {"format": 1, "case": {op, mode, shape, dtype, seed}, "case_id", "rank",
  "ranks", "arrays": {name: {"dtype": <numpy / ml_dtypes name>, "role": "input" | "output" | "golden"}}}.

A suite of several cases writes `DIR/<case_id>/rank{r}.npz`; a single case writes `DIR/rank{r}.npz`.
`--inputs DIR` reads either layout.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

DUMP_FORMAT = 1
META_KEY = "__meta__"
_CODE_DTYPES = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


class DumpError(Exception):
    """A dump file is missing, unreadable or does not match the run."""


def rank_file(directory: Path, rank: int) -> Path:
    return directory / f"rank{rank}.npz"


def encode_array(a: np.ndarray) -> tuple[np.ndarray, str]:
    """(unsigned codes of the same shape, dtype name)."""
    arr = np.ascontiguousarray(a)
    code = _CODE_DTYPES.get(arr.dtype.itemsize)
    if code is None or arr.dtype.kind in "OUS" or arr.dtype.fields is not None:
        raise DumpError(f"cannot store dtype {arr.dtype} as codes")
    return arr.view(code), arr.dtype.name


def dtype_of(name: str) -> np.dtype:
    ml = getattr(ml_dtypes, name, None)
    if ml is not None:
        return np.dtype(ml)
    try:
        return np.dtype(name)
    except TypeError:
        raise DumpError(f"unknown dtype name {name!r} in a dump file") from None


def decode_array(codes: np.ndarray, name: str) -> np.ndarray:
    dt = dtype_of(name)
    if codes.dtype.itemsize != dt.itemsize:
        raise DumpError(f"codes of width {codes.dtype.itemsize} cannot hold {name} ({dt.itemsize} bytes)")
    return codes.view(dt)


@dataclass(frozen=True)
class CaseFile:
    arrays: dict[str, np.ndarray]
    roles: dict[str, str]
    meta: dict[str, Any]

    def of_role(self, role: str) -> dict[str, np.ndarray]:
        return {k: v for k, v in self.arrays.items() if self.roles.get(k) == role}


def save_case(path: Path, arrays: Mapping[str, tuple[np.ndarray, str]], meta: Mapping[str, Any]) -> Path:
    """Write `arrays` (name -> (array, role)) and `meta` to `path`."""
    path.parent.mkdir(parents=True, exist_ok=True)
    payload: dict[str, np.ndarray] = {}
    info: dict[str, dict[str, str]] = {}
    for name, (arr, role) in arrays.items():
        if name == META_KEY:
            raise DumpError(f"array name {META_KEY} is reserved")
        codes, dtname = encode_array(np.asarray(arr))
        payload[name] = codes
        info[name] = {"dtype": dtname, "role": role}
    full = {**meta, "format": DUMP_FORMAT, "arrays": info}
    payload[META_KEY] = np.array(json.dumps(full, sort_keys=True))
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, **payload)  # type: ignore[arg-type]  # numpy's stub types **kwds as the allow_pickle flag
    tmp.replace(path)
    return path


def read_meta(path: Path) -> dict[str, Any]:
    try:
        with np.load(path, allow_pickle=False) as z:
            meta = json.loads(str(z[META_KEY][()]))
    except (OSError, KeyError, ValueError) as exc:
        raise DumpError(f"{path}: not an mc2emu dump ({exc})") from None
    if meta.get("format") != DUMP_FORMAT:
        raise DumpError(f"{path}: dump format {meta.get('format')!r}, this reader knows {DUMP_FORMAT}")
    return meta


def load_case(path: Path) -> CaseFile:
    meta = read_meta(path)
    arrays: dict[str, np.ndarray] = {}
    roles: dict[str, str] = {}
    with np.load(path, allow_pickle=False) as z:
        for name, info in meta["arrays"].items():
            arrays[name] = decode_array(z[name], info["dtype"])
            roles[name] = info["role"]
    return CaseFile(arrays, roles, meta)


def case_dirs(directory: Path) -> list[Path]:
    """The case directories of a dump: DIR itself when it holds rank0.npz, else its subdirectories that
    do (sorted by name)."""
    if rank_file(directory, 0).is_file():
        return [directory]
    subs = sorted(p for p in directory.iterdir() if p.is_dir() and rank_file(p, 0).is_file())
    if not subs:
        raise DumpError(f"{directory}: no rank0.npz in it or in its subdirectories (write one with --dump)")
    return subs
