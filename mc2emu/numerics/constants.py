"""The MX and fractal-layout constants, defined once for every layer (numerics up to the CLI).

Sources: the OCP MX spec (32-element blocks, E8M0 scales), ops-transformer
`mc2/common/op_kernel/apace/utils/constant.h` (MXFP_DIVISOR_SIZE, MXFP_MULTI_BASE_SIZE, FP8_C0_SIZE, the
tiling's CUBE_BLOCK), ops-tensor `include/blaze/gemm/utils/common_utils.h` (C0_SIZE_B8 / C0_SIZE_B4 /
C0_SIZE_L0C, SCALE_C0, Align64) — seed 000 §5.2/§6, seed 002 §2.9, SPEC §4. Where the two sources name the
same number differently, both names are kept (the kernel code reads like its own source) and the second is
bound to the first here, so a value is written exactly once.
"""

from __future__ import annotations

# --- MX block scaling ------------------------------------------------------------------------------------
MX_GROUP_SIZE = 32  # OCP MX block: one E8M0 scale per 32 consecutive K elements (CANN golden repeats x32).
MXFP_DIVISOR_SIZE = 64  # apace constant.h: K elements covered by one stored scale pair (two 32-groups).
MXFP_MULTI_BASE_SIZE = 2  # apace constant.h: scales stored per MXFP_DIVISOR_SIZE K elements.
SCALE_C0 = 2  # innermost dim of the Ascend scale layouts: the two 32-group scales of one 64-K slice.
ALIGN_64 = MXFP_DIVISOR_SIZE  # Blaze Align64: K granule of one MX LoadData (whole scale pairs)
ALIGN_64_BYTES_SHIFT = 6  # x >> 6 == x // ALIGN_64

# --- E8M0 scale (fp8_e8m0_t / ml_dtypes.float8_e8m0fnu) -----------------------------------------------------
E8M0_BIAS = 127  # E8M0 value is 2^(code - 127).
E8M0_MIN_EXP = -127  # code 0x00: the smallest scale, 2^-127 (a float32 subnormal, still exact).
E8M0_MAX_EXP = 127  # code 0xFE: the largest finite scale; 0xFF is reserved for NaN.
E8M0_NAN_CODE = 0xFF  # the only non-finite E8M0 code; E8M0 has no zero, no sign and no Inf.

# --- packed 4-bit elements ---------------------------------------------------------------------------------
FP4_PER_BYTE = 2  # two FP4 elements (codes) per byte.

# --- fractal layout (one 32-byte C0 row) ---------------------------------------------------------------------
CUBE_BLOCK = 16  # cube fractal edge: M and N are padded to 16 in L0 / L0C
FP8_C0_SIZE = 32  # fractal C0 in elements for 8-bit data: one 32-byte C0 row holds 32 elements.
FP4_C0_SIZE = 64  # fractal C0 in elements for 4-bit data: the same 32 bytes hold 64 packed elements.
C0_SIZE_B8 = FP8_C0_SIZE  # Blaze common_utils.h name of FP8_C0_SIZE
C0_SIZE_B4 = FP4_C0_SIZE  # Blaze common_utils.h name of FP4_C0_SIZE
C0_SIZE_L0C = 16  # C0 of the FP32 L0C NZ layout (16 floats = 64 B)
FLOAT32_BYTES = 4  # L0C accumulator / bias table element size (apace tiling: DATA_SIZE_L0C)
