"""Parallel training over MPI. Nothing here imports ``mpi4py.MPI`` at import time."""
