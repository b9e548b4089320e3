"""Numba kernels: pure ``@njit(cache=True)`` functions, arrays in, outputs passed in."""
