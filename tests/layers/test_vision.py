"""Gradient checks of the vision layers and STOCHASTIC pooling against its definition."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from tests.gradient_checker import LayerTestCase, make_layer


class TestDeconvolution(LayerTestCase):
    layer_type = 'Deconvolution'
    configs = [{'param': 'type: "Deconvolution" convolution_param { num_output: 3 kernel_size: 3 stride: 2 pad: 1 '
                         'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
                'bottoms': [(2, 2, 3, 3)]},
               {'param': 'type: "Deconvolution" convolution_param { num_output: 4 kernel_size: 2 group: 2 '
                         'weight_filler { type: "gaussian" } }', 'bottoms': [(1, 4, 3, 2)]}]


class TestIm2col(LayerTestCase):
    layer_type = 'Im2col'
    configs = [{'param': 'type: "Im2col" convolution_param { kernel_size: 3 pad: 1 stride: 2 }',
                'bottoms': [(2, 2, 4, 5)]}]


class TestLRN(LayerTestCase):
    layer_type = 'LRN'
    configs = [{'param': 'type: "LRN" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 k: 2 }',
                'bottoms': [(2, 5, 2, 2)]},
               {'param': 'type: "LRN" lrn_param { local_size: 3 alpha: 0.5 beta: 0.75 norm_region: WITHIN_CHANNEL }',
                'bottoms': [(1, 2, 4, 3)]},
               # the other power paths of the kernel (0.5: square root; 0.6: powf), more channels
               # than the window on both sides
               {'param': 'type: "LRN" lrn_param { local_size: 5 alpha: 0.3 beta: 0.5 }', 'bottoms': [(2, 7, 2, 1)]},
               {'param': 'type: "LRN" lrn_param { local_size: 5 alpha: 0.3 beta: 0.6 k: 1.5 }', 'bottoms': [(1, 6, 1, 3)]}]


def test_lrn_across_channels_matches_the_definition():
    """y = x (k + alpha/n sum of x^2 over the n channels centred on c)^-beta, in float64."""
    for size, beta in ((5, 0.75), (3, 0.5), (5, 0.6)):
        layer, bottom, top = make_layer('type: "LRN" lrn_param { local_size: %d alpha: 0.2 beta: %g k: 1.5 }'
                                        % (size, beta), 1)
        x = np.random.default_rng(size).standard_normal((3, 9, 4, 5)).astype(np.float32)
        bottom[0].reshape(x.shape)
        bottom[0].data[...] = x
        layer.setup(bottom, top)
        layer.run_forward(bottom, top)
        x64, pre = x.astype(np.float64), (size - 1) // 2
        for c in range(9):
            window = x64[:, max(c - pre, 0):min(c - pre + size, 9)]
            scale = 1.5 + 0.2 / size * (window ** 2).sum(axis=1)
            np.testing.assert_allclose(top[0].data[:, c], x64[:, c] * scale ** -beta, rtol=2e-6, atol=1e-7)


def test_lrn_keeps_its_scale_buffer_while_the_shape_holds():
    """The net reshapes every pass: a same-shape reshape keeps the scale array (a new one
    beyond malloc's mmap threshold would fault its pages in on every pass); a new shape gets
    a new one, and the output is the one a fresh layer gives."""
    layer, bottom, top = make_layer('type: "LRN" lrn_param { local_size: 3 alpha: 0.2 beta: 0.75 }', 1)
    bottom[0].reshape((2, 4, 3, 3))
    layer.setup(bottom, top)
    kept = layer.scale
    layer.reshape(bottom, top)
    assert layer.scale is kept
    x = np.random.default_rng(0).standard_normal((3, 4, 2, 5)).astype(np.float32)
    bottom[0].reshape(x.shape)
    bottom[0].data[...] = x
    layer.run_forward(bottom, top)
    assert layer.scale is not kept and layer.scale.shape == x.shape
    fresh, fresh_bottom, fresh_top = make_layer('type: "LRN" lrn_param { local_size: 3 alpha: 0.2 beta: 0.75 }', 1)
    fresh_bottom[0].reshape(x.shape)
    fresh_bottom[0].data[...] = x
    fresh.setup(fresh_bottom, fresh_top)
    fresh.run_forward(fresh_bottom, fresh_top)
    np.testing.assert_array_equal(top[0].data, fresh_top[0].data)


class TestSPP(LayerTestCase):
    layer_type = 'SPP'
    configs = [{'param': 'type: "SPP" spp_param { pyramid_height: 2 pool: MAX }', 'bottoms': [((2, 2, 5, 4), 'distinct')]},
               {'param': 'type: "SPP" spp_param { pyramid_height: 3 pool: AVE }', 'bottoms': [(1, 2, 8, 8)]}]


def _windows(x, k, s):
    n, c, h, w = x.shape
    oh, ow = -(-(h - k) // s) + 1, -(-(w - k) // s) + 1
    for i in range(oh):
        for j in range(ow):
            yield i, j, x[:, :, i * s:min(i * s + k, h), j * s:min(j * s + k, w)]


def test_stochastic_pooling_test_phase_is_the_weighted_average():
    layer, bottom, top = make_layer('type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 3 stride: 2 }', 1,
                                    caffe.TEST)
    x = np.random.default_rng(0).uniform(0.1, 1, (2, 3, 7, 6)).astype(np.float32)
    bottom[0].reshape(x.shape)
    bottom[0].data[...] = x
    layer.setup(bottom, top)
    layer.run_forward(bottom, top)
    for i, j, win in _windows(x.astype(np.float64), 3, 2):
        expected = (win ** 2).sum(axis=(2, 3)) / win.sum(axis=(2, 3))
        np.testing.assert_allclose(top[0].data[:, :, i, j], expected, rtol=1e-5)


def test_stochastic_pooling_train_samples_in_proportion_and_routes_gradient():
    layer, bottom, top = make_layer('type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 2 stride: 2 }', 1)
    x = np.array([[[[1, 3], [0, 4]]]], np.float32)
    bottom[0].reshape(x.shape)
    bottom[0].data[...] = x
    layer.setup(bottom, top)
    counts = {}
    for _ in range(4000):
        layer.run_forward(bottom, top)
        v = float(top[0].data.ravel()[0])
        counts[v] = counts.get(v, 0) + 1
    assert 0 not in counts and set(counts) <= {1, 3, 4}
    for v, p in ((1, 1 / 8), (3, 3 / 8), (4, 4 / 8)):
        assert abs(counts[v] / 4000 - p) < 0.03
    top[0].diff[...] = 2
    layer.backward(top, [True], bottom)
    chosen = float(top[0].data.ravel()[0])
    assert bottom[0].diff.sum() == 2 and bottom[0].diff[x == chosen].item() == 2


def _pool_reference(x, k, s, p, out_hw, method):
    """Caffe's MAX (first maximum in row-major window order, its flat index) and AVE (float32
    sums in window order over the window clipped to the image, divided by its size clipped to
    the padded image), one output at a time."""
    h, w = x.shape[-2:]
    y = np.zeros(x.shape[:2] + out_hw, np.float32)
    mask = np.full(y.shape, -1.0, np.float32)
    for n, c, oy, ox in np.ndindex(*y.shape):
        h0, w0 = oy * s - p, ox * s - p
        h1, w1 = min(h0 + k, h + p), min(w0 + k, w + p)
        size = np.float32((h1 - h0) * (w1 - w0))
        best, total = np.float32(-3.4028234663852886e38), np.float32(0)
        for yy in range(max(h0, 0), min(h1, h)):
            for xx in range(max(w0, 0), min(w1, w)):
                v = x[n, c, yy, xx]
                total += v
                if v > best:
                    best, mask[n, c, oy, ox] = v, yy * w + xx
        y[n, c, oy, ox] = best if method == 'MAX' else total / size
    return y, mask


def _pool_backward_reference(dy, x_shape, k, s, p, method, mask):
    """Caffe's backward: dx = 0, then each output in row-major order adds its dy (MAX: at its
    argmax) or dy / window size (AVE: over the clipped window), in float32."""
    h, w = x_shape[-2:]
    dx = np.zeros(x_shape, np.float32)
    for n, c, oy, ox in np.ndindex(*dy.shape):
        if method == 'MAX':
            if mask[n, c, oy, ox] >= 0:
                dx[n, c].reshape(-1)[int(mask[n, c, oy, ox])] += dy[n, c, oy, ox]
            continue
        h0, w0 = oy * s - p, ox * s - p
        h1, w1 = min(h0 + k, h + p), min(w0 + k, w + p)
        g = dy[n, c, oy, ox] / np.float32((h1 - h0) * (w1 - w0))
        for yy in range(max(h0, 0), min(h1, h)):
            for xx in range(max(w0, 0), min(w1, w)):
                dx[n, c, yy, xx] += g
    return dx


@pytest.mark.parametrize('method', ['MAX', 'AVE'])
def test_pooling_keeps_its_kernel_calls_only_while_its_arrays_stand(method):
    """The layer binds its kernel calls to the blobs' arrays on a first pass and keeps them
    (PoolingLayer._run): new values in the same arrays, a reshaped bottom (new arrays and
    geometry, then the first shape again) and the ReLU below masked in the backward each give
    Caffe's outputs and gradients."""
    layer, bottom, top = make_layer('type: "Pooling" pooling_param { pool: %s kernel_size: 3 stride: 2 }' % method, 1)
    rng = np.random.default_rng(5)
    bottom[0].reshape((2, 3, 13, 13))
    layer.setup(bottom, top)
    for shape, relu_below in (((2, 3, 13, 13), -1), ((2, 3, 13, 13), -1), ((4, 2, 9, 11), -1), ((4, 2, 9, 11), 0),
                              ((2, 3, 13, 13), 0)):
        bottom[0].reshape(shape)
        x = rng.standard_normal(shape).astype(np.float32)
        bottom[0].data[...] = x
        layer.run_forward(bottom, top)
        y, mask = _pool_reference(x, 3, 2, 0, top[0].shape[2:], method)
        np.testing.assert_array_equal(top[0].data, y, err_msg=str(shape))
        dy = rng.standard_normal(top[0].shape).astype(np.float32)
        top[0].diff[...] = dy
        layer.relu_below = relu_below
        layer.backward(top, [True], bottom)
        dx = _pool_backward_reference(dy, shape, 3, 2, 0, method, mask)
        if relu_below == 0:
            dx = dx * (x > 0)
        np.testing.assert_array_equal(bottom[0].diff, dx, err_msg=str((shape, relu_below)))
    assert layer._bound  # the calls were bound (the kernels were compiled in the first pass here)


@pytest.mark.parametrize('sixteen', [False, True], ids=['8-lanes', '16-lanes'])
@pytest.mark.parametrize('rows_from', [None, 1, 10 ** 9, 'plane-vectors', 'row-pairs', 'reference'],
                         ids=['default', 'rows', 'plane-lanes', 'plane-vectors', 'row-pairs', 'reference'])
def test_max_and_ave_pooling_match_caffes_definition_bit_for_bit(rows_from, sixteen, monkeypatch):
    """Random geometries (pads, strides, windows clipped at the edges or empty) and inputs with
    ties, negative zeros, infinities, -FLT_MAX and NaN: both ways through the planes give
    Caffe's bits, forward and backward. By rows (stride 1 or 2; vector blocks of 8 outputs, the last one overlapping,
    rows shorter than 8 in one block whose spare lanes the next row overwrites, edge windows
    masked lane by lane, rows whose loads or stores would leave the array one by one) and by
    eight planes at a time as lanes (6, 15 or 20 planes: full groups and partial ones): each
    geometry both ways (``rows_from``: the narrowest rows that go by rows, for MAX and AVE) and
    the way the layer picks by default; with vectors of eight lanes (rows in blocks of eight
    outputs, rows of up to eight two a sixteen-lane vector, eight planes a vector) and of
    sixteen (every row in blocks of sixteen, rows shorter than that too; sixteen planes a
    vector); and the small-plane ways, AVX-512 only: one plane a vector (planes of at most 64
    inputs and 16 outputs), row pairs (planes at most 16 wide, rows of at most 8 outputs;
    here also where one plane a vector would go) and, for max pooling, single rows by window
    rows (planes at most 32 wide, rows of at most 16 outputs), the layer's default where they
    apply, so the forced ways above turn them off; planes whose vectors would read or store past the arrays go
    through a scratch plane. And the forward's references (Caffe's loops, run while the vector
    kernels compile in the background; one parametrization, as they have no lanes)."""
    from pycaffe_ft.kernels import pooling as kernels
    if rows_from == 'reference':
        if sixteen:
            pytest.skip('the references have no lanes: tested once, with 8-lanes')
        monkeypatch.setattr(kernels, 'ready', lambda kernel, args: False)
        rows_from = None
    elif rows_from in ('plane-vectors', 'row-pairs'):
        if not kernels.WIDE or not sixteen:
            pytest.skip('the small-plane ways: sixteen lanes, AVX-512 only')
        monkeypatch.setattr(kernels, 'PLANE_VECTORS', rows_from == 'plane-vectors')
        monkeypatch.setattr(kernels, 'ROW_PAIRS', rows_from == 'row-pairs')
        rows_from = None
    elif rows_from is not None:
        monkeypatch.setattr(kernels, 'PLANE_VECTORS', False)
        monkeypatch.setattr(kernels, 'ROW_PAIRS', False)
    if rows_from is not None:
        monkeypatch.setattr(kernels, 'ROWS_MIN_WIDTH', {False: rows_from, True: rows_from})
    monkeypatch.setattr(kernels, 'SIXTEEN_FROM', 1 if sixteen else None)
    monkeypatch.setattr(kernels, 'PLANE_LANES', 16 if sixteen else 8)
    if rows_from is not None:  # by rows: rows of up to eight outputs two a vector (the default with AVX-512)
        monkeypatch.setattr(kernels, 'PAIRS_UP_TO', 8 if rows_from == 1 else 0)
    rng = np.random.default_rng(3)
    for trial in range(80):
        h, w = int(rng.integers(2, 14)), int(rng.integers(2, 14 if trial < 30 else 41))
        k = int(rng.integers(1, min(h, w) + 1))
        s, p = int(rng.integers(1, 4)), int(rng.integers(0, k))
        shape = ((2, 3), (3, 5), (4, 5))[trial % 3] + (h, w)
        x = rng.integers(-2, 3, shape).astype(np.float32) * np.float32(0.37)
        x[x == 0] = np.float32(-0.0) if trial % 3 == 0 else np.float32(0.0)
        if trial % 4 == 0:
            x.reshape(-1)[rng.integers(0, x.size, 3)] = (np.inf, -np.inf, np.float32(-3.4028234663852886e38))
        if trial % 4 == 1:  # a NaN never wins a max (Caffe compares with >) and makes its averages NaN
            x.reshape(-1)[rng.integers(0, x.size, 2)] = np.nan
        for method in ('MAX', 'AVE'):
            layer, bottom, top = make_layer('type: "Pooling" pooling_param { pool: %s kernel_size: %d '
                                            'stride: %d pad: %d }' % (method, k, s, p), 1)
            bottom[0].reshape(x.shape)
            bottom[0].data[...] = x
            top.append(caffe.Blob()) if method == 'MAX' else None
            layer.setup(bottom, top)
            layer.run_forward(bottom, top)
            with np.errstate(divide='ignore', invalid='ignore'):  # Caffe's 0/0 for an empty window
                y, mask = _pool_reference(x, k, s, p, top[0].shape[2:], method)
            np.testing.assert_array_equal(top[0].data, y, err_msg=str((method, h, w, k, s, p)))
            if method == 'MAX':
                np.testing.assert_array_equal(top[1].data, mask, err_msg=str((h, w, k, s, p)))
            dy = rng.integers(-3, 4, top[0].shape).astype(np.float32) * np.float32(0.29)
            dy[dy == 0] = np.float32(-0.0)
            top[0].diff[...] = dy
            layer.backward(top, [True], bottom)
            with np.errstate(divide='ignore', invalid='ignore'):
                dx = _pool_backward_reference(dy, x.shape, k, s, p, method, mask)
            assert np.array_equal(bottom[0].diff, dx) and np.array_equal(np.signbit(bottom[0].diff), np.signbit(dx)), \
                (method, h, w, k, s, p)
