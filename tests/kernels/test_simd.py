"""The vector intrinsics' lane orders against NumPy slicing (the kernels built on them are
checked bit for bit against Caffe's definitions elsewhere; these pin down the shuffles)."""
import numpy as np
from numba import njit

from pycaffe_ft.kernels.simd import vload, vload_even_swizzled, vstore, vtranspose, vunswizzle, whalves, wload, \
    wload_even, wload_even_rows, wload_rows, wramp_rows, wstore


@njit(cache=False)
def _loaded(x, at):
    out = np.empty(16 + 8 + 8 + 8 + 16, np.float32)
    wstore(out, 0, wload_even(x, at))
    vstore(out, 16, vload_even_swizzled(x, at))
    vstore(out, 24, vunswizzle(vload_even_swizzled(x, at)))
    low, high = whalves(wload(x, at))
    vstore(out, 32, high)
    vstore(out, 40, low)
    vstore(out, 48, vload(x, at))
    return out


@njit(cache=False)
def _two_rows(x, at, offset):
    out = np.empty(48, np.float32)
    wstore(out, 0, wload_rows(x, at, offset))
    wstore(out, 16, wload_even_rows(x, at, offset))
    wstore(out, 32, wramp_rows(np.float32(at), np.float32(2.0), np.float32(offset)))
    return out


@njit(cache=False)
def _transposed(x):
    t = vtranspose(vload(x, 0), vload(x, 8), vload(x, 16), vload(x, 24), vload(x, 32), vload(x, 40), vload(x, 48),
                   vload(x, 56))
    out = np.empty(64, np.float32)
    for r in range(8):
        vstore(out, 8 * r, t[r])
    return out


def test_loads_and_halves_put_lanes_in_the_documented_order():
    x = np.arange(100, dtype=np.float32)
    for at in (0, 3, 17):
        out = _loaded(x, at)
        np.testing.assert_array_equal(out[:16], x[at:at + 32:2])
        np.testing.assert_array_equal(out[16:24], x[at:at + 16:2][[0, 1, 4, 5, 2, 3, 6, 7]])
        np.testing.assert_array_equal(out[24:32], x[at:at + 16:2])
        np.testing.assert_array_equal(out[32:40], x[at + 8:at + 16])
        np.testing.assert_array_equal(out[40:48], x[at:at + 8])
        np.testing.assert_array_equal(out[48:56], x[at:at + 8])


def test_two_rows_in_one_wide_vector():
    x = np.arange(100, dtype=np.float32)
    for at, offset in ((0, 8), (3, 13), (5, 40)):
        out = _two_rows(x, at, offset)
        np.testing.assert_array_equal(out[:16], np.concatenate([x[at:at + 8], x[at + offset:at + offset + 8]]))
        np.testing.assert_array_equal(out[16:32], np.concatenate([x[at:at + 16:2], x[at + offset:at + offset + 16:2]]))
        np.testing.assert_array_equal(out[32:], np.concatenate([at + 2 * np.arange(8), at + offset + 2 * np.arange(8)]))


def test_transpose_of_eight_rows():
    x = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(_transposed(x), x.reshape(8, 8).T.reshape(-1))
