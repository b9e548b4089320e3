"""caffe.coord_map: offsets derived by hand from the layer geometry, a crop that really aligns
pixel for pixel through a net, and pycaffe's error kinds."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft import coord_map
from pycaffe_ft import layers as L
from pycaffe_ft import params as P


def _build(n, tmp_path):
    path = tmp_path / 'net.prototxt'
    path.write_text(str(n.to_proto()))
    return caffe.Net(str(path), caffe.TEST)


def test_fcn_style_offset_matches_the_geometry(tmp_path):
    """conv k3 pad 100: o = i + 99; pool k2 s2: o = (o - 0.5) / 2; conv k3 pad 1: o = o;
    pool k2 s2 again; deconv k8 s4: o = 4 o + 3.5. Composed: o = i + 101, so crop offset 101."""
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 20, 20]))
    n.conv1 = L.Convolution(n.data, num_output=2, kernel_size=3, pad=100)
    n.relu1 = L.ReLU(n.conv1, in_place=True)
    n.pool1 = L.Pooling(n.relu1, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.conv2 = L.Convolution(n.pool1, num_output=2, kernel_size=3, pad=1)
    n.pool2 = L.Pooling(n.conv2, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.up = L.Deconvolution(n.pool2, convolution_param=dict(num_output=1, kernel_size=8, stride=4))
    axis, scale, shift = coord_map.coord_map_from_to(n.up, n.data)
    assert (axis, scale.tolist(), shift.tolist()) == (1, [1.0], [-101.0])
    n.score = coord_map.crop(n.up, n.data)
    crop_layer = n.to_proto().layer[-1]
    assert (crop_layer.type, crop_layer.crop_param.axis, list(crop_layer.crop_param.offset)) == ('Crop', 2, [101])
    net = _build(n, tmp_path)
    assert net.blobs['score'].data.shape == (1, 1, 20, 20)


def test_the_crop_aligns_pixel_for_pixel(tmp_path):
    """An identity conv (pad 5: o = i + 4), 2x2 max pooling and a 2x2 stride-2 deconv of ones
    (nearest upsampling) give back an input that is constant on 2x2 blocks, shifted by 4;
    crop() finds offset 4, and the cropped top equals the input exactly."""
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 12, 12]))
    n.conv = L.Convolution(n.data, num_output=1, kernel_size=3, pad=5, bias_term=False)
    n.pool = L.Pooling(n.conv, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.up = L.Deconvolution(n.pool, convolution_param=dict(num_output=1, kernel_size=2, stride=2, bias_term=False))
    n.out = coord_map.crop(n.up, n.data)
    net = _build(n, tmp_path)
    net.params['conv'][0].data[...] = 0
    net.params['conv'][0].data[0, 0, 1, 1] = 1
    net.params['up'][0].data[...] = 1
    blocks = np.random.default_rng(0).standard_normal((6, 6)).astype(np.float32)
    image = np.kron(blocks, np.ones((2, 2), np.float32))
    net.blobs['data'].data[0, 0] = image
    net.forward()
    np.testing.assert_array_equal(net.blobs['out'].data[0, 0], image)


def test_misaligned_and_unconnected_tops_raise_pycaffes_kinds():
    n = caffe.NetSpec()
    n.data = L.Input(shape=dict(dim=[1, 1, 8, 8]))
    n.other = L.Input(shape=dict(dim=[1, 1, 8, 8]))
    n.half = L.Convolution(n.data, num_output=1, kernel_size=4, pad=2)  # o = i + 0.5
    n.pool = L.Pooling(n.data, pool=P.Pooling.MAX, kernel_size=2, stride=2)
    n.small = L.Convolution(n.data, num_output=1, kernel_size=3)  # o = i - 1: smaller than data
    with pytest.raises(AssertionError, match='fractional'):
        coord_map.crop(n.half, n.data)
    with pytest.raises(AssertionError, match='scale'):
        coord_map.crop(n.pool, n.data)
    with pytest.raises(AssertionError, match='negative'):
        coord_map.crop(n.small, n.data)
    with pytest.raises(RuntimeError, match='connected'):
        coord_map.coord_map_from_to(n.data, n.other)
    with pytest.raises(coord_map.CropAlignmentError):
        coord_map.crop(n.half, n.data)


def test_maps_compose_and_invert():
    m = (1, np.array([0.5]), np.array([1.5]))
    axis, scale, shift = coord_map.compose(m, coord_map.inverse(m))
    assert axis == 1 and scale.tolist() == [1.0] and shift.tolist() == [0.0]
    assert coord_map.compose(coord_map.IDENTITY, m)[0] == 1
    with pytest.raises(coord_map.AxisMismatchException):
        coord_map.compose((1, 1, 0), (2, 1, 0))
