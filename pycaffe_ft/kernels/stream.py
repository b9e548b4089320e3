"""A stand-in for a memory-bound pass: read some arrays and write others with plain vector
loads and stores, in order, and nothing else. ``pycaffe-ft time`` runs it in a pooling layer's
place (same arrays, same image ranges, same point of the pass) to measure what memory gives
that layer there, caches and all, beside what the layer gets.
"""
import numpy as np
from numba import njit

from .simd import vfull, vload, vstore, vwhere_gt

__all__ = ['stream']


@njit(cache=True, nogil=True)
def stream(source_a, source_b, destination_a, destination_b):
    """Read every element of the two sources and write every element of the two destinations
    (flat float32 arrays, any of them empty): the largest values read (lane by lane, and at
    least 0) go to the elements written, so that neither the loads nor the stores can be
    dropped and nothing grows from pass to pass. Eight floats a load and a store; the ragged
    ends one by one."""
    largest = vfull(np.float32(-np.inf))
    spare = np.float32(-np.inf)
    for source in (source_a, source_b):
        whole = source.size - source.size % 8
        for i in range(0, whole, 8):
            v = vload(source, i)
            largest = vwhere_gt(v, largest, v, largest)
        for i in range(whole, source.size):
            spare = max(spare, source[i])
    value = max(spare, np.float32(0.0))
    fill = vwhere_gt(largest, vfull(value), largest, vfull(value))
    for destination in (destination_a, destination_b):
        whole = destination.size - destination.size % 8
        for i in range(0, whole, 8):
            vstore(destination, i, fill)
        for i in range(whole, destination.size):
            destination[i] = value
