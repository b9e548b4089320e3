"""Reading and writing Caffe's files: prototxt errors, .caffemodel, .binaryproto."""
import os

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import ForkFeatureError, PrototxtError, WeightsError
from pycaffe_ft.proto import caffe_pb2
from pycaffe_ft.proto.io import (array_to_blob, blob_to_array, layer_lines, parse_text,
                                 read_binary, read_blob_file, read_text)
from tests.helpers import shared_path


def test_parse_error_has_file_line_column_and_layer(tmp_path):
    path = tmp_path / 'bad.prototxt'
    path.write_text('name: "x"\nlayer {\n  name: "pool1"\n  type: "Pooling"\n'
                    '  pooling_param { pool: MAX ceil_mode: true }\n}\n')
    with pytest.raises(ForkFeatureError) as info:
        read_text(str(path), caffe_pb2.NetParameter())
    e = info.value
    assert (e.path, e.line) == (str(path), 5) and e.column > 1
    assert 'ceil_mode' in str(e) and 'PoolingParameter' in str(e) and 'pool1' in str(e)


def test_malformed_text_and_bad_enum():
    with pytest.raises(PrototxtError) as info:
        parse_text('layer { name: "a" ', caffe_pb2.NetParameter(), 'x.prototxt')
    assert str(info.value).startswith('x.prototxt:1:')
    with pytest.raises(PrototxtError) as info:
        parse_text('layer {\n name: "p" pooling_param { pool: MAXX } }', caffe_pb2.NetParameter())
    assert 'MAXX' in str(info.value) and '"p"' in str(info.value)


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(PrototxtError) as info:
        caffe.Net(str(tmp_path / 'nope.prototxt'), caffe.TEST)
    assert 'not found' in str(info.value)


def test_layer_lines_follow_top_level_blocks():
    text = '# c\nname: "n"\nlayer {\n name: "a" # {\n}\nlayers { name: "b" }\nlayer{ name: "c"\n }\n'
    assert layer_lines(text) == [3, 6, 7]


def test_blob_proto_shapes_legacy_and_double():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    assert np.array_equal(blob_to_array(array_to_blob(a)), a)
    legacy = array_to_blob(a, legacy_shape=True)
    assert (legacy.num, legacy.channels, legacy.height, legacy.width) == (1, 1, 2, 3)
    assert blob_to_array(legacy).shape == (1, 1, 2, 3)
    d = blob_to_array(array_to_blob(a.astype(np.float64)))
    assert d.dtype == np.float64 and np.array_equal(d, a)
    bad = caffe_pb2.BlobProto()
    bad.shape.dim.extend([2, 2])
    bad.data.extend([1.0])
    with pytest.raises(WeightsError):
        blob_to_array(bad)


def test_caffe_mean_binaryproto_reads():
    mean = read_blob_file(shared_path('golden', 'formats', 'mean.binaryproto'))
    expected = np.load(shared_path('golden', 'formats', 'mean.npy'))
    assert mean.shape == expected.shape and np.array_equal(mean, expected)


def test_caffe_caffemodel_reads_with_the_right_arrays():
    param = read_binary(shared_path('golden', 'formats', 'model.caffemodel'), caffe_pb2.NetParameter())
    expected = np.load(shared_path('golden', 'formats', 'model_params.npz'))
    seen = set()
    for layer in param.layer:
        for i, blob in enumerate(layer.blobs):
            key = '%s/%d' % (layer.name, i)
            assert np.array_equal(blob_to_array(blob), expected[key]), key
            seen.add(key)
    assert seen == set(expected.files)


def test_caffe_snapshot_weights_load_into_a_net():
    d = shared_path('golden', 'formats')
    net = caffe.Net(os.path.join(d, 'solverstate_net.prototxt'),
                    os.path.join(d, 'sgd_iter_5.caffemodel'), caffe.TRAIN)
    expected = np.load(os.path.join(d, 'solverstate_sgd.npz'))
    for layer in ('ip1', 'ip2'):
        for i in range(2):
            np.testing.assert_array_equal(net.params[layer][i].data, expected['param/%s/%d' % (layer, i)])


def test_truncated_or_foreign_caffemodel(tmp_path):
    data = open(shared_path('golden', 'formats', 'sgd_iter_5.caffemodel'), 'rb').read()
    truncated = tmp_path / 'truncated.caffemodel'
    truncated.write_bytes(data[:len(data) // 2])
    net = caffe.Net(shared_path('golden', 'formats', 'solverstate_net.prototxt'), caffe.TEST)
    with pytest.raises(WeightsError) as info:
        net.copy_from(str(truncated))
    assert 'truncated.caffemodel' in str(info.value)
    foreign = tmp_path / 'foreign.caffemodel'
    foreign.write_bytes(b'\x89PNG\r\n\x1a\n' + os.urandom(64))
    with pytest.raises(WeightsError):
        net.copy_from(str(foreign))


def test_hdf5_weights_round_trip(tmp_path):
    pytest.importorskip('h5py')
    d = shared_path('golden', 'formats')
    net = caffe.Net(os.path.join(d, 'solverstate_net.prototxt'), os.path.join(d, 'sgd_iter_5.caffemodel'),
                    caffe.TEST)
    path = str(tmp_path / 'w.caffemodel.h5')
    net.save_hdf5(path)
    other = caffe.Net(os.path.join(d, 'solverstate_net.prototxt'), path, caffe.TEST)
    for name in ('ip1', 'ip2'):
        for a, b in zip(net.params[name], other.params[name]):
            assert np.array_equal(a.data, b.data)


@pytest.mark.parametrize('text, message', [
    ('layer { name: "c" type: "Convolution" convolution_parm { num_output: 2 } }',
     'unknown field "convolution_parm" in LayerParameter (in layer "c") (did you mean "convolution_param"?)'),
    ('layer { name: "c" type: "Convolution" convolution_param { num_ouput: 2 } }',
     '(did you mean "num_output"?)'),
    ('layer { name: "p" pooling_param { pool: MAXX } }',
     'unknown value MAXX for enum PoolingParameter.PoolMethod (in layer "p") (did you mean "MAX"?)'),
    ('layer { name: "p" pooling_param { pool: BANANA } }', '; known: MAX, AVE, STOCHASTIC'),
    ('layer { name: "p" pooling_param { frobnicate: 1 } }', "BVLC Caffe has no such field (a Caffe fork's field?)"),
])
def test_misspelt_names_get_a_suggestion(text, message):
    with pytest.raises(PrototxtError) as info:
        parse_text(text, caffe_pb2.NetParameter(), 'n.prototxt')
    assert message in str(info.value)


def test_a_misspelt_layer_type_gets_a_suggestion(tmp_path):
    (tmp_path / 'n.prototxt').write_text('layer { name: "p" type: "Convolutoin" top: "x" }\n')
    with pytest.raises(caffe.CaffeError, match=r'unknown layer type "Convolutoin" \(did you mean "Convolution"\?\)'):
        caffe.Net(str(tmp_path / 'n.prototxt'), caffe.TEST)


def test_every_corpus_file_is_text_and_its_binary_form_is_not():
    """The text/binary decision on real files: each corpus prototxt looks like text, and the
    same net serialized as a binary NetParameter does not (nor does a trained .caffemodel)."""
    import csv
    from pycaffe_ft.proto.io import looks_like_text
    root = shared_path('corpus')
    with open(os.path.join(root, 'MANIFEST.tsv')) as f:
        rows = list(csv.DictReader(f, delimiter='\t'))
    nets = 0
    for row in rows:
        data = open(os.path.join(root, row['local_path']), 'rb').read()
        assert looks_like_text(data), row['local_path']
        if row['format'] == 'V2':
            param = caffe_pb2.NetParameter()
            try:
                parse_text(data.decode(), param)
            except PrototxtError:
                continue
            if len(param.layer) > 1:
                assert not looks_like_text(param.SerializeToString()), row['local_path']
                nets += 1
    assert nets > 50
    model = shared_path('golden', 'mnist_lenet', 'lenet_iter_1000.caffemodel')
    assert not looks_like_text(open(model, 'rb').read())


@pytest.mark.parametrize('content, line, column, byte', [
    (b'name: "x"\nlayer { name: "in"\x00 type: "Input" }\n', 2, 19, 0),
    (b'name: "caf\xe9"\nlayer { name: "in" type: "Input" }\n', 1, 11, 0xe9),
])
def test_a_stray_byte_in_a_text_prototxt_is_pointed_at(tmp_path, content, line, column, byte):
    for what, load in (('net', lambda p: caffe.Net(p, caffe.TEST)), ('solver', caffe.get_solver)):
        path = tmp_path / ('%s.prototxt' % what)
        path.write_bytes(content)
        with pytest.raises(PrototxtError) as info:
            load(str(path))
        assert (info.value.line, info.value.column) == (line, column)
        assert 'byte 0x%02x is not text' % byte in str(info.value)


@pytest.mark.parametrize('path', ['/dev/zero', '<dir>'])
def test_reads_are_bounded_to_regular_files(tmp_path, path):
    path = str(tmp_path) if path == '<dir>' else path
    with pytest.raises(caffe.CaffeError, match='not a regular file|cannot read'):
        caffe.Net(path, caffe.TEST)
    with pytest.raises(WeightsError, match='not a regular file|cannot read'):
        read_blob_file(path)


def test_a_file_over_the_size_limit_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv('PYCAFFE_FT_MAX_FILE_BYTES', '100')
    (tmp_path / 'big.binaryproto').write_bytes(b'\x00' * 101)
    with pytest.raises(WeightsError, match='has 101 bytes, more than the 100'):
        read_blob_file(str(tmp_path / 'big.binaryproto'))


def test_mean_files_must_be_blobs_with_data(tmp_path):
    cases = {'empty.binaryproto': b'', 'model.caffemodel': caffe_pb2.NetParameter(name='lenet').SerializeToString()}
    negative = caffe_pb2.BlobProto(data=[1.0, 2.0])
    negative.shape.dim.extend([-1, -2])
    cases['negative.binaryproto'] = negative.SerializeToString()
    for name, data in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(WeightsError, match=name.replace('.', r'\.')) as info:
            read_blob_file(str(tmp_path / name))
        assert ('negative dimension' if 'negative' in name else 'not a BlobProto with data') in str(info.value)
    good = array_to_blob(np.arange(6, dtype=np.float32).reshape(1, 2, 3))
    (tmp_path / 'mean.binaryproto').write_bytes(good.SerializeToString())
    assert read_blob_file(str(tmp_path / 'mean.binaryproto')).shape == (1, 2, 3)
