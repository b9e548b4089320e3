"""InnerProduct's forward at 16, 32 and 48 items (the weights streamed once per 16 items, in
register blocks): NumPy's float64 product as the oracle, and the same bits at any thread count."""
import numpy as np
import pytest

from pycaffe_ft import intra_op
from tests.gradient_checker import make_layer


# (16, 1 << 17, 13): ~4 MB of weights a chunk is 6 rows here, so two threads split the rows
@pytest.mark.parametrize('items, inputs, outputs', [(16, 40, 13), (32, 17, 6), (48, 200, 31), (16, 1, 8),
                                                    (16, 1 << 17, 13)])
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
