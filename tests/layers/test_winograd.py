"""Winograd convolution: the written-out transforms against their exact derivation, the
results against a float64 NumPy convolution, thread-count independence, and when
ConvolutionLayer uses it."""
import sys

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft import intra_op
from pycaffe_ft.kernels import tiered, winograd as kernels
from pycaffe_ft.layers.winograd import Winograd, toom_cook
from tests.gradient_checker import LayerTestCase


def _matrix_of(kind, rows, cols):
    """The (rows, cols) matrix a 1-D transform applies, read off unit vectors."""
    out = np.zeros((rows, cols), np.float32)
    for b in range(cols):
        src = np.zeros(cols, np.float32)
        src[b] = 1
        dst = np.zeros(rows, np.float32)
        kernels._line(kind, src, 0, 2, 1, dst, 0, 1, 1)
        out[:, b] = dst
    return out


@pytest.mark.parametrize('r', [3, 5])
def test_the_written_out_transforms_are_the_derived_ones(r):
    a_t, g, b_t = (np.array(m, np.float64) for m in toom_cook(2, r))
    weight_g = np.array(toom_cook(r, 2)[1], np.float64)
    alpha = r + 1
    kinds = {3: (kernels.INPUT_4, kernels.DIFF_4, kernels.OUTPUT_4),
             5: (kernels.INPUT_6, kernels.DIFF_6, kernels.OUTPUT_6)}[r]
    for kind, expected in zip(kinds, (b_t, weight_g, a_t)):
        got = _matrix_of(kind, expected.shape[0], expected.shape[1])
        np.testing.assert_allclose(got, expected, rtol=1e-7, atol=1e-7)
    # and the derivation is a correlation: A^T [(G g) * (B^T d)] = sum_k g[k] d[i + k]
    rng = np.random.default_rng(r)
    d, w = rng.standard_normal(alpha), rng.standard_normal(r)
    np.testing.assert_allclose(a_t @ ((g @ w) * (b_t @ d)), np.correlate(d, w, 'valid'), rtol=1e-12)


def _direct(x, w, pad, group):
    """float64 cross-correlation (Caffe's convolution) of x (N, C, H, W) with w (K, C/g, r, r)."""
    n, c, h, wd = x.shape
    k, cg, r, _ = w.shape
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    oh, ow = h + 2 * pad[0] - r + 1, wd + 2 * pad[1] - r + 1
    y = np.zeros((n, k, oh, ow))
    kg = k // group
    for gi in range(group):
        for a in range(r):
            for b in range(r):
                y[:, gi * kg:(gi + 1) * kg] += np.einsum(
                    'kc,nchw->nkhw', w[gi * kg:(gi + 1) * kg, :, a, b].astype(np.float64),
                    xp[:, gi * cg:(gi + 1) * cg, a:a + oh, b:b + ow])
    return y


def _direct_gradients(x, w, dy, pad, group):
    """float64 bottom diff and weight diff of :func:`_direct`."""
    n, c, h, wd = x.shape
    k, cg, r, _ = w.shape
    oh, ow = dy.shape[2:]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    dxp, dw = np.zeros_like(xp), np.zeros(w.shape)
    kg = k // group
    for gi in range(group):
        ks, cs = slice(gi * kg, (gi + 1) * kg), slice(gi * cg, (gi + 1) * cg)
        for a in range(r):
            for b in range(r):
                dw[ks, :, a, b] = np.einsum('nkhw,nchw->kc', dy[:, ks], xp[:, cs, a:a + oh, b:b + ow])
                dxp[:, cs, a:a + oh, b:b + ow] += np.einsum('kc,nkhw->nchw', w[ks, :, a, b], dy[:, ks])
    return dxp[:, :, pad[0]:pad[0] + h, pad[1]:pad[1] + wd], dw


GEOMETRIES = [  # (N, C, H, W, K, r, pad, group): odd and even sizes, unequal pads, groups
    (3, 16, 7, 9, 16, 5, (2, 1), 1), (2, 32, 8, 8, 32, 3, (1, 1), 2), (2, 16, 5, 6, 32, 3, (0, 2), 1),
    (5, 32, 16, 16, 32, 5, (2, 2), 1), (2, 16, 9, 9, 16, 5, (4, 0), 1), (1, 48, 13, 13, 64, 3, (1, 1), 1)]
BANDED = [  # one image: 2 bands of output rows; 4, the last one odd; products in BLAS, by position
    (1, 16, 20, 12, 16, 3, (1, 1), 1), (1, 16, 33, 9, 24, 5, (2, 1), 1), (1, 128, 16, 6, 96, 3, (1, 1), 1)]


def _case(geometry):
    n, c, h, wd, k, r, pad, group = geometry
    rng = np.random.default_rng(sum(geometry[:6]))
    x = rng.standard_normal((n, c, h, wd)).astype(np.float32)
    w = (rng.standard_normal((k, c // group, r, r)) / np.sqrt(c // group * r * r)).astype(np.float32)
    out_hw = (h + 2 * pad[0] - r + 1, wd + 2 * pad[1] - r + 1)
    dy = rng.standard_normal((n, k) + out_hw).astype(np.float32)
    return Winograd(r, pad, group), x, w, dy, (h, wd), out_hw


def _run(geometry):
    plan, x, w, dy, in_hw, out_hw = _case(geometry)
    bias = np.linspace(-1, 1, w.shape[0]).astype(np.float32)
    y = np.empty((x.shape[0], w.shape[0]) + out_hw, np.float32)
    plan.forward(x, w, bias, y, in_hw, out_hw)
    dx = np.empty_like(x)
    plan.backward_data(dy, w, dx, in_hw, out_hw)
    return y, dx, plan.weight_gradient(x, dy, in_hw, out_hw)


@pytest.mark.parametrize('geometry', GEOMETRIES + BANDED)
def test_results_match_a_float64_convolution(geometry):
    plan, x, w, dy, in_hw, out_hw = _case(geometry)
    y, dx, dw = _run(geometry)
    bias = np.linspace(-1, 1, w.shape[0]).reshape(1, -1, 1, 1)
    ref_dx, ref_dw = _direct_gradients(x, w, dy.astype(np.float64), plan.pad, plan.group)
    for ours, ref in ((y, _direct(x, w, plan.pad, plan.group) + bias), (dx, ref_dx), (dw, ref_dw)):
        assert ours.dtype == np.float32 and ours.shape == ref.shape
        # F(2, 3) rounds like im2col; F(2, 5) to a few 1e-6 of the scale (see POINTS)
        assert np.abs(ours - ref).max() <= (5e-7 if plan.r == 3 else 5e-6) * np.abs(ref).max()


@pytest.mark.parametrize('geometry', [GEOMETRIES[3]] + BANDED)
def test_the_bits_do_not_depend_on_the_thread_count(restore_threads, geometry):
    results = []
    for threads in (1, 2):
        intra_op.set_num_threads(threads)
        results.append(_run(geometry))
    for one, two in zip(*results):
        assert np.array_equal(one, two)


@pytest.mark.parametrize('geometry', BANDED[:2])
def test_bands_of_one_image_give_the_whole_images_bits(monkeypatch, restore_threads, geometry):
    """On two threads one image's passes run in bands of whole tile rows where the products
    run in batched_gemm: every tile's bits are those of the whole image at once."""
    intra_op.set_num_threads(2)
    plan, _, _, _, _, out_hw = _case(geometry)
    bands = plan._bands(out_hw)
    assert len(bands) > 1 and bands[0][0] == 0 and bands[-1][1] == out_hw[0]
    assert all(top % 2 == 0 and top == above_bottom for (top, _), (_, above_bottom) in zip(bands[1:], bands[:-1]))
    split = []
    monkeypatch.setattr(Winograd, '_bands', lambda self, hw, bands=Winograd._bands: split.append(hw) or bands(self, hw))
    banded = _run(geometry)
    assert len(split) == 2  # the forward and the bottom diff
    monkeypatch.setattr(sys.modules[Winograd.__module__], 'BANDS_AT_BATCH_1', 1)
    for ours, whole in zip(banded, _run(geometry)):
        assert ours.tobytes() == whole.tobytes()


@pytest.mark.parametrize('flip', [False, True])
def test_the_weight_transform_in_parts_over_the_threads_gives_the_whole_ones_bits(monkeypatch, restore_threads,
                                                                                   flip):
    plan, _, w, _, _, _ = _case(GEOMETRIES[1])  # two groups
    whole = plan.transform_weights(w, flip)
    intra_op.set_num_threads(2)
    monkeypatch.setattr(sys.modules[Winograd.__module__], 'MIN_PART_PAIRS', 7)
    assert plan.transform_weights(w, flip).tobytes() == whole.tobytes()


def test_the_backward_of_one_image_in_bands_calls_after_once(restore_threads):
    intra_op.set_num_threads(2)
    plan, x, w, dy, in_hw, out_hw = _case(BANDED[0])
    calls, dx = [], np.empty_like(x)
    plan.backward_data(dy, w, dx, in_hw, out_hw, after=lambda lo, hi: calls.append((lo, hi, dx.copy())))
    assert len(calls) == 1 and calls[0][:2] == (0, 1) and np.array_equal(calls[0][2], dx)


@pytest.mark.parametrize('geometry', GEOMETRIES + BANDED + [(2, 128, 6, 6, 96, 3, (1, 1), 1)])  # the last: BLAS products
def test_the_numpy_references_give_the_kernels_bits(monkeypatch, geometry):
    """What a pass runs while its kernels compile in the background (every kernel's NumPy
    reference, and batched_gemm's reference)."""
    kernels_run = _run(geometry)
    monkeypatch.setattr(tiered, 'ready', lambda kernel, args: False)
    for ours, reference in zip(kernels_run, _run(geometry)):
        assert ours.tobytes() == reference.tobytes()


@pytest.mark.parametrize('geometry', [GEOMETRIES[1], GEOMETRIES[3]])
def test_the_bits_do_not_depend_on_the_images_a_pipeline_step(monkeypatch, geometry):
    """The pipelines take a few images at a time (STEP_VALUES): one image a step or all of
    them in one give the same forward and bottom diff, and weight gradients that differ only
    in how the tiles' products were summed (each as close to float64 as
    test_results_match_a_float64_convolution asks)."""
    results = []
    for values in (1, 1 << 30):
        monkeypatch.setattr(sys.modules[Winograd.__module__], 'STEP_VALUES', values)
        results.append(_run(geometry))
    (y, dx, dw), (y_all, dx_all, dw_all) = results
    assert np.array_equal(y, y_all) and np.array_equal(dx, dx_all)
    plan, x, w, dy, _, _ = _case(geometry)
    ref = _direct_gradients(x, w, dy.astype(np.float64), plan.pad, plan.group)[1]
    for ours in (dw, dw_all):
        assert np.abs(ours - ref).max() <= (5e-7 if plan.r == 3 else 5e-6) * np.abs(ref).max()

NET = '''
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: %(channels)d dim: 10 dim: 10 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 16 kernel_size: %(r)d pad: 1 %(engine)s
                            weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "gaussian" } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: %(pool)s kernel_size: 2 stride: 2 } }
'''


def _net(tmp_path, r, pool, engine='', outputs=16, channels=48):
    path = tmp_path / ('%d_%s_%s_%d_%d.prototxt' % (r, pool, engine.split(':')[-1].strip(), outputs, channels))
    path.write_text((NET % {'r': r, 'pool': pool, 'engine': engine, 'channels': channels}).replace(
        'num_output: 16', 'num_output: %d' % outputs))
    caffe.set_random_seed(5)
    net = caffe.Net(str(path), caffe.TRAIN)
    net.blobs['data'].data[...] = np.random.default_rng(0).standard_normal(net.blobs['data'].shape)
    net.forward()
    net.blobs['pool'].diff[...] = 1
    net.backward()
    return net


@pytest.mark.parametrize('r', [3, 5])
def test_forward_is_caffes_arithmetic_before_a_max_pooling(tmp_path, r):
    """A later layer that picks by value (MAX pooling) keeps the convolution's forward in
    Caffe's im2col arithmetic, bit for bit (48 input channels: above DIRECT_MAX_CHANNELS); an
    AVE pooling lets Winograd run it; ``engine: CAFFE`` turns Winograd off, backward included.
    The backward pass takes Winograd either way (48 -> 16 channels: 5x5 too), within rounding
    of im2col's."""
    plain = _net(tmp_path, r, 'MAX', 'engine: CAFFE')
    assert plain.layers[1].winograd is None
    before_max = _net(tmp_path, r, 'MAX')
    assert before_max.layers[1].winograd is not None and before_max.layers[1].before_value_selection
    assert np.array_equal(before_max.blobs['conv'].data, plain.blobs['conv'].data)
    assert np.array_equal(before_max.blobs['pool'].data, plain.blobs['pool'].data)
    before_ave = _net(tmp_path, r, 'AVE')
    reference = _net(tmp_path, r, 'AVE', 'engine: CAFFE')
    assert not before_ave.layers[1].before_value_selection
    name = 'Winograd F(2x2, %dx%d)' % (r, r)
    assert plain.layers[1].algorithms() == ('im2col', 'im2col')
    assert before_max.layers[1].algorithms() == ('im2col', name)
    assert before_ave.layers[1].algorithms() == (name, name)
    ours, ref = before_ave.blobs['conv'].data, reference.blobs['conv'].data
    assert not np.array_equal(ours, ref)  # another algorithm ...
    assert np.abs(ours - ref).max() <= 5e-6 * np.abs(ref).max()  # ... the same numbers
    for net, ref in ((before_max, plain), (before_ave, reference)):
        for ours, theirs in ((net.params['conv'][0].diff, ref.params['conv'][0].diff),
                             (net.blobs['data'].diff, ref.blobs['data'].diff)):
            assert np.abs(ours - theirs).max() <= (1e-6 if r == 3 else 5e-6) * np.abs(theirs).max()


def test_5x5_backward_keeps_im2col_where_its_products_would_run_in_blas(tmp_path):
    """20 output channels (not a multiple of 8: OpenBLAS would run the per-position products,
    slower than im2col) keep Caffe's im2col arithmetic in the 5x5 backward, bit for bit."""
    ours, plain = _net(tmp_path, 5, 'AVE', outputs=20), _net(tmp_path, 5, 'AVE', 'engine: CAFFE', outputs=20)
    assert ours.layers[1].algorithms() == ('Winograd F(2x2, 5x5)', 'im2col')
    assert np.array_equal(ours.params['conv'][0].diff, plain.params['conv'][0].diff)
    assert np.array_equal(ours.blobs['data'].diff, plain.blobs['data'].diff)


@pytest.mark.parametrize('r', [3, 5])
def test_few_input_channels_before_a_max_pooling_run_forward_directly(tmp_path, r):
    """16 input channels (up to DIRECT_MAX_CHANNELS): the forward im2col would run goes direct,
    within rounding of Caffe's arithmetic (the same chain of multiply-adds at every position:
    see tests/kernels/test_direct_conv.py for the ties); the backward stays Winograd."""
    from pycaffe_ft.layers.convolution import DIRECT_MAX_CHANNELS
    assert 16 <= DIRECT_MAX_CHANNELS < 48
    ours, plain = _net(tmp_path, r, 'MAX', channels=16), _net(tmp_path, r, 'MAX', 'engine: CAFFE', channels=16)
    assert ours.layers[1].algorithms() == ('direct', 'Winograd F(2x2, %dx%d)' % (r, r))
    theirs = plain.blobs['conv'].data
    assert np.abs(ours.blobs['conv'].data - theirs).max() <= 1e-6 * np.abs(theirs).max()


def test_value_selection_is_seen_anywhere_later_in_the_net():
    """Eltwise MAX and ArgMax pick by value as MAX pooling does; SUM and AVE do not."""
    from tests.gradient_checker import make_layer
    picks = {'type: "Eltwise" eltwise_param { operation: MAX }': True,
             'type: "Eltwise" eltwise_param { operation: SUM }': False,
             'type: "ArgMax"': True,
             'type: "Pooling" pooling_param { pool: MAX kernel_size: 2 }': True,
             'type: "Pooling" pooling_param { pool: STOCHASTIC kernel_size: 2 }': True,
             'type: "Pooling" pooling_param { pool: AVE kernel_size: 2 }': False,
             'type: "ReLU"': False}
    for text, expected in picks.items():
        bottoms = 2 if 'Eltwise' in text else 1
        layer, bottom, top = make_layer(text, bottoms)
        for b in bottom:
            b.reshape((1, 2, 4, 4))
        layer.setup(bottom, top)
        assert layer.selects_by_value is expected, text


class TestWinogradConvolution(LayerTestCase):
    """The shared gradient check over convolutions that take the Winograd paths (3x3 and 5x5,
    16 channels, groups)."""
    layer_type = 'Convolution'
    configs = [{'param': 'type: "Convolution" convolution_param { num_output: 16 kernel_size: %d pad: %d '
                         'group: %d weight_filler { type: "gaussian" std: 0.1 } bias_filler { type: "gaussian" } }'
                         % (r, pad, group),
                'bottoms': [(2, 16 * group, 5, 6)], 'threshold': 2e-3}
               for r, pad, group in ((3, 1, 1), (5, 2, 1), (3, 0, 2))]
