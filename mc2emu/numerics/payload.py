"""`Payload`: the placeholder of tensor bytes a protocol-only run does not materialize.

A protocol-only run (`data=False`) keeps every allocation's size and role but no payload bytes; a read of them
returns a `Payload`: an array-like with the shape and dtype the bytes would have and no values. Slicing,
reshape, view, transpose, astype, numpy ufuncs (`np.matmul`, `+`, casts) and the array functions the kernels use
give Payloads of the result's shape and dtype at no cost proportional to the size; assigning into a Payload
does nothing. A value of it reaching a branch or a scalar (`bool`, `int`, `float`, `item`, `np.asarray`, an
index, a comparison that is tested) raises `PayloadValueError` naming the kernel line: a protocol-only run
never guesses a tensor value. Functions with no shape rule here raise the same error, naming the function.
"""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from mc2emu.arch.errors import Mc2EmuError

_NUMPY_DIR = os.path.dirname(np.__file__)
_MC2EMU_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Frames in these files are the placeholder machinery, not the line that used the value.
_MACHINERY = ("numerics/payload.py", "runtime/local_memory.py", "runtime/local_region.py", "runtime/gm.py")


class PayloadValueError(Mc2EmuError):
    """A payload value (unmaterialized in a protocol-only run) reached a branch or a scalar."""


def caller_line() -> str:
    """`file:line: source` of the innermost mc2emu (or user) frame outside numpy and the placeholder machinery."""
    frame = sys._getframe(1)
    while frame is not None:
        name = frame.f_code.co_filename
        if not name.startswith(_NUMPY_DIR) and not name.replace(os.sep, "/").endswith(_MACHINERY):
            import linecache
            src = linecache.getline(name, frame.f_lineno).strip()
            rel = os.path.relpath(name, os.path.dirname(_MC2EMU_DIR)) if name.startswith(_MC2EMU_DIR) else name
            return f"{rel}:{frame.f_lineno}: {src}"
        frame = frame.f_back  # type: ignore[assignment]
    return "<unknown line>"


def refuse(what: str) -> PayloadValueError:
    """The error of a payload value used as `what`, naming the line that used it."""
    return PayloadValueError(f"protocol-only run: a payload value (tensor bytes not materialized) is used as "
                             f"{what} at {caller_line()}; control flow must not depend on tensor values (give "
                             f"the allocation MemRole.CONTROL if the kernel branches on it)")


_F32, _U8 = np.dtype(np.float32), np.dtype(np.uint8)


def _basic_index_shape(shape: tuple[int, ...], idx: Any) -> tuple[int, ...] | None:
    """The shape of `x[idx]` for slices and integers (the kernels' tile slicing), or None (numpy decides)."""
    if type(idx) is tuple and len(idx) == 2 == len(shape):   # the tile loops' x[r0:r1, c0:c1]: one step
        a, b = idx
        if type(a) is slice and type(b) is slice and a.step is None and b.step is None:
            n0, n1 = shape
            a0, a1, b0, b1 = a.start, a.stop, b.start, b.stop
            if (a0 is None or (type(a0) is int and a0 >= 0)) and (a1 is None or (type(a1) is int and a1 >= 0)) and (
                    b0 is None or (type(b0) is int and b0 >= 0)) and (b1 is None or (type(b1) is int and b1 >= 0)):
                lo0 = 0 if a0 is None else min(a0, n0)   # non-negative bounds: clipped at the axis end
                lo1 = 0 if b0 is None else min(b0, n1)
                hi0 = n0 if a1 is None else min(a1, n0)
                hi1 = n1 if b1 is None else min(b1, n1)
                return max(hi0 - lo0, 0), max(hi1 - lo1, 0)
            return len(range(*a.indices(n0))), len(range(*b.indices(n1)))
    items = idx if isinstance(idx, tuple) else (idx,)
    if len(items) > len(shape):
        return None
    out: list[int] = []
    for n, it in zip(shape, items, strict=False):
        if isinstance(it, slice):
            out.append(len(range(*it.indices(n))))
        elif isinstance(it, (int, np.integer)) and not isinstance(it, bool) and -n <= it < n:
            continue
        else:
            return None
    return (*out, *shape[len(items):])


def _dummy(shape: Sequence[int], dtype: np.dtype) -> np.ndarray:
    """A zero-memory array of `shape` (every stride 0): basic indexing on it gives result shapes for free."""
    return np.lib.stride_tricks.as_strided(np.zeros(1, dtype=dtype), tuple(shape), (0,) * len(shape))


class _Flags:
    """A Payload's `flags` (C-contiguous; F-contiguous too at ndim <= 1): shared, setting one is ignored."""

    __slots__ = ("f_contiguous",)
    c_contiguous = contiguous = writeable = True

    def __init__(self, f_contiguous: bool) -> None:
        object.__setattr__(self, "f_contiguous", f_contiguous)

    def __setattr__(self, name: str, value: Any) -> None:
        return None


_FLAGS = (_Flags(True), _Flags(False))


def _make(shape: tuple[int, ...], dtype: np.dtype) -> Payload:
    """`Payload(shape, dtype)` for a tuple of ints and a numpy dtype (the hot paths: no conversion)."""
    p = _new(Payload)
    p.shape = shape
    p.dtype = dtype
    return p


class Payload:
    """Placeholder tensor bytes: a shape and a dtype, no values (module docstring)."""

    __slots__ = ("dtype", "shape")
    __array_priority__ = 1000

    def __init__(self, shape: Sequence[int] | int, dtype: Any) -> None:
        self.shape: tuple[int, ...] = shape if type(shape) is tuple else (
            (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(s) for s in shape))
        self.dtype = dtype if type(dtype) is np.dtype or isinstance(dtype, np.dtype) else np.dtype(dtype)

    # -- geometry ------------------------------------------------------------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * self.dtype.itemsize

    @property
    def itemsize(self) -> int:
        return self.dtype.itemsize

    @property
    def strides(self) -> tuple[int, ...]:
        st, acc = [], self.dtype.itemsize
        for s in reversed(self.shape):
            st.append(acc)
            acc *= max(s, 1)
        return tuple(reversed(st))

    @property
    def flags(self) -> _Flags:
        return _FLAGS[len(self.shape) > 1]

    @property
    def T(self) -> Payload:
        return _make(self.shape[::-1], self.dtype)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of unsized object")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Payload({self.shape}, {self.dtype})"

    def __getitem__(self, idx: Any) -> Payload:
        if isinstance(idx, Payload):
            raise refuse("an index")
        shape = _basic_index_shape(self.shape, idx)
        if shape is None:
            shape = _dummy(self.shape, self.dtype)[idx].shape
        return _make(shape, self.dtype)

    def __setitem__(self, idx: Any, value: Any) -> None:
        if isinstance(idx, Payload):
            raise refuse("an index")
        _dummy(self.shape, self.dtype)[idx]   # the index must fit, as numpy's would

    def reshape(self, *shape: Any, order: str = "C") -> Payload:
        if len(shape) == 2 and type(shape[0]) is int and type(shape[1]) is int and shape[0] >= 0 <= shape[1]:
            if shape[0] * shape[1] != self.size:   # the tile paths' reshape(rows, cols)
                raise ValueError(f"cannot reshape payload of size {self.size} into shape {shape}")
            return _make(shape, self.dtype)
        if len(shape) == 1 and not isinstance(shape[0], (int, np.integer)):
            shape = tuple(shape[0])
        shape = tuple(int(s) for s in shape)
        if -1 in shape:
            known = math.prod(s for s in shape if s != -1)
            shape = tuple(self.size // max(known, 1) if s == -1 else s for s in shape)
        if math.prod(shape) != self.size:
            raise ValueError(f"cannot reshape payload of size {self.size} into shape {shape}")
        return Payload(shape, self.dtype)

    def view(self, dtype: Any = None, type: Any = None) -> Payload:
        if dtype is None or (isinstance(dtype, type_) and issubclass(dtype, np.ndarray)):
            return Payload(self.shape, self.dtype)
        new = np.dtype(dtype)
        if new.itemsize == self.dtype.itemsize or not self.shape:
            return Payload(self.shape, new)
        last = self.shape[-1] * self.dtype.itemsize
        if last % new.itemsize:
            raise ValueError(f"payload view as {new}: the last axis of {last} bytes does not divide")
        return Payload((*self.shape[:-1], last // new.itemsize), new)

    def transpose(self, *axes: Any) -> Payload:
        if len(axes) == 1 and axes[0] is not None and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0])
        if not axes or axes == (None,):
            return self.T
        shape = self.shape
        return _make(tuple([shape[a] if type(a) is int else shape[int(a)] for a in axes]), self.dtype)

    def swapaxes(self, a: int, b: int) -> Payload:
        axes = list(range(self.ndim))
        axes[a], axes[b] = axes[b], axes[a]
        return self.transpose(axes)

    def astype(self, dtype: Any, *args: Any, **kwargs: Any) -> Payload:
        return Payload(self.shape, dtype)

    def copy(self, order: str = "C") -> Payload:
        return Payload(self.shape, self.dtype)

    def ravel(self, order: str = "C") -> Payload:
        return Payload((self.size,), self.dtype)

    flatten = ravel

    def squeeze(self, axis: Any = None) -> Payload:
        return Payload(np.squeeze(_dummy(self.shape, self.dtype), axis).shape, self.dtype)

    def fill(self, value: Any) -> None:
        return None

    # -- values: refused -------------------------------------------------------------------------------------------
    def __bool__(self) -> bool:
        raise refuse("a branch condition")

    def __int__(self) -> int:
        raise refuse("an int")

    def __float__(self) -> float:
        raise refuse("a float")

    def __index__(self) -> int:
        raise refuse("an index")

    def __complex__(self) -> complex:
        raise refuse("a complex")

    def item(self, *args: Any) -> Any:
        raise refuse("a scalar (item())")

    def tolist(self) -> Any:
        raise refuse("a list (tolist())")

    def tobytes(self, order: str = "C") -> bytes:
        raise refuse("bytes (tobytes())")

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        raise refuse("a numpy array (np.asarray / an assignment into a plain array)")

    def __iter__(self) -> Any:
        raise refuse("an iteration")

    def __hash__(self) -> int:
        raise refuse("a hash key")

    # -- arithmetic: shapes only ---------------------------------------------------------------------------------------
    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        return payload_ufunc(ufunc, method, inputs, kwargs)

    def __array_function__(self, func: Callable[..., Any], types: Any, args: Any, kwargs: Any) -> Any:
        return payload_function(func, args, kwargs)

    def _binary(self, ufunc: np.ufunc, other: Any, reflected: bool = False) -> Any:
        return payload_ufunc(ufunc, "__call__", (other, self) if reflected else (self, other), {})

    def __add__(self, o: Any) -> Any: return self._binary(np.add, o)
    def __radd__(self, o: Any) -> Any: return self._binary(np.add, o, True)
    def __sub__(self, o: Any) -> Any: return self._binary(np.subtract, o)
    def __rsub__(self, o: Any) -> Any: return self._binary(np.subtract, o, True)
    def __mul__(self, o: Any) -> Any: return self._binary(np.multiply, o)
    def __rmul__(self, o: Any) -> Any: return self._binary(np.multiply, o, True)
    def __truediv__(self, o: Any) -> Any: return self._binary(np.true_divide, o)
    def __rtruediv__(self, o: Any) -> Any: return self._binary(np.true_divide, o, True)
    def __floordiv__(self, o: Any) -> Any: return self._binary(np.floor_divide, o)
    def __mod__(self, o: Any) -> Any: return self._binary(np.remainder, o)
    def __pow__(self, o: Any) -> Any: return self._binary(np.power, o)
    def __matmul__(self, o: Any) -> Any: return self._binary(np.matmul, o)
    def __rmatmul__(self, o: Any) -> Any: return self._binary(np.matmul, o, True)
    def __and__(self, o: Any) -> Any: return self._binary(np.bitwise_and, o)
    def __rand__(self, o: Any) -> Any: return self._binary(np.bitwise_and, o, True)
    def __or__(self, o: Any) -> Any: return self._binary(np.bitwise_or, o)
    def __ror__(self, o: Any) -> Any: return self._binary(np.bitwise_or, o, True)
    def __xor__(self, o: Any) -> Any: return self._binary(np.bitwise_xor, o)
    def __lshift__(self, o: Any) -> Any: return self._binary(np.left_shift, o)
    def __rshift__(self, o: Any) -> Any: return self._binary(np.right_shift, o)
    def __lt__(self, o: Any) -> Any: return self._binary(np.less, o)
    def __le__(self, o: Any) -> Any: return self._binary(np.less_equal, o)
    def __gt__(self, o: Any) -> Any: return self._binary(np.greater, o)
    def __ge__(self, o: Any) -> Any: return self._binary(np.greater_equal, o)
    def __eq__(self, o: object) -> Any: return self._binary(np.equal, o)
    def __ne__(self, o: object) -> Any: return self._binary(np.not_equal, o)
    def __neg__(self) -> Payload: return Payload(self.shape, self.dtype)
    def __pos__(self) -> Payload: return Payload(self.shape, self.dtype)
    def __abs__(self) -> Payload: return Payload(self.shape, self.dtype)
    def __invert__(self) -> Payload: return Payload(self.shape, self.dtype)

    def __iadd__(self, o: Any) -> Payload: return self
    def __isub__(self, o: Any) -> Payload: return self
    def __imul__(self, o: Any) -> Payload: return self
    def __itruediv__(self, o: Any) -> Payload: return self
    def __iand__(self, o: Any) -> Payload: return self
    def __ior__(self, o: Any) -> Payload: return self

    def sum(self, axis: Any = None, dtype: Any = None, **kw: Any) -> Payload:
        return _reduce_shape(self, axis, dtype)

    def max(self, axis: Any = None, **kw: Any) -> Payload:
        return _reduce_shape(self, axis, None)

    def min(self, axis: Any = None, **kw: Any) -> Payload:
        return _reduce_shape(self, axis, None)

    def any(self, axis: Any = None, **kw: Any) -> Payload:
        return _reduce_shape(self, axis, np.bool_)

    def all(self, axis: Any = None, **kw: Any) -> Payload:
        return _reduce_shape(self, axis, np.bool_)


type_ = type
_new = object.__new__


def is_payload(x: Any) -> bool:
    """Whether `x` holds unmaterialized bytes (a `Payload`, or a local buffer region with payload bytes)."""
    if isinstance(x, Payload):
        return True
    probe = getattr(x, "holds_payload", None)
    return bool(probe()) if probe is not None else False


def as_payload(x: Any) -> Payload:
    """The Payload of `x`'s shape and dtype (a Payload, or a local region holding payload bytes)."""
    if isinstance(x, Payload):
        return x
    return Payload(_arg_shape(x), x.dtype)


def contiguous(x: Any, dtype: Any = None) -> Any:
    """`np.ascontiguousarray(x, dtype)` for host inputs, a Payload's copy for a Payload (a protocol-only run's
    shape-only input: `np.ascontiguousarray` would ask it for values)."""
    if isinstance(x, Payload):
        return x.copy() if dtype is None else x.astype(dtype)
    return np.ascontiguousarray(x, dtype=dtype)


def host_array(x: Any) -> Any:
    """`np.asarray(x)` for an operator input; a Payload (a protocol-only run's shape-only input) as it is."""
    return x if is_payload(x) else np.asarray(x)


def nonfinite_count(x: Any) -> int | None:
    """How many elements of `x` are NaN or Inf (an emulator check of bytes, e.g. MUL_ZERO_KEEPS_NAN); None when
    `x` holds payload (a protocol-only run: checks that need bytes are off)."""
    if is_payload(x):
        return None
    return int((~np.isfinite(x)).sum())


def _reduce_shape(x: Any, axis: Any, dtype: Any) -> Payload:
    shape = _arg_shape(x)
    dt = np.dtype(dtype) if dtype is not None else x.dtype
    if axis is None:
        return Payload((), dt)
    axes = {a % len(shape) for a in ((axis,) if isinstance(axis, (int, np.integer)) else axis)}
    return Payload(tuple(s for i, s in enumerate(shape) if i not in axes), dt)


def _shape_dtype(x: Any) -> tuple[tuple[int, ...], np.dtype] | None:
    if isinstance(x, Payload):
        return x.shape, x.dtype
    if isinstance(x, np.ndarray):
        return x.shape, x.dtype
    return None


def _probe(x: Any) -> Any:
    """A one-element stand-in of `x` for dtype resolution (scalars stay themselves)."""
    sd = _shape_dtype(x)
    if sd is None:
        return x
    return np.zeros((1,) * max(len(sd[0]), 1), dtype=sd[1]).reshape(-1)[:1]


def _mark_out(out: Any) -> None:
    if isinstance(out, Payload):
        return
    taint = getattr(out, "mark_payload", None)
    if taint is None:
        raise refuse("the value written into a plain array (out=)")
    taint()


def payload_ufunc(ufunc: np.ufunc, method: str, inputs: Sequence[Any], kwargs: dict[str, Any]) -> Any:
    """A ufunc over inputs of which at least one holds payload: the result Payload(s), outs marked."""
    outs = kwargs.pop("out", None)
    if method == "__call__":
        if ufunc is np.matmul:
            a, b = (_arg_shape(x) for x in inputs[:2])
            shape = np.matmul(_dummy(a, _F32)[..., :1, :] if len(a) > 1 else _dummy(a, _F32),
                              _dummy(b, _F32)[..., :, :1] if len(b) > 1 else _dummy(b, _F32)).shape
            shape = (*shape[:-2], a[-2], b[-1]) if len(a) > 1 and len(b) > 1 else shape
        else:
            shape = np.broadcast_shapes(*(_arg_shape(x) for x in inputs))
        with np.errstate(all="ignore"):
            probe = ufunc(*(_probe(x) for x in inputs), **{k: v for k, v in kwargs.items() if k != "where"})
        results = probe if isinstance(probe, tuple) else (probe,)
        res: list[Payload] = [Payload(shape, np.asarray(r).dtype) for r in results]
    elif method == "reduce":
        x = inputs[0]
        axis = kwargs.get("axis", 0)
        with np.errstate(all="ignore"):
            dt = np.asarray(ufunc.reduce(_probe(x), dtype=kwargs.get("dtype"))).dtype
        res = [_reduce_shape(x, axis, dt)]
    else:
        raise refuse(f"the input of {ufunc.__name__}.{method}")
    if outs is not None:
        outs = outs if isinstance(outs, tuple) else (outs,)
        for o in outs:
            _mark_out(o)
        return outs[0] if len(outs) == 1 else outs
    return res[0] if len(res) == 1 else tuple(res)


def _arg_shape(x: Any) -> tuple[int, ...]:
    shape = getattr(x, "shape", None)
    return tuple(shape) if shape is not None else np.shape(x)


def _same(x: Any, *args: Any, **kwargs: Any) -> Payload:
    return as_payload(x).copy()


def _concatenate(arrays: Sequence[Any], axis: int | None = 0, **kw: Any) -> Payload:
    dts = [np.zeros(1, a.dtype) if hasattr(a, "dtype") else a for a in arrays]
    shape = np.concatenate([_dummy(_arg_shape(a), _U8) for a in arrays], axis=axis).shape
    return Payload(shape, np.result_type(*dts) if kw.get("dtype") is None else kw["dtype"])


def _stack(arrays: Sequence[Any], axis: int = 0, **kw: Any) -> Payload:
    dts = [np.zeros(1, a.dtype) if hasattr(a, "dtype") else a for a in arrays]
    shape = np.stack([_dummy(_arg_shape(a), _U8) for a in arrays], axis=axis).shape
    return Payload(shape, np.result_type(*dts))


def _copyto(dst: Any, src: Any, **kw: Any) -> None:
    if isinstance(dst, Payload):
        return
    _mark_out(dst)


def _broadcast_to(x: Any, shape: Any, **kw: Any) -> Payload:
    return Payload(tuple(shape) if not isinstance(shape, int) else (shape,), as_payload(x).dtype)


def _where(cond: Any, *xy: Any) -> Payload:
    if isinstance(cond, Payload) or is_payload(cond):
        raise refuse("the condition of np.where")
    shape = np.broadcast_shapes(*(_arg_shape(v) for v in (cond, *xy)))
    return Payload(shape, np.result_type(*(np.zeros(1, v.dtype) if hasattr(v, "dtype") else v for v in xy)))


def _take(x: Any, indices: Any, axis: Any = None, **kw: Any) -> Payload:
    if is_payload(indices):
        raise refuse("the indices of np.take")
    x = as_payload(x)
    shape = np.take(_dummy(x.shape, _U8), indices, axis=axis, mode="clip").shape
    return Payload(shape, x.dtype)


def _transpose(x: Any, axes: Any = None) -> Payload:
    return as_payload(x).transpose(axes)


def _reshape(x: Any, *args: Any, **kw: Any) -> Payload:
    shape = kw.get("shape", kw.get("newshape", args[0] if args else None))
    return as_payload(x).reshape(shape)


def _zeros_like(x: Any, dtype: Any = None, *args: Any, **kw: Any) -> np.ndarray:
    sd = _shape_dtype(x)
    assert sd is not None
    return np.zeros(kw.get("shape") or sd[0], dtype=dtype or sd[1])


def _empty_like(x: Any, dtype: Any = None, *args: Any, **kw: Any) -> Payload:
    sd = _shape_dtype(x)
    assert sd is not None
    return Payload(kw.get("shape") or sd[0], dtype or sd[1])


def _matmul_fn(a: Any, b: Any, out: Any = None) -> Any:
    return payload_ufunc(np.matmul, "__call__", (a, b), {} if out is None else {"out": out})


def _reduction(dtype: Any) -> Callable[..., Payload]:
    def reduce(x: Any, axis: Any = None, *args: Any, **kw: Any) -> Payload:
        return _reduce_shape(as_payload(x), axis, dtype or kw.get("dtype"))
    return reduce


def _clip(x: Any, *args: Any, **kw: Any) -> Payload:
    return as_payload(x).copy()


def _shape(x: Any) -> tuple[int, ...]:
    return _arg_shape(x)


_FUNCTIONS: dict[Callable[..., Any], Callable[..., Any]] = {
    np.ascontiguousarray: _same, np.asfortranarray: _same, np.copy: _same, np.array: _same,
    np.asanyarray: _same, np.round: _same, np.around: _same, np.clip: _clip, np.squeeze: lambda x, *a, **k:
    as_payload(x).squeeze(*a), np.ravel: lambda x, *a, **k: as_payload(x).ravel(),
    np.concatenate: _concatenate, np.stack: _stack, np.vstack: lambda arrays, **k: _concatenate(
        [a if len(_arg_shape(a)) > 1 else as_payload(a).reshape(1, -1) for a in arrays], 0),
    np.hstack: lambda arrays, **k: _concatenate(arrays, 1 if len(_arg_shape(arrays[0])) > 1 else 0),
    np.copyto: _copyto, np.broadcast_to: _broadcast_to, np.where: _where, np.take: _take,
    np.transpose: _transpose, np.reshape: _reshape, np.zeros_like: _zeros_like, np.empty_like: _empty_like,
    np.ones_like: lambda x, dtype=None, *a, **k: np.ones(_arg_shape(x), dtype or x.dtype),
    np.full_like: lambda x, fill, dtype=None, *a, **k: np.full(_arg_shape(x), fill, dtype or x.dtype),
    np.matmul: _matmul_fn, np.dot: _matmul_fn,
    np.sum: _reduction(None), np.max: _reduction(None), np.min: _reduction(None), np.amax: _reduction(None),
    np.amin: _reduction(None), np.any: _reduction(np.bool_), np.all: _reduction(np.bool_),
    np.shape: _shape, np.ndim: lambda x: len(_arg_shape(x)), np.size: lambda x, *a: int(np.prod(_arg_shape(x))),
    np.result_type: lambda *a: np.result_type(*(np.zeros(1, v.dtype) if hasattr(v, "dtype") else v for v in a)),
    np.may_share_memory: lambda *a, **k: False, np.shares_memory: lambda *a, **k: False,
    np.swapaxes: lambda x, a, b: as_payload(x).swapaxes(a, b),
    np.expand_dims: lambda x, axis: Payload(np.expand_dims(_dummy(_arg_shape(x), _U8), axis).shape,
                                            x.dtype),
}


def payload_function(func: Callable[..., Any], args: Any, kwargs: Any) -> Any:
    """A numpy array function over arguments of which at least one holds payload."""
    impl = _FUNCTIONS.get(func)
    if impl is None:
        raise refuse(f"an argument of np.{getattr(func, '__name__', func)} (no shape rule for it)")
    return impl(*args, **kwargs)
