"""Local memory of a protocol-only run: real bytes for control values, a mark for payload bytes.

A core's UB holds both: status words a kernel compares, and tiles of tensor data it only moves. In a
protocol-only run (`data=False`) every local buffer is a `LocalRegion`: a numpy view of the core's real (small,
capacity-bounded) bytes plus one flag per byte, "holds payload". Storing a `Payload` (a read of an
unmaterialized GM allocation) into a region marks its bytes and copies nothing; storing real values clears the
mark. Arithmetic over marked bytes gives a `Payload`; a scalar of marked bytes (an element, `float`, `int`,
`bool`, `item`) raises `PayloadValueError` naming the line; anything over unmarked bytes runs on the real bytes
as in a full run. Full-data runs never make a `LocalRegion`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from mc2emu.numerics.payload import Payload, is_payload, payload_function, payload_ufunc, refuse


class _LocalBytes:
    """The real bytes of one local memory and their payload marks."""

    __slots__ = ("buf", "marks")

    def __init__(self, nbytes: int) -> None:
        self.buf = np.zeros(nbytes, dtype=np.uint8)
        self.marks = np.zeros(nbytes, dtype=bool)


def local_bytes(nbytes: int) -> LocalRegion:
    """A fresh local memory of `nbytes` zero bytes, none marked, as a uint8 `LocalRegion`."""
    mem = _LocalBytes(int(nbytes))
    region = mem.buf.view(LocalRegion)
    region._mem = mem
    return region


def _plain(x: Any) -> Any:
    return x.view(np.ndarray) if isinstance(x, LocalRegion) else x


def _with_ellipsis(idx: Any) -> Any:
    """`idx` extended so that indexing returns a view even where it selects one element."""
    if isinstance(idx, tuple):
        return idx if any(i is Ellipsis for i in idx) else (*idx, Ellipsis)
    return idx if idx is Ellipsis else (idx, Ellipsis)


class LocalRegion(np.ndarray):
    """A view of a core's local bytes that knows which of them hold payload (module docstring)."""

    _mem: _LocalBytes | None = None

    def __array_finalize__(self, obj: Any) -> None:
        self._mem = getattr(obj, "_mem", None)

    # -- the payload marks under this view --------------------------------------------------------------------
    def _marks(self) -> np.ndarray | None:
        mem = self._mem
        if mem is None or self.size == 0:
            return None
        base = mem.buf.__array_interface__["data"][0]
        off = self.__array_interface__["data"][0] - base
        if off < 0 or off >= mem.buf.size or any(s < 0 for s in self.strides):
            return None   # not a view of the local bytes (a copy made elsewhere): plain values
        return np.lib.stride_tricks.as_strided(mem.marks[off:], (*self.shape, self.itemsize), (*self.strides, 1))

    def holds_payload(self) -> bool:
        marks = self._marks()
        return marks is not None and bool(marks.any())

    def mark_payload(self) -> None:
        marks = self._marks()
        if marks is not None:
            marks[...] = True

    def _mark_known(self) -> None:
        marks = self._marks()
        if marks is not None:
            marks[...] = False

    def _check(self, what: str) -> None:
        if self.holds_payload():
            raise refuse(what)

    # -- stores and loads -----------------------------------------------------------------------------------------
    def __setitem__(self, idx: Any, value: Any) -> None:
        target = np.ndarray.__getitem__(self, _with_ellipsis(idx))
        if is_payload(value):
            if not isinstance(target, LocalRegion):
                raise refuse("a value stored into a plain array")
            target.mark_payload()
            return
        np.ndarray.__setitem__(self.view(np.ndarray), idx, _plain(value))
        if isinstance(target, LocalRegion):
            target._mark_known()

    def __getitem__(self, idx: Any) -> Any:
        out = np.ndarray.__getitem__(self, idx)
        if not isinstance(out, np.ndarray):
            view = np.ndarray.__getitem__(self, _with_ellipsis(idx))
            if isinstance(view, LocalRegion) and view.holds_payload():
                raise refuse("a scalar of local memory")
        return out

    def __bool__(self) -> bool:
        self._check("a branch condition")
        return bool(self.view(np.ndarray))

    def __int__(self) -> int:
        self._check("an int")
        return int(self.view(np.ndarray))

    def __float__(self) -> float:
        self._check("a float")
        return float(self.view(np.ndarray))

    def __index__(self) -> int:
        self._check("an index")
        return self.view(np.ndarray).__index__()

    def item(self, *args: Any) -> Any:
        self._check("a scalar (item())")
        return self.view(np.ndarray).item(*args)

    def tolist(self) -> Any:
        self._check("a list (tolist())")
        return self.view(np.ndarray).tolist()

    def tobytes(self, order: Any = "C") -> bytes:
        self._check("bytes (tobytes())")
        return self.view(np.ndarray).tobytes(order)

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Any:
        if self.holds_payload():
            return Payload(self.shape, dtype)
        return self.view(np.ndarray).astype(dtype, *args, **kwargs)

    def copy(self, order: Any = "C") -> Any:
        if self.holds_payload():
            return Payload(self.shape, self.dtype)
        return self.view(np.ndarray).copy(order)

    # -- numpy: payload in, payload out; else the real bytes ---------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        if any(is_payload(x) for x in inputs):
            return payload_ufunc(ufunc, method, inputs, kwargs)
        outs = kwargs.get("out")
        if outs is not None:
            kwargs["out"] = tuple(_plain(o) for o in outs)
        result = getattr(ufunc, method)(*(_plain(x) for x in inputs), **kwargs)
        if outs is None:
            return result
        for o in outs:
            if isinstance(o, LocalRegion):
                o._mark_known()
        return outs[0] if len(outs) == 1 else outs

    def __array_function__(self, func: Any, types: Any, args: Any, kwargs: Any) -> Any:
        flat = [a for arg in args for a in (arg if isinstance(arg, (list, tuple)) else (arg,))]
        if any(is_payload(a) for a in (*flat, *kwargs.values())):
            return payload_function(func, args, kwargs)
        plain = tuple([_plain(a) for a in arg] if isinstance(arg, list) else
                      tuple(_plain(a) for a in arg) if isinstance(arg, tuple) else _plain(arg) for arg in args)
        result = func(*plain, **{k: _plain(v) for k, v in kwargs.items()})
        if func is np.copyto and isinstance(args[0], LocalRegion):
            args[0]._mark_known()
        return result
