"""The ReLU kernels against NumPy's max(x, 0) and dy * (x > 0), bit for bit (signed zeros, NaNs
and infinities included)."""
import numpy as np

from pycaffe_ft.kernels.relu import relu_backward, relu_forward


def test_relu_kernels_give_numpys_bits():
    rng = np.random.default_rng(0)
    x = rng.standard_normal(1000).astype(np.float32)
    dy = rng.standard_normal(1000).astype(np.float32)
    x[:8] = [-0.0, 0.0, np.nan, -np.nan, -np.inf, np.inf, -1.5, 2.5]
    dy[:8] = [-1.0, 2.0, -3.0, 4.0, np.inf, -np.inf, -5.0, np.nan]
    y, dx = np.empty_like(x), np.empty_like(x)
    relu_forward(x, y)
    relu_backward(x, dy, dx)
    assert y.tobytes() == np.maximum(x, 0).tobytes()
    with np.errstate(invalid='ignore'):
        assert dx.tobytes() == np.multiply(dy, x > 0).tobytes()
