"""aligned_empty / aligned_zeros, and the blobs and scratch arrays made from them: their
first element on a 64-byte boundary, the size and dtype asked for."""
import numpy as np
import pytest

from pycaffe_ft.aligned import ALIGNMENT, aligned_empty, aligned_zeros
from pycaffe_ft.blob import Blob
from pycaffe_ft.intra_op import scratch


@pytest.mark.parametrize('count', [1, 7, 1000, 1 << 20])
@pytest.mark.parametrize('dtype', [np.float32, np.float64, np.int64])
def test_arrays_start_on_a_cache_line(count, dtype):
    for make in (aligned_empty, aligned_zeros):
        a = make(count, dtype)
        assert a.shape == (count,) and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
        assert a.ctypes.data % ALIGNMENT == 0
    assert not aligned_zeros(count, dtype).any()


def test_empty_arrays():
    assert aligned_empty(0).shape == (0,) and aligned_zeros(0, np.int64).dtype == np.int64


def test_blobs_and_scratch_are_aligned():
    blob = Blob((3, 5, 17, 19))
    assert blob.data.ctypes.data % ALIGNMENT == 0 and blob.diff.ctypes.data % ALIGNMENT == 0
    assert not blob.data.any() and not blob.diff.any()
    assert scratch('test_aligned', 12345).ctypes.data % ALIGNMENT == 0
