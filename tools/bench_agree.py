"""Cost of one ULFM Agree (and of an allreduce of N floats) on the ranks of this job.
Run under mpiexec (tools/bench_parallel.py does)."""
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD.Dup()
comm.Set_errhandler(MPI.ERRORS_RETURN)
n = int(sys.argv[1]) if len(sys.argv) > 1 else 431080
reps = 200
comm.Barrier()
t0 = time.perf_counter()
for _ in range(reps):
    comm.Agree(1)
agree = (time.perf_counter() - t0) / reps
buf, out = np.ones(n), np.empty(n)
comm.Barrier()
t0 = time.perf_counter()
for _ in range(20):
    comm.Allreduce(buf, out, op=MPI.SUM)
allreduce = (time.perf_counter() - t0) / 20
if comm.Get_rank() == 0:
    print('agree_ms %.4f allreduce_ms %.4f' % (agree * 1e3, allreduce * 1e3))
