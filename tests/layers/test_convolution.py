"""Convolution lowered by im2col in bands of output rows (one image's column buffer past
BAND_COLUMNS) against a float64 cross-correlation with stride, padding, dilation and groups:
the top, the weight and bias gradients and the bottom diff."""
import numpy as np
import pytest

from pycaffe_ft import intra_op
from pycaffe_ft.layers import convolution
from tests.gradient_checker import make_layer


def _taps(x, w, pad, stride, dilation, out_hw):
    """(a, b, the float64 input window that tap (a, b) of every output reads: (N, C, oh, ow))."""
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad[0], pad[0]), (pad[1], pad[1])))
    for a in range(w.shape[2]):
        for b in range(w.shape[3]):
            top, left = a * dilation[0], b * dilation[1]
            yield a, b, xp[:, :, top:top + stride[0] * out_hw[0]:stride[0], left:left + stride[1] * out_hw[1]:stride[1]]


def _reference(x, w, bias, dy, pad, stride, dilation, group):
    """float64 top, weight gradient, bias gradient and bottom diff of Caffe's convolution."""
    k, cg = w.shape[:2]
    out_hw = dy.shape[2:]
    y = np.zeros(dy.shape) + bias.reshape(1, -1, 1, 1)
    dw = np.zeros(w.shape)
    xp_shape = (x.shape[0], x.shape[1], x.shape[2] + 2 * pad[0], x.shape[3] + 2 * pad[1])
    dxp = np.zeros(xp_shape)
    kg = k // group
    for a, b, window in _taps(x, w, pad, stride, dilation, out_hw):
        top, left = a * dilation[0], b * dilation[1]
        for gi in range(group):
            ks, cs = slice(gi * kg, (gi + 1) * kg), slice(gi * cg, (gi + 1) * cg)
            y[:, ks] += np.einsum('kc,nchw->nkhw', w[ks, :, a, b], window[:, cs])
            dw[ks, :, a, b] = np.einsum('nkhw,nchw->kc', dy[:, ks], window[:, cs])
            dxp[:, cs, top:top + stride[0] * out_hw[0]:stride[0], left:left + stride[1] * out_hw[1]:stride[1]] += \
                np.einsum('kc,nkhw->nchw', w[ks, :, a, b], dy[:, ks])
    dx = dxp[:, :, pad[0]:pad[0] + x.shape[2], pad[1]:pad[1] + x.shape[3]]
    return y, dw, dy.sum(axis=(0, 2, 3)), dx


GEOMETRIES = [  # (N, C, H, W, K, kernel, stride, pad, dilation, group)
    (2, 3, 23, 23, 8, 11, 4, 0, 1, 1),  # AlexNet's conv1, small
    (2, 3, 30, 26, 6, 7, 2, 3, 1, 1),  # GoogLeNet's conv1: stride 2, padded
    (1, 4, 20, 17, 6, 3, 1, 2, 2, 2),  # dilated, two groups
    (3, 2, 13, 9, 4, 3, 2, 1, 1, 1)]


def _banded_layer(geometry, monkeypatch):
    """(layer, bottom, top, rng): a set-up im2col Convolution of this geometry whose image is
    lowered in bands (BAND_COLUMNS made small), input, weights and bias drawn from rng."""
    n, c, h, w, k, r, s, p, d, group = geometry
    monkeypatch.setattr(convolution, 'BAND_COLUMNS', 64)
    monkeypatch.setattr(convolution, 'BAND_MIN_COLUMNS', 8)
    layer, bottom, top = make_layer(
        'type: "Convolution" convolution_param { num_output: %d kernel_size: %d stride: %d pad: %d dilation: %d '
        'group: %d engine: CAFFE }' % (k, r, s, p, d, group), 1)
    rng = np.random.default_rng(sum(geometry))
    bottom[0].reshape((n, c, h, w))
    bottom[0].data[...] = rng.standard_normal(bottom[0].shape)
    layer.setup(bottom, top)
    assert len(layer._bands()) > 1
    layer.blobs[0].data[...] = rng.standard_normal(layer.blobs[0].shape) / np.sqrt(c // group * r * r)
    layer.blobs[1].data[...] = rng.standard_normal(k)
    return layer, bottom, top, rng


@pytest.mark.parametrize('geometry', GEOMETRIES)
@pytest.mark.parametrize('threads', [1, 2])
def test_im2col_in_bands_of_output_rows_matches_a_float64_convolution(geometry, threads, monkeypatch,
                                                                      restore_threads):
    n, c, h, w, k, r, s, p, d, group = geometry
    intra_op.set_num_threads(threads)
    layer, bottom, top, rng = _banded_layer(geometry, monkeypatch)
    top[0].diff[...] = rng.standard_normal(top[0].shape)
    layer.run_forward(bottom, top)
    layer.backward(top, [True], bottom)
    expected = _reference(bottom[0].data, layer.blobs[0].data.astype(np.float64), layer.blobs[1].data,
                          top[0].diff.astype(np.float64), (p, p), (s, s), (d, d), group)
    for ours, ref in zip((top[0].data, layer.blobs[0].diff, layer.blobs[1].diff, bottom[0].diff), expected):
        assert ours.shape == ref.shape
        assert np.abs(ours - ref).max() <= 1e-5 * np.abs(ref).max()


@pytest.mark.parametrize('geometry', [GEOMETRIES[2], (1,) + GEOMETRIES[1][1:]])
def test_one_images_bands_give_the_same_bits_on_any_thread_count(geometry, monkeypatch, restore_threads):
    """At batch 1 the bands go over the threads, each lowered and multiplied on one."""
    tops = []
    for threads in (1, 2):
        intra_op.set_num_threads(threads)
        layer, bottom, top, _ = _banded_layer(geometry, monkeypatch)
        layer.run_forward(bottom, top)
        tops.append(top[0].data.tobytes())
    assert tops[0] == tops[1]


@pytest.mark.skipif(not convolution.WIDE, reason='batched_gemm runs im2col products only on AVX-512')
@pytest.mark.parametrize('channels, size, outputs, kernel, pad', [(20, 12, 50, 5, 0), (12, 8, 16, 3, 1)])
def test_small_products_run_one_kernel_a_chunk_with_the_same_bits_on_any_thread_count(
        restore_threads, channels, size, outputs, kernel, pad):
    """LeNet's conv2 geometry (20 -> 50, 8 x 8 outputs) and a padded one: the backward through
    kernels.im2col_chunks (the forward direct), within rounding of a float64 convolution, bit
    for bit the same at one thread and two."""
    results = []
    for threads in (1, 2):
        intra_op.set_num_threads(threads)
        layer, bottom, top = make_layer(
            'type: "Convolution" convolution_param { num_output: %d kernel_size: %d pad: %d '
            'weight_filler { type: "xavier" } bias_filler { type: "gaussian" } }' % (outputs, kernel, pad), 1)
        rng = np.random.default_rng(7)
        bottom[0].reshape((24, channels, size, size))
        bottom[0].data[...] = rng.standard_normal(bottom[0].shape)
        layer.setup(bottom, top)
        assert layer._small_products() and layer.algorithms() == ('direct', 'im2col')
        layer.blobs[0].data[...] = rng.standard_normal(layer.blobs[0].shape) / channels
        layer.blobs[1].data[...] = rng.standard_normal(outputs)
        top[0].diff[...] = rng.standard_normal(top[0].shape)
        layer.run_forward(bottom, top)
        layer.backward(top, [True], bottom)
        results.append([a.copy() for a in (top[0].data, layer.blobs[0].diff, layer.blobs[1].diff, bottom[0].diff)])
    expected = _reference(bottom[0].data, layer.blobs[0].data.astype(np.float64), layer.blobs[1].data,
                          top[0].diff.astype(np.float64), (pad, pad), (1, 1), (1, 1), 1)
    for one, two, ref in zip(*results, expected):
        assert one.tobytes() == two.tobytes()
        assert np.abs(one - ref).max() <= 1e-5 * np.abs(ref).max()
