# mpirun -n 4 python docs/examples/a2a_from_python.py
from mpi4py import MPI

from mc2emu.numerics import bf16_ulp_distance
from mc2emu.ops import all_to_all_quant_matmul, golden_a2a
from mc2emu.ops.all_to_all_quant_matmul_golden import gen_st_inputs

comm = MPI.COMM_WORLD
rank, size = comm.Get_rank(), comm.Get_size()
ori_m, ka, n = 64, 128, 96          # this rank's C is (oriM, N); K per rank is Ka

# This rank's inputs (the CANN ST recipe): x1 (R*oriM, Ka) float8_e4m3fn, row block r goes to rank r;
# x1_scale (R*oriM, Ka/64, 2) float8_e8m0fnu; x2 (N, R*Ka) (B transposed); x2_scale (N, R*Ka/64, 2).
inp = gen_st_inputs(rank, size, ori_m, ka, n)
c = all_to_all_quant_matmul(inp["x1"], inp["x1_scale"], inp["x2"], inp["x2_scale"], impl="udma",
                            local_matmul=1, wait_order="in_order", comm=comm)

# The golden of rank r needs row block r of every rank's x1 / x1_scale.
ref = golden_a2a(comm.allgather(inp["x1"]), comm.allgather(inp["x1_scale"]), inp["x2"], inp["x2_scale"], rank,
                 "e4m3")
ulp = bf16_ulp_distance(c, ref)     # localMatmul 1 rounds to bf16 after each atomic add: <= 1 ULP
print(f"rank {rank}: C {c.shape} {c.dtype}, {ulp} bf16 ULP from the golden")
assert ulp <= 1
