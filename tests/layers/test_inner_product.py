"""InnerProduct's forward at multiples of 16 items up to 128 (the weights streamed once per strip
of 16 or 32 items, in register blocks), its weight gradient written whole and its bottom
gradient with the weight rows streamed: NumPy's float64 product as the oracle, and the same bits
at any thread count."""
import numpy as np
import pytest

from pycaffe_ft import intra_op
from pycaffe_ft.kernels.simd import WIDE
from pycaffe_ft.layers import inner_product
from tests.gradient_checker import make_layer


# (16, 1 << 17, 13): ~4 MB of weights a chunk is 12 rows here; (64, 800, 50): LeNet's ip1 by 32
# items, its rows in two chunks; (80, 33, 30): strips of 16 past 64 items
@pytest.mark.parametrize('items, inputs, outputs', [(16, 40, 13), (32, 17, 6), (48, 200, 31), (16, 1, 8),
                                                    (16, 1 << 17, 13), (64, 800, 50), (80, 33, 30), (128, 70, 25)])
def test_forward_at_multiples_of_16_items(restore_threads, items, inputs, outputs):
    rng = np.random.default_rng(items + inputs)
    layer, bottom, top = make_layer('type: "InnerProduct" inner_product_param { num_output: %d '
                                    'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }'
                                    % outputs, 1)
    bottom[0].reshape((items, inputs))
    bottom[0].data[...] = rng.standard_normal((items, inputs))
    layer.setup(bottom, top)
    w, bias = layer.blobs[0].data, layer.blobs[1].data
    expected = bottom[0].data.astype(np.float64) @ w.T.astype(np.float64) + bias
    results = []
    for threads in (1, 2):
        intra_op.set_num_threads(threads)
        layer.run_forward(bottom, top)
        results.append(top[0].data.copy())
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    assert np.array_equal(results[0], results[1])


@pytest.mark.parametrize('items, inputs, outputs, transpose', [(16, 300, 37, False), (7, 53, 29, True),
                                                               (5, 1 << 16, 13, False)])
def test_weight_gradient_written_whole_after_a_solver_clear(restore_threads, items, inputs, outputs, transpose):
    """A weight diff the Net left to the backward (``param_diffs_to_overwrite``) is written, not
    added to: dy.T @ x whatever it held (NumPy's float64 product as the oracle), the same bits at
    any thread count; the next backward adds to it as before, and the bias diff always adds."""
    rng = np.random.default_rng(items + inputs)
    layer, bottom, top = make_layer('type: "InnerProduct" inner_product_param { num_output: %d transpose: %s '
                                    'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }'
                                    % (outputs, str(transpose).lower()), 1)
    bottom[0].reshape((items, inputs))
    bottom[0].data[...] = rng.standard_normal((items, inputs))
    layer.setup(bottom, top)
    layer.run_forward(bottom, top)
    top[0].diff[...] = rng.standard_normal(top[0].shape)
    x, dy = bottom[0].data.astype(np.float64), top[0].diff.astype(np.float64)
    expected = x.T @ dy if transpose else dy.T @ x
    results = []
    for threads in (1, 2):
        intra_op.set_num_threads(threads)
        layer.blobs[0].diff[...] = np.nan
        layer.blobs[1].diff[...] = 1.0
        layer.param_diffs_to_overwrite = {0}
        layer.backward(top, [True], bottom)
        assert not layer.param_diffs_to_overwrite
        results.append(layer.blobs[0].diff.copy())
        np.testing.assert_allclose(layer.blobs[1].diff, 1.0 + dy.sum(axis=0), rtol=1e-5)
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    assert np.array_equal(results[0], results[1])
    layer.backward(top, [True], bottom)  # nothing left to overwrite: added as Caffe adds
    np.testing.assert_allclose(layer.blobs[0].diff, 2 * expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())


@pytest.mark.parametrize('items, inputs, outputs', [(16, 96, 40), (13, 64, 7), (64, 800, 50)])
def test_bottom_gradient_with_the_weight_rows_streamed(restore_threads, monkeypatch, items, inputs, outputs):
    """The bottom gradient by rows_streamed (here from any size, in blocks of 32 inputs): NumPy's
    float64 product as the oracle, the same bits at one thread and two, and the ReLU below
    applied to it as without the streaming."""
    monkeypatch.setattr(inner_product, 'STREAMED_FROM', 0)
    monkeypatch.setattr(inner_product, 'STREAMED_COLUMNS', 32)
    monkeypatch.setattr(inner_product, 'SIDE_BY_SIDE_FROM', 1 << 40)
    streamed, stream = [], inner_product._bottom_gradient
    monkeypatch.setattr(inner_product, '_bottom_gradient', lambda *a: streamed.append(stream(*a)))
    rng = np.random.default_rng(items + inputs)
    layer, bottom, top = make_layer('type: "InnerProduct" inner_product_param { num_output: %d '
                                    'weight_filler { type: "gaussian" } }' % outputs, 1)
    bottom[0].reshape((items, inputs))
    bottom[0].data[...] = rng.standard_normal((items, inputs))
    layer.setup(bottom, top)
    layer.run_forward(bottom, top)
    top[0].diff[...] = rng.standard_normal(top[0].shape)
    expected = top[0].diff.astype(np.float64) @ layer.blobs[0].data.astype(np.float64)
    results = []
    for threads in (1, 2):
        intra_op.set_num_threads(threads)
        layer.backward(top, [True], bottom)
        results.append(bottom[0].diff.copy())
    np.testing.assert_allclose(results[0], expected, rtol=1e-5, atol=1e-5 * np.abs(expected).max())
    assert np.array_equal(results[0], results[1])
    assert len(streamed) == (2 if WIDE else 0)
    layer.relu_below = 0
    layer.backward(top, [True], bottom)
    np.testing.assert_array_equal(bottom[0].diff, np.where(bottom[0].data > 0, results[0], 0))
