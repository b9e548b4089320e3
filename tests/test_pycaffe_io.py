"""caffe.io as pycaffe documents it: protos, datums, images, oversampling, Transformer."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.proto import caffe_pb2
from tests.helpers import shared_path


def test_blobproto_round_trips_and_caffe_mean_file():
    a = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    blob = caffe.io.array_to_blobproto(a, diff=a * 2)
    assert np.array_equal(caffe.io.blobproto_to_array(blob), a)
    assert np.array_equal(caffe.io.blobproto_to_array(blob, return_diff=True), a * 2)
    with open(shared_path('golden', 'formats', 'mean.binaryproto'), 'rb') as f:
        mean_blob = caffe_pb2.BlobProto.FromString(f.read())
    mean = caffe.io.blobproto_to_array(mean_blob)
    assert mean.shape == (1, 3, 28, 32)  # legacy num/channels/height/width
    assert np.allclose(mean, np.load(shared_path('golden', 'formats', 'mean.npy')))
    s = caffe.io.arraylist_to_blobprotovector_str([a, mean[0]])
    back = caffe.io.blobprotovector_str_to_arraylist(s)
    assert np.array_equal(back[0], a) and np.allclose(back[1], mean[0])


def test_caffemodel_blobs_through_caffe_io():
    with open(shared_path('golden', 'formats', 'model.caffemodel'), 'rb') as f:
        net = caffe_pb2.NetParameter.FromString(f.read())
    expected = np.load(shared_path('golden', 'formats', 'model_params.npz'))
    layer = [l for l in net.layer if l.name == 'conv1'][0]
    assert np.array_equal(caffe.io.blobproto_to_array(layer.blobs[0]), expected['conv1/0'])


def test_datum_round_trip_uint8_and_float():
    a = np.random.default_rng(0).integers(0, 256, (3, 4, 5)).astype(np.uint8)
    d = caffe.io.array_to_datum(a, 7)
    assert d.label == 7 and len(d.data) == 60 and not len(d.float_data)
    assert np.array_equal(caffe.io.datum_to_array(d), a)
    f = caffe.io.array_to_datum(a.astype(np.float32) / 3)
    assert len(f.float_data) == 60 and np.allclose(caffe.io.datum_to_array(f), a / 3)
    with pytest.raises(ValueError):
        caffe.io.array_to_datum(np.zeros((4, 5)))


def test_load_image_color_and_gray_in_unit_range():
    path = shared_path('golden', 'formats', 'images', 'img_00.png')
    im = caffe.io.load_image(path)
    assert im.dtype == np.float32 and im.ndim == 3 and im.shape[2] == 3
    assert 0 <= im.min() and im.max() <= 1
    bgr = np.load(shared_path('golden', 'formats', 'imageset_raw.npz'))['data/0']  # C x H x W, BGR uint8
    assert np.allclose(im * 255, bgr[::-1].transpose(1, 2, 0), atol=0.5)
    gray = caffe.io.load_image(path, color=False)
    assert gray.shape == im.shape[:2] + (1,)


def test_resize_image_keeps_range_and_constants():
    im = np.random.default_rng(0).random((10, 12, 3)).astype(np.float32)
    r = caffe.io.resize_image(im, (5, 7))
    assert r.shape == (5, 7, 3) and r.dtype == np.float32 and im.min() <= r.min() and r.max() <= im.max()
    assert np.allclose(caffe.io.resize_image(im, (10, 12)), im, atol=1e-6)
    const = np.full((4, 4, 1), 0.25, np.float32)
    assert np.all(caffe.io.resize_image(const, (8, 8)) == 0.25)
    assert caffe.io.resize_image(np.random.random((6, 6, 5)), (3, 3), interp_order=0).shape == (3, 3, 5)


def test_oversample_gives_corners_center_and_mirrors():
    im = np.arange(6 * 8 * 2, dtype=np.float32).reshape(6, 8, 2)
    crops = caffe.io.oversample([im, im + 1], (4, 4))
    assert crops.shape == (20, 4, 4, 2)
    assert np.array_equal(crops[0], im[:4, :4]) and np.array_equal(crops[3], im[2:, 4:])
    assert np.array_equal(crops[4], im[1:5, 2:6])
    assert np.array_equal(crops[5], im[:4, :4][:, ::-1]) and np.array_equal(crops[10], im[:4, :4] + 1)


def test_transformer_preprocess_and_deprocess():
    t = caffe.io.Transformer({'data': (1, 3, 4, 5)})
    t.set_transpose('data', (2, 0, 1))
    t.set_channel_swap('data', (2, 1, 0))
    t.set_raw_scale('data', 255)
    t.set_mean('data', np.array([10., 20., 30.]))
    t.set_input_scale('data', 0.5)
    im = np.random.default_rng(0).random((4, 5, 3)).astype(np.float32)
    x = t.preprocess('data', im)
    assert x.shape == (3, 4, 5) and x.dtype == np.float32
    expected = (im.transpose(2, 0, 1)[::-1] * 255 - np.array([10, 20, 30])[:, None, None]) * 0.5
    assert np.allclose(x, expected, atol=1e-4)
    assert np.allclose(t.deprocess('data', x), im, atol=1e-5)
    big = np.random.default_rng(1).random((8, 10, 3)).astype(np.float32)
    assert t.preprocess('data', big).shape == (3, 4, 5)  # resized to the input size first
    with pytest.raises(Exception, match='not one of the net inputs'):
        t.preprocess('nope', im)
    with pytest.raises(Exception):
        t.set_transpose('data', (1, 0))
    with pytest.raises(ValueError, match='channels'):
        t.set_mean('data', np.zeros(4))
    with pytest.raises(ValueError, match='incompatible'):
        t.set_mean('data', np.zeros((3, 2, 2)))
    t.set_mean('data', np.zeros((3, 4, 5)))
