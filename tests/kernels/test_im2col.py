"""columns (im2col and col2im) against a NumPy oracle: im2col copies each window, col2im adds
the columns into the image in Caffe's order (rows c, ki, kj, then output positions), bit for
bit, for rows of whole vectors (stride 1, width a multiple of 8) and any other geometry."""
import numpy as np
import pytest

from pycaffe_ft.kernels.im2col import columns

GEOMETRIES = [  # (n, channels, height, width, k, stride, dilation): out_w 8, 16, 13, 27, 5 (stride 2)
    (2, 3, 12, 12, 5, 1, 1), (1, 2, 18, 18, 3, 1, 1), (2, 4, 15, 15, 3, 1, 1), (1, 2, 31, 31, 5, 1, 1),
    (2, 3, 11, 11, 3, 2, 1), (1, 2, 12, 12, 3, 1, 2)]


def _oracle(x, k, stride, dilation, cols_in):
    """(columns of x, col2im of cols_in), one element at a time in Caffe's order."""
    n, c, h, w = x.shape
    out_h, out_w = (h - dilation * (k - 1) - 1) // stride + 1, (w - dilation * (k - 1) - 1) // stride + 1
    cols = np.empty((c * k * k, n * out_h * out_w), np.float32)
    image = np.zeros_like(x)
    for ch, ki, kj in np.ndindex(c, k, k):
        row = (ch * k + ki) * k + kj
        for b, oy, ox in np.ndindex(n, out_h, out_w):
            y, xx = oy * stride + ki * dilation, ox * stride + kj * dilation
            column = (b * out_h + oy) * out_w + ox
            cols[row, column] = x[b, ch, y, xx]
            image[b, ch, y, xx] += cols_in[row, column]
    return cols, image


@pytest.mark.parametrize('geometry', GEOMETRIES)
def test_columns_match_the_oracle_bit_for_bit(geometry):
    n, c, h, w, k, stride, dilation = geometry
    rng = np.random.default_rng(h * w + k)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    out_h = (h - dilation * (k - 1) - 1) // stride + 1
    out_w = (w - dilation * (k - 1) - 1) // stride + 1
    cols_in = rng.standard_normal((c * k * k, n * out_h * out_w)).astype(np.float32)
    want_cols, want_image = _oracle(x, k, stride, dilation, cols_in)
    cols = np.full(want_cols.shape, np.nan, np.float32)
    columns(x.reshape(-1), n, c, h, w, k, k, stride, stride, dilation, dilation, out_h, out_w, cols.reshape(-1),
            cols.shape[1], True)
    assert np.array_equal(cols, want_cols)
    image = np.full(x.shape, np.nan, np.float32)
    columns(image.reshape(-1), n, c, h, w, k, k, stride, stride, dilation, dilation, out_h, out_w,
            cols_in.reshape(-1), cols_in.shape[1], False)
    assert np.array_equal(image, want_image)
