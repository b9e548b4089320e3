"""Caffe's dataset files: LMDBs and mean files read back exactly; our converters write what
Caffe's tools write (keys, sha256 of serialized Datums, decoded pixels)."""
import hashlib
import json
import os

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.data.convert import compute_image_mean, convert_imageset, convert_mnist, read_idx
from pycaffe_ft.data.datum import datum_to_array, parse_datum
from pycaffe_ft.data.db import open_db
from pycaffe_ft.errors import DataError
from pycaffe_ft.proto.io import read_blob_file
from tests.helpers import ROOT, shared_path


def formats(*parts):
    return shared_path('golden', 'formats', *parts)


def _json(name):
    with open(formats(name)) as f:
        return json.load(f)


def sha(b):
    return hashlib.sha256(b).hexdigest()


@pytest.mark.parametrize('name', ['imageset_raw', 'imageset_png', 'imageset_resized_raw', 'mnist_small'])
def test_caffe_lmdbs_read_back_exactly(name):
    meta, arrays = _json(name + '.json'), np.load(formats(name + '.npz'))
    db = open_db(formats(name + '_lmdb'))
    assert len(db) == len(meta['records'])
    assert [k.decode() for k in db.keys] == [str(k) for k in arrays['keys']]
    for i, rec in enumerate(meta['records']):
        key, value = db[i]
        assert key.decode() == rec['key'] and sha(value) == rec['value_sha256']
        datum = parse_datum(value, key)
        assert datum.label == rec['label'] == int(arrays['labels'][i])
        pixels = datum_to_array(datum, key)
        expected = arrays['data/%d' % i]
        if rec['format'] == 'JPEG' or (rec['encoded'] and rec['key'].endswith('.jpg') and rec['format'] != 'PNG'):
            assert np.abs(pixels.astype(int) - expected).max() <= 1
        else:
            assert np.array_equal(pixels, expected), rec['key']


def test_caffe_mean_file_reads_back():
    assert np.array_equal(read_blob_file(formats('mean.binaryproto')), np.load(formats('mean.npy')))


def test_data_layer_matches_caffe_batches(monkeypatch):
    monkeypatch.chdir(formats())
    net = caffe.Net('datalayer_raw.prototxt', caffe.TEST)
    golden = np.load('datalayer_raw.npz')
    for b in range(2):
        net.forward()
        assert np.abs(net.blobs['data'].data - golden['batch%d/data' % b]).max() <= 1e-6
        assert np.array_equal(net.blobs['label'].data, golden['batch%d/label' % b])


def test_convert_mnist_matches_caffe(tmp_path):
    n = convert_mnist(formats('mnist_small-images-idx3-ubyte'), formats('mnist_small-labels-idx1-ubyte'),
                      str(tmp_path / 'db'))
    meta = _json('mnist_small.json')
    db = open_db(str(tmp_path / 'db'))
    assert n == len(db) == len(meta['records'])
    for i, rec in enumerate(meta['records']):
        key, value = db[i]
        assert key.decode() == rec['key'] and sha(value) == rec['value_sha256']


@pytest.mark.parametrize('name', ['imageset_raw', 'imageset_png', 'imageset_resized_raw'])
def test_convert_imageset_matches_caffe(tmp_path, name):
    pytest.importorskip('cv2')
    command = _json('formats.json')['imageset'][name].split()
    flags = dict(a.lstrip('-').split('=', 1) if '=' in a else (a.lstrip('-'), 'true')
                 for a in command[1:] if a.startswith('-'))
    count, skipped = convert_imageset(formats('images') + '/', formats('list.txt'), str(tmp_path / 'db'),
                                      resize_height=int(flags.get('resize_height', 0)),
                                      resize_width=int(flags.get('resize_width', 0)),
                                      encoded=flags.get('encoded') == 'true', encode_type=flags.get('encode_type', ''))
    meta, arrays = _json(name + '.json'), np.load(formats(name + '.npz'))
    db = open_db(str(tmp_path / 'db'))
    assert count == len(db) == len(meta['records']) and skipped == 0
    for i, rec in enumerate(meta['records']):
        key, value = db[i]
        assert key.decode() == rec['key']
        datum = parse_datum(value)
        pixels = datum_to_array(datum)
        diff = np.abs(pixels.astype(int) - arrays['data/%d' % i]).max()
        byte_exact = not rec['key'].endswith('.jpg') and not flags.get('resize_height') and \
            (not rec['encoded'] or rec['key'].endswith('.png'))
        if byte_exact:
            assert sha(value) == rec['value_sha256'], rec['key']
        assert diff <= (0 if byte_exact else 1), (rec['key'], diff)


def test_convert_imageset_skips_unreadable_images(tmp_path):
    pytest.importorskip('cv2')
    (tmp_path / 'bad.png').write_bytes(b'not an image')
    listing = tmp_path / 'list.txt'
    listing.write_text('%s 0\n%s 1\nmissing.png 2\n' % (formats('images', 'img_00.png'), tmp_path / 'bad.png'))
    count, skipped = convert_imageset('', str(listing), str(tmp_path / 'db'))
    assert (count, skipped) == (1, 2)
    assert [k for k in open_db(str(tmp_path / 'db')).keys] == [('00000000_%s' % formats('images', 'img_00.png')).encode()]


def test_compute_image_mean_matches_caffe(tmp_path):
    out = str(tmp_path / 'mean.binaryproto')
    compute_image_mean(formats('imageset_raw_lmdb'), out)
    with open(out, 'rb') as a, open(formats('mean.binaryproto'), 'rb') as b:
        assert a.read() == b.read()


def test_interrupted_conversion_leaves_no_database(tmp_path):
    images = tmp_path / 'images'
    images.write_bytes(b'\x00\x00\x08\x03' + b'\x00\x00\x00\x05' + b'\x00\x00\x00\x1c' * 2 + b'\x01' * 100)
    with pytest.raises(DataError, match='truncated'):
        convert_mnist(str(images), formats('mnist_small-labels-idx1-ubyte'), str(tmp_path / 'db'))
    assert not (tmp_path / 'db').exists()


def test_missing_lmdb_names_the_path():
    with pytest.raises(caffe.CaffeError, match='no_such_lmdb'):
        caffe.Net('layer { name: "d" type: "Data" top: "data" data_param { source: "no_such_lmdb" '
                  'batch_size: 2 backend: LMDB } }', caffe.TEST)


def test_mean_file_of_the_wrong_shape_is_an_error(tmp_path, monkeypatch):
    monkeypatch.chdir(formats())
    with pytest.raises(caffe.CaffeError, match='mean'):
        caffe.Net('layer { name: "d" type: "Data" top: "data" data_param { source: "mnist_small_lmdb" '
                  'batch_size: 2 backend: LMDB } transform_param { mean_file: "mean.binaryproto" } }', caffe.TEST)


def test_shipped_mnist_copy_is_the_shared_one():
    for name in ('train-images-idx3-ubyte.gz', 't10k-labels-idx1-ubyte.gz', 'NOTICE.md'):
        with open(os.path.join(ROOT, 'data', 'mnist', name), 'rb') as a, open(shared_path('data', 'mnist', name), 'rb') as b:
            assert a.read() == b.read()
    images = read_idx(os.path.join(ROOT, 'data', 'mnist', 't10k-images-idx3-ubyte.gz'), 2051)
    assert images.shape == (10000, 28, 28)


def test_image_data_layer_reads_like_convert_imageset(tmp_path, monkeypatch):
    pytest.importorskip('cv2')
    monkeypatch.chdir(formats())
    net = caffe.Net('layer { name: "d" type: "ImageData" top: "data" top: "label" '
                    'image_data_param { source: "list.txt" root_folder: "images/" batch_size: 4 } }', caffe.TEST)
    golden = np.load('imageset_raw.npz')
    net.forward()
    for i in range(4):
        assert np.array_equal(net.blobs['data'].data[i], golden['data/%d' % i].astype(np.float32))
        assert net.blobs['label'].data[i] == golden['labels'][i]
    resized = caffe.Net('layer { name: "d" type: "ImageData" top: "data" top: "label" '
                        'image_data_param { source: "list.txt" root_folder: "images/" batch_size: 2 '
                        'new_height: 20 new_width: 24 shuffle: true } }', caffe.TRAIN)
    resized.forward()
    assert resized.blobs['data'].shape == (2, 3, 20, 24)


def test_window_data_is_a_clear_error():
    with pytest.raises(caffe.CaffeError, match='WindowData'):
        caffe.Net('layer { name: "w" type: "WindowData" top: "data" top: "label" '
                  'window_data_param { source: "w.txt" batch_size: 2 } }', caffe.TEST)
