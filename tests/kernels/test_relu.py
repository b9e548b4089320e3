"""The ReLU kernels, and the NumPy references a first pass runs while they compile, against
NumPy's max(x, 0) and dy * (x > 0), bit for bit (signed zeros, NaNs and infinities included)."""
import numpy as np
import pytest

from pycaffe_ft.kernels import numpy_references
from pycaffe_ft.kernels.relu import relu_backward_kernel, relu_forward_kernel


@pytest.mark.parametrize('forward, backward', [(relu_forward_kernel, relu_backward_kernel),
                                               (numpy_references.relu_forward, numpy_references.relu_backward)],
                         ids=['kernels', 'references'])
def test_relu_gives_numpys_bits(forward, backward):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    dy = rng.standard_normal(1000).astype(np.float32)
    x[:8] = [-0.0, 0.0, np.nan, -np.nan, -np.inf, np.inf, -1.5, 2.5]
    dy[:8] = [-1.0, 2.0, -3.0, 4.0, np.inf, -np.inf, -5.0, np.nan]
    y, dx = np.empty_like(x), np.empty_like(x)
    forward(x, y)
    backward(x, dy, dx)
    assert y.tobytes() == np.maximum(x, 0).tobytes()
    with np.errstate(invalid='ignore'):
        assert dx.tobytes() == np.multiply(dy, x > 0).tobytes()
    in_place = x.copy()
    forward(in_place, in_place)  # as a ReLU run in place (and fused into the layer below) calls them
    assert in_place.tobytes() == y.tobytes()
    in_place = dy.copy()
    backward(x, in_place, in_place)
    assert in_place.tobytes() == dx.tobytes()
