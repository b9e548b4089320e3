"""The vector intrinsics' lane orders against NumPy slicing (the kernels built on them are
checked bit for bit against Caffe's definitions elsewhere; these pin down the shuffles)."""
import numpy as np
import pytest
from numba import njit

from pycaffe_ft.kernels.simd import WIDE, vadd_if_eq, vadd_where_eq, vkeep, vload, vload_even_swizzled, \
    vload_evens_odds_swizzled, vload_pairs, vstore, vtranspose, vunswizzle, wfull, whalves, winterleave, wload, \
    wload_even, wload_even_rows, wload_halves, wload_lanes, wload_rows, wpermute2, wpermute4, wpick, wpick2, \
    wramp_rows, wstore, wstore_lanes


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


@njit(cache=False)
def _evens_odds(x, at, mask):
    out = np.empty(24, np.float32)
    evens, odds = vload_evens_odds_swizzled(x, at)
    vstore(out, 0, evens)
    vstore(out, 8, odds)
    vstore(out, 16, vkeep(vload(x, at), vload(mask, 0)))
    return out


def test_evens_and_odds_in_swizzled_order_and_the_bitwise_keep():
    x = np.arange(100, dtype=np.float32) - np.float32(50.0)
    x[7] = np.nan
    keep = np.array([0, 0xffffffff, 0xffffffff, 0, 0xffffffff, 0, 0, 0xffffffff], np.uint32)
    swizzled = [0, 1, 4, 5, 2, 3, 6, 7]
    for at in (0, 3, 40):
        out = _evens_odds(x, at, keep.view(np.float32))
        np.testing.assert_array_equal(out[:8], x[at:at + 16:2][swizzled])
        np.testing.assert_array_equal(out[8:16], x[at + 1:at + 16:2][swizzled])
        kept = np.where(keep != 0, x[at:at + 8].view(np.uint32), np.uint32(0))  # +0 where not kept
        np.testing.assert_array_equal(out[16:24].view(np.uint32), kept)


def test_transpose_of_eight_rows():
    x = np.arange(64, dtype=np.float32)
    np.testing.assert_array_equal(_transposed(x), x.reshape(8, 8).T.reshape(-1))


@njit(cache=False)
def _picked(x, picks):
    out = np.empty(64, np.float32)
    outside = wfull(np.float32(-7.0))
    v0, v1, v2, v3 = wload(x, 0), wload(x, 16), wload(x, 32), wload(x, 48)
    wstore(out, 0, wpick(v0, v1, v2, v3, picks, 0, outside))
    wstore(out, 16, wpick2(v0, v1, picks, 16, outside))
    wstore(out, 32, wpermute4(v0, v1, v2, v3, picks, 32))
    wstore(out, 48, wpermute2(v0, v1, picks, 48))
    return out


@pytest.mark.skipif(not WIDE, reason='the table picks are AVX-512 permutes')
def test_table_picks_take_the_listed_elements_and_outside_past_the_sources():
    """wpick: lane l of the 64 floats of four vectors at picks[l] (64 or more: outside);
    wpick2: of the 32 floats of two vectors (32 or more: outside); wpermute4 and wpermute2 the
    same with every pick inside."""
    x = np.arange(64, dtype=np.float32) * np.float32(1.5)
    rng = np.random.default_rng(0)
    for _ in range(20):
        picks = np.concatenate([rng.integers(0, n, 16) for n in (70, 36, 64, 32)]).astype(np.int32)
        out = _picked(x, picks)
        np.testing.assert_array_equal(out[:16], np.where(picks[:16] < 64, x[np.minimum(picks[:16], 63)], -7))
        np.testing.assert_array_equal(out[16:32], np.where(picks[16:32] < 32, x[np.minimum(picks[16:32], 31)], -7))
        np.testing.assert_array_equal(out[32:], x[picks[32:]])


@njit(cache=False)
def _pairs_and_taken(x, at, total, a, b, v):
    out = np.empty(16, np.float32)
    vstore(out, 0, vload_pairs(x, at))
    vstore(out, 8, vadd_where_eq(vload(total, 0), vload(a, 0), vload(b, 0), vload(v, 0)))
    return out


def test_pairs_and_the_compare_and_add():
    x = np.arange(20, dtype=np.float32)
    total = np.array([0, 0, 1, -0.0, 0, 2, 0, 0], np.float32)
    a = np.array([1, 2, 3, 4, np.nan, 6, 7, 8], np.float32)
    b = np.array([1, 0, 3, 4, np.nan, 6, 0, 8], np.float32)
    v = np.array([-0.0, 5, 2, -0.0, 9, np.inf, 3, np.nan], np.float32)
    for at in (0, 5, 16):
        out = _pairs_and_taken(x, at, total, a, b, v)
        np.testing.assert_array_equal(out[:8], np.repeat(x[at:at + 4], 2))
    # total + v where a == b (NaN never equal), else total + (+0): signed zeros as such an add gives them
    expected = total + np.where(a == b, v, np.float32(0.0))
    assert out[8:].tobytes() == expected.tobytes()


@njit(cache=False)
def _some_lanes(x, at, first, end, out, to, count):
    wstore_lanes(out, to, wload_lanes(x, at, first, end, wfull(np.float32(-7.0))), count)


@pytest.mark.skipif(not WIDE, reason='sixteen-lane vectors: AVX-512 only')
def test_masked_loads_and_stores_touch_only_their_lanes():
    """Lanes first <= l < end load, the others are the fill; a store writes lanes below count and
    nothing else; at the ends of the arrays too, where a whole vector would run past them (a
    load from x[-1] whose lane 0 is not loaded, stores of the last element alone)."""
    x = np.arange(40, dtype=np.float32)
    for at, first, end, to, count in ((0, 0, 16, 0, 16), (3, 1, 9, 3, 12), (30, 0, 10, 30, 10), (-1, 1, 17, 0, 16),
                                      (24, 2, 5, 24, 0), (39, 0, 1, 39, 1), (5, 4, 2, 5, 16), (35, 0, 5, 39, 1)):
        out = np.full(40, np.float32(99.0))
        _some_lanes(x, at, first, end, out, to, count)
        lanes = np.arange(16)
        loaded = np.where((lanes >= first) & (lanes < end), at + lanes, np.float32(-7.0))
        expected = np.full(40, np.float32(99.0))
        expected[to + lanes[lanes < count]] = loaded[lanes < count]
        np.testing.assert_array_equal(out, expected)


@njit(cache=False)
def _halves(x, at, offset, first, end):
    out = np.empty(16, np.float32)
    wstore(out, 0, wload_halves(x, at, offset, first, end, wfull(np.float32(-7.0))))
    return out


@pytest.mark.skipif(not WIDE, reason='sixteen-lane vectors: AVX-512 only')
def test_halves_load_two_places_lanes_within_each():
    """Lane l + 8 h is x[at + h offset + l] for first <= l < end, else the fill, and nothing
    else is read (a load from x[-1] whose lane 0 is not loaded; the last element alone)."""
    x = np.arange(40, dtype=np.float32)
    for at, offset, first, end in ((0, 8, 0, 8), (3, 20, 1, 6), (-1, 13, 1, 8), (31, 8, 0, 1), (10, 5, 3, 3)):
        lanes = np.arange(16) % 8
        expected = np.where((lanes >= first) & (lanes < end), at + (np.arange(16) // 8) * offset + lanes,
                            np.float32(-7.0))
        np.testing.assert_array_equal(_halves(x, at, offset, first, end), expected)


@njit(cache=False)
def _interleaved_and_added(a, b, total, c, d, v):
    out = np.empty(48, np.float32)
    low, high = winterleave(wload(a, 0), wload(b, 0))
    wstore(out, 0, low)
    wstore(out, 16, high)
    wstore(out, 32, vadd_if_eq(wload(total, 0), wload(c, 0), wload(d, 0), wload(v, 0)))
    return out


@pytest.mark.skipif(not WIDE, reason='sixteen-lane vectors: AVX-512 only')
def test_interleave_and_the_masked_add():
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(16).astype(np.float32), rng.standard_normal(16).astype(np.float32)
    total = np.array([0, 1, 2, -0.0, np.nan, 0, 3, 0] * 2, np.float32)
    c = np.array([1, 2, np.nan, 4, 5, 6, 7, 8] * 2, np.float32)
    d = np.array([1, 0, np.nan, 4, 5, 6, 0, 8] * 2, np.float32)
    v = np.array([-0.0, 5, 2, 1, 9, np.inf, 3, -0.0] * 2, np.float32)
    out = _interleaved_and_added(a, b, total, c, d, v)
    np.testing.assert_array_equal(out[:32], np.stack([a, b], axis=1).reshape(-1))
    # total + v where c == d (NaN never equal), else total itself (-0 stays -0: not an add of +0)
    expected = np.where(c == d, total + v, total)
    assert out[32:].tobytes() == expected.tobytes()
