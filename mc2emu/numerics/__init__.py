"""MX numerics: element / scale formats, quantization, Ascend scale layouts, the MX matmul core, goldens;
the MX / fractal constants (`constants.py`) and the integer helpers (`int_math.py`) every layer shares.

The lowest layer of mc2emu (STYLE.md §1): pure numpy + ml_dtypes, no MPI, no threads, no global state.
"""

from mc2emu.numerics.block_scale import decode_scales, shared_scale_codes
from mc2emu.numerics.compare import (
    a2a_allclose,
    ag_compare,
    bf16_ulp_distance,
    bit_exact,
    max_abs_error,
    ulp_distance,
    ulp_distances,
)
from mc2emu.numerics.constants import (
    FP4_C0_SIZE,
    FP8_C0_SIZE,
    MX_GROUP_SIZE,
    MXFP_DIVISOR_SIZE,
    MXFP_MULTI_BASE_SIZE,
    SCALE_C0,
)
from mc2emu.numerics.element_codec import decode_elements, encode_elements
from mc2emu.numerics.errors import MxTypeError, MxValueError
from mc2emu.numerics.formats import E8M0_LUT, FP4_STORAGE_DTYPE, ElemFormat, gm_storage_dtype
from mc2emu.numerics.fp4 import pack_fp4, unpack_fp4
from mc2emu.numerics.golden import (
    E8m0Cast,
    ag_st_seed,
    gen_ag_scales,
    gen_st_elements,
    gen_st_scales,
    golden_mx_matmul,
)
from mc2emu.numerics.mx_matmul import (
    OutDtype,
    decode_packed_fp4,
    dequant_cols,
    dequant_rows,
    fixpipe_cast,
    mmad_k_ordered,
)
from mc2emu.numerics.quantize import MxTensor, dequantize_mx, quantize_mx
from mc2emu.numerics.scale_layout import (
    from_ascend_scale_a,
    from_ascend_scale_b,
    scale_blocks,
    scale_k_len,
    to_ascend_scale_a,
    to_ascend_scale_b,
)
from mc2emu.numerics.weight_dequant import DequantDtype, WeightDtype, dequant_ub_tile, dequant_weight

__all__ = [
    "E8M0_LUT",
    "FP4_C0_SIZE",
    "FP4_STORAGE_DTYPE",
    "FP8_C0_SIZE",
    "MXFP_DIVISOR_SIZE",
    "MXFP_MULTI_BASE_SIZE",
    "MX_GROUP_SIZE",
    "SCALE_C0",
    "DequantDtype",
    "E8m0Cast",
    "ElemFormat",
    "MxTensor",
    "MxTypeError",
    "MxValueError",
    "OutDtype",
    "WeightDtype",
    "a2a_allclose",
    "ag_compare",
    "ag_st_seed",
    "bf16_ulp_distance",
    "bit_exact",
    "decode_elements",
    "decode_packed_fp4",
    "decode_scales",
    "dequant_cols",
    "dequant_rows",
    "dequant_ub_tile",
    "dequant_weight",
    "dequantize_mx",
    "encode_elements",
    "fixpipe_cast",
    "from_ascend_scale_a",
    "from_ascend_scale_b",
    "gen_ag_scales",
    "gen_st_elements",
    "gen_st_scales",
    "gm_storage_dtype",
    "golden_mx_matmul",
    "max_abs_error",
    "mmad_k_ordered",
    "pack_fp4",
    "quantize_mx",
    "scale_blocks",
    "scale_k_len",
    "shared_scale_codes",
    "to_ascend_scale_a",
    "to_ascend_scale_b",
    "ulp_distance",
    "ulp_distances",
    "unpack_fp4",
]
