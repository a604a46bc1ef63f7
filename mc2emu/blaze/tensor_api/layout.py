"""Tensor API layouts: logical 2-D shapes mapped to strided GM storage, built from layout patterns.

GM frame layouts of the Ascend C tensor API (asc-devkit `impl/tensor_api/tensor/layout_pattern.h`, `MakeFrameLayout`):
each logical dimension is (size, stride) modes, innermost first, strides in elements (K16 / N16: rounded to 16):

    pattern            logical (row, column)      element (r, c) at                 stored as
    NDExtLayoutPtn     A (m, k), B (k, n), C      r * column + c                    row-major
    DNExtLayoutPtn     A^T (m, k), B^T (k, n)     r + c * row                       (column, row) row-major
    ScaleANDLayoutPtn  scaleA (m, scaleKLen)      r * column + c                    (m, ceil(k/64), 2)
    ScaleADNLayoutPtn  scaleA^T (m, scaleKLen)    r*2 + c%2 + (c//2) * 2 * row      (ceil(k/64), m, 2)
    ScaleBNDLayoutPtn  scaleB (scaleKLen, n)      r%2 + (r//2) * 2 * column + c*2   (ceil(k/64), n, 2)
    ScaleBDNLayoutPtn  scaleB^T (scaleKLen, n)    r + c * row                       (n, ceil(k/64), 2)
    NZLayoutPtn        B (k, n), FRACTAL_NZ       (c//C0)*K16*C0 + r*C0 + c%C0      (ceil(n/C0), K16/16, 16, C0)
    ZNLayoutPtn        B^T (k, n), FRACTAL_NZ     (r//C0)*N16*C0 + c*C0 + r%C0      (ceil(k/C0), N16/16, 16, C0)
    NZViewLayoutPtn    B (k, n), FRACTAL_NZ view  as NZLayoutPtn, logical (k, n)    (ceil(n/C0), K16/16, 16, C0)

(scaleKLen = ceil(K/64) * SCALE_C0; SPEC §4.) NZ / ZN cover the padded matrix as the format cast stores it (GMM);
NZViewLayoutPtn (QMRS per_block's B) covers whole C0 groups of the logical matrix (`span`, `skip` pad columns),
read whole and cropped. C0-wide axes and scale pairs are sliced only at whole groups, as on the device.
`IsTrans` / `IsNz` are `IsTrans<Layout>` / `TagToFormat<Layout>`. FP4 is packed two per byte (element 2i low).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property, lru_cache

from mc2emu.numerics.constants import SCALE_C0
from mc2emu.numerics.int_math import Align, CeilDiv
from mc2emu.numerics.nz_format import NZ_FRACTAL_ROWS
from mc2emu.runtime.hazards import KernelError

Mode = tuple[int, int]  # (size, stride in elements)


class LayoutError(KernelError):
    """A layout built or sliced in a way the tensor API cannot express (odd scale pair, out of shape)."""


class LayoutPtn:
    """Base of the layout pattern tags (`struct NDExtLayoutPtn {}` ...). Never instantiated."""

    TRANS = False  # IsTrans<Layout>: the operand is stored transposed (DN)
    NZ = False  # TagToFormat<Layout>::format == CubeFormat::NZ: stored in 16 x C0 fractals
    PADDED = False  # the storage holds whole C0 column groups (an NZ view): views may cover pad columns


class NDExtLayoutPtn(LayoutPtn):
    """Row-major ND layout (`NDExtLayoutPtn`)."""


class DNExtLayoutPtn(LayoutPtn):
    """Column-major DN layout (`DNExtLayoutPtn`): the operand stored transposed."""

    TRANS = True


class NZViewLayoutPtn(LayoutPtn):
    """FRACTAL_NZ (`asc::te::nz_layout_ptn`) of a non-transposed B (k, n) seen as the logical (k, n) matrix:
    C0-wide column groups, each ceil(k/16) fractals of 16 rows x C0 (`mc2emu.numerics.nz_format`)."""

    NZ = True
    PADDED = True


class ScaleANDLayoutPtn(LayoutPtn):
    """scaleA of a non-transposed A: (m, ceil(k/64), 2)."""


class ScaleADNLayoutPtn(LayoutPtn):
    """scaleA of a transposed A: (ceil(k/64), m, 2)."""

    TRANS = True


class ScaleBNDLayoutPtn(LayoutPtn):
    """scaleB of a non-transposed B (k, n): (ceil(k/64), n, 2)."""


class ScaleBDNLayoutPtn(LayoutPtn):
    """scaleB of a transposed B (n, k): (n, ceil(k/64), 2)."""

    TRANS = True


class NZLayoutPtn(LayoutPtn):
    """A non-transposed B (k, n) stored FRACTAL_NZ (`NZLayoutPtn`; CGMCT's `layout::Nz`): n in C0 blocks."""

    NZ = True


class ZNLayoutPtn(LayoutPtn):
    """A transposed B (its (n, k) stored FRACTAL_NZ; `ZNLayoutPtn`, CGMCT's `layout::Zn`): k in C0 blocks."""

    TRANS = True
    NZ = True


def IsTrans(pattern: type[LayoutPtn]) -> bool:
    """`IsTrans<Layout>::value`."""
    return pattern.TRANS


def IsNz(pattern: type[LayoutPtn]) -> bool:
    """`TagToFormat<Layout>::format == CubeFormat::NZ`."""
    return pattern.NZ


def IsWeightNz(pattern: type[LayoutPtn]) -> bool:
    """`IsWeightNz<Layout>::value`: B stored as FRACTAL_NZ (not transposed)."""
    return pattern.NZ and not pattern.TRANS


@dataclass(frozen=True)
class Layout:
    """A logical (rows, cols) view over strided storage. `modes[d]` lists dimension d's (size, stride)
    modes innermost first; the product of the sizes is `shape[d]`."""

    pattern: type[LayoutPtn]
    shape: tuple[int, int]
    modes: tuple[tuple[Mode, ...], tuple[Mode, ...]]
    span: int = 0   # NZ: dimension-1 elements the modes cover (whole C0 groups); 0 = shape[1]
    skip: int = 0   # NZ: covered columns before this view's column 0

    def __post_init__(self) -> None:
        for d in (0, 1):
            size = 1
            for s, _ in self.modes[d]:
                size *= s
            if size != (self.span if d == 1 and self.span else self.shape[d]):
                raise LayoutError(f"{self.pattern.__name__}: modes {self.modes[d]} of dimension {d} hold "
                                  f"{size} elements, shape says {self.shape[d]}")

    @property
    def rows(self) -> int:
        return self.shape[0]

    @property
    def cols(self) -> int:
        return self.shape[1]

    def offset(self, coord: tuple[int, int]) -> int:
        """Element offset of logical coordinate `coord` (the layout function)."""
        off = 0
        for d in (0, 1):
            x = int(coord[d]) + (self.skip if d == 1 else 0)
            for s, st in self.modes[d]:
                off += (x % s) * st
                x //= s
        return off

    def slice(self, coord: tuple[int, int], shape: tuple[int, int]) -> tuple[Layout, int]:
        """The sub-layout of `shape` elements from `coord` and its element offset (`Tensor::Slice`)."""
        modes0, modes1 = self.modes
        if len(modes0) == 1 and len(modes1) == 1:   # ND / DN: one mode per dimension (every tile loop's path)
            o0, n0 = int(coord[0]), int(shape[0])
            if o0 < 0 or n0 < 0 or o0 + n0 > self.shape[0]:
                raise LayoutError(f"{self.pattern.__name__}{self.shape}: slice of {n0} from {o0} along dimension "
                                  f"0 leaves the tensor")
            o1, n1 = int(coord[1]), int(shape[1])
            if o1 < 0 or n1 < 0 or o1 + n1 > self.shape[1]:
                raise LayoutError(f"{self.pattern.__name__}{self.shape}: slice of {n1} from {o1} along dimension "
                                  f"1 leaves the tensor")
            stride0, stride1 = modes0[0][1], modes1[0][1]
            sub = object.__new__(Layout)  # sizes are consistent by construction: skip __post_init__'s check
            object.__setattr__(sub, "pattern", self.pattern)
            object.__setattr__(sub, "shape", (n0, n1))
            object.__setattr__(sub, "modes", (((n0, stride0),), ((n1, stride1),)))
            return sub, o0 * stride0 + o1 * stride1
        new_modes: list[tuple[Mode, ...]] = []
        off = 0
        span = skip = 0
        for d in (0, 1):
            o, n = int(coord[d]), int(shape[d])
            if o < 0 or n < 0 or o + n > self.shape[d]:
                raise LayoutError(f"{self.pattern.__name__}{self.shape}: slice of {n} from {o} along dimension "
                                  f"{d} leaves the tensor")
            dim = self.modes[d]
            outer_stride = dim[-1][1]
            if len(dim) == 1:
                new_modes.append(((n, outer_stride),))
                off += o * outer_stride
                continue
            inner = 1
            for s, _ in dim[:-1]:
                inner *= s
            if d == 1 and self.pattern.PADDED:
                # whole C0 groups: [skip + o, skip + o + n) of the covered span
                o += self.skip
                g0, g1 = o // inner, CeilDiv(o + n, inner)
                new_modes.append((*dim[:-1], (g1 - g0, outer_stride)))
                off += g0 * outer_stride
                span, skip = (g1 - g0) * inner, o - g0 * inner
                continue
            if o % inner or n % inner:
                raise LayoutError(f"{self.pattern.__name__}: dimension {d} is stored in groups of {inner} "
                                  f"(SCALE_C0 pairs, NZ C0 blocks); slice start {o} and length {n} must be multiples")
            new_modes.append((*dim[:-1], (n // inner, outer_stride)))
            off += (o // inner) * outer_stride
        sub = object.__new__(Layout)  # sizes are consistent by construction: skip __post_init__'s check
        object.__setattr__(sub, "pattern", self.pattern)
        object.__setattr__(sub, "shape", (int(shape[0]), int(shape[1])))
        object.__setattr__(sub, "modes", (new_modes[0], new_modes[1]))
        object.__setattr__(sub, "span", span)
        object.__setattr__(sub, "skip", skip)
        return sub, off

    @cached_property
    def storage(self) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
        """(storage shape, element strides, perm): the modes of size > 1 ordered outer to inner by stride,
        and the transpose `perm` that turns a storage-ordered array into the logical mode order (dim 0's
        modes outer to inner, then dim 1's), ready to reshape to `shape`."""
        return storage_of(self.modes)


@lru_cache(maxsize=4096)
def storage_of(dims: tuple[tuple[Mode, ...], tuple[Mode, ...]]) -> tuple[tuple[int, ...], tuple[int, ...],
                                                                          tuple[int, ...]]:
    """Layout.storage for the given modes (a pure function; cached because every chunk of a tile loop shares
    the same few mode tuples)."""
    modes = [(d, lvl, s, st) for d in (0, 1) for lvl, (s, st) in enumerate(dims[d]) if s != 1]
    if not modes:
        return (1,), (1,), (0,)
    order = sorted(range(len(modes)), key=lambda i: (-modes[i][3], -modes[i][2]))
    sshape = tuple(modes[i][2] for i in order)
    sstrides = tuple(modes[i][3] for i in order)
    logical = sorted(range(len(modes)), key=lambda i: (modes[i][0], -modes[i][1]))
    perm = tuple(order.index(i) for i in logical)
    return sshape, sstrides, perm


def _check_c0(pattern: type[LayoutPtn], c0: int | None) -> None:
    if c0 is not None and c0 != SCALE_C0:
        raise LayoutError(f"{pattern.__name__} only supports fp8_e8m0_t with C0 = {SCALE_C0}, got {c0}")


def _even(pattern: type[LayoutPtn], n: int, what: str) -> int:
    if n % SCALE_C0:
        raise LayoutError(f"{pattern.__name__}: {what} = {n} must be a multiple of SCALE_C0 = {SCALE_C0}")
    return n // SCALE_C0


def MakeFrameLayout(pattern: type[LayoutPtn], row: int, column: int, c0: int | None = None) -> Layout:
    """`MakeFrameLayout<Pattern, Int<C0>>(row, column)` for the GM patterns of the MX kernels."""
    row, column = int(row), int(column)
    if row < 0 or column < 0:
        raise LayoutError(f"{pattern.__name__}: negative shape ({row}, {column})")
    if pattern in (NDExtLayoutPtn, ScaleANDLayoutPtn):
        if pattern is ScaleANDLayoutPtn:
            _check_c0(pattern, c0)
        return Layout(pattern, (row, column), (((row, column),), ((column, 1),)))
    if pattern in (DNExtLayoutPtn, ScaleBDNLayoutPtn):
        return Layout(pattern, (row, column), (((row, 1),), ((column, row),)))
    if pattern is ScaleADNLayoutPtn:
        _check_c0(pattern, c0)
        pairs = _even(pattern, column, "column (scaleKLen)")
        return Layout(pattern, (row, column), (((row, SCALE_C0),), ((SCALE_C0, 1), (pairs, SCALE_C0 * row))))
    if pattern is ScaleBNDLayoutPtn:
        _check_c0(pattern, c0)
        pairs = _even(pattern, row, "row (scaleKLen)")
        return Layout(pattern, (row, column), (((SCALE_C0, 1), (pairs, SCALE_C0 * column)), ((column, SCALE_C0),)))
    if pattern in (NZLayoutPtn, ZNLayoutPtn):
        if c0 is None or c0 <= 0:
            raise LayoutError(f"{pattern.__name__} needs C0 (32 bytes of the element type), got {c0}")
        if pattern is NZLayoutPtn:  # (k, n): rows contiguous in a C0 block, blocks of K16 rows
            k16, c1 = -(-row // NZ_FRACTAL_ROWS) * NZ_FRACTAL_ROWS, -(-column // c0)
            return Layout(pattern, (k16, c1 * c0), (((k16, c0),), ((c0, 1), (c1, k16 * c0))))
        n16, c1 = -(-column // NZ_FRACTAL_ROWS) * NZ_FRACTAL_ROWS, -(-row // c0)
        return Layout(pattern, (c1 * c0, n16), (((c0, 1), (c1, n16 * c0)), ((n16, c0),)))
    if pattern is NZViewLayoutPtn:
        if c0 is None or c0 <= 0:
            raise LayoutError(f"{pattern.__name__} needs C0 (elements of 32 bytes), got {c0}")
        groups = CeilDiv(column, c0)
        return Layout(pattern, (row, column), (((row, c0),), ((c0, 1), (groups, Align(row, NZ_FRACTAL_ROWS) * c0))),
                      groups * c0, 0)
    raise LayoutError(f"no GM frame layout for pattern {pattern!r}")


@dataclass(frozen=True)
class FrameLayoutFormat:
    """`FrameLayoutFormat<Pattern, Int<C0>>`: a layout maker, called as `MakeLayoutA(m, k)`."""

    pattern: type[LayoutPtn]
    c0: int | None = None

    def __call__(self, row: int, column: int) -> Layout:
        return MakeFrameLayout(self.pattern, row, column, self.c0)
