"""MemoryData, HDF5Data, HDF5Output and Python layers."""
import textwrap

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import LayerSetupError


def test_memory_data_serves_set_input_arrays_in_order():
    net = caffe.Net('layer { name: "m" type: "MemoryData" top: "data" top: "label" '
                    'memory_data_param { batch_size: 2 channels: 1 height: 2 width: 2 } }', caffe.TEST)
    data = np.arange(16, dtype=np.float32).reshape(4, 1, 2, 2)
    net.set_input_arrays(data, np.array([0, 1, 2, 3], np.float32))
    net.forward()
    assert np.array_equal(net.blobs['data'].data, data[:2]) and net.blobs['label'].data.ravel().tolist() == [0, 1]
    net.forward()
    net.forward()
    assert np.array_equal(net.blobs['data'].data, data[:2])
    with pytest.raises(LayerSetupError, match='multiple of batch_size'):
        net.set_input_arrays(data[:3], np.zeros(3))


def test_hdf5_data_reads_listed_files(tmp_path):
    h5py = pytest.importorskip('h5py')
    for k in range(2):
        with h5py.File(tmp_path / ('d%d.h5' % k), 'w') as f:
            f['data'] = np.full((3, 4), k, np.float32) + np.arange(3)[:, None]
            f['label'] = np.arange(3, dtype=np.float32) + 10 * k
    (tmp_path / 'list.txt').write_text('%s\n%s\n' % (tmp_path / 'd0.h5', tmp_path / 'd1.h5'))
    net = caffe.Net('layer { name: "h" type: "HDF5Data" top: "data" top: "label" '
                    'hdf5_data_param { source: "%s" batch_size: 4 } }' % (tmp_path / 'list.txt'), caffe.TEST)
    net.forward()
    assert net.blobs['label'].data.tolist() == [0, 1, 2, 10] and net.blobs['data'].shape == (4, 4)
    net.forward()
    assert net.blobs['label'].data.tolist() == [11, 12, 0, 1]


def test_hdf5_output_writes_4d_datasets(tmp_path, monkeypatch):
    h5py = pytest.importorskip('h5py')
    monkeypatch.chdir(tmp_path)
    net = caffe.Net('layer { name: "i" type: "Input" top: "data" top: "label" input_param { shape { dim: 2 dim: 3 } shape { dim: 2 } } }'
                    'layer { name: "o" type: "HDF5Output" bottom: "data" bottom: "label" hdf5_output_param { file_name: "out.h5" } }',
                    caffe.TEST)
    net.blobs['data'].data[...] = 1
    net.forward()
    with h5py.File('out.h5', 'r') as f:
        assert f['data'].shape == (2, 3, 1, 1) and f['label'].shape == (2, 1, 1, 1)


PY_LAYER = '''
import numpy as np
import pycaffe_ft as caffe

class EuclideanLossLayer(caffe.Layer):
    def setup(self, bottom, top):
        if len(bottom) != 2:
            raise Exception("Need two inputs to compute distance.")
        self.scale = float(self.param_str or 1)

    def reshape(self, bottom, top):
        self.diff = np.zeros_like(bottom[0].data, dtype=np.float32)
        top[0].reshape(1)

    def forward(self, bottom, top):
        self.diff[...] = bottom[0].data - bottom[1].data
        top[0].data[...] = self.scale * np.sum(self.diff ** 2) / bottom[0].num / 2.

    def backward(self, top, propagate_down, bottom):
        for i in range(2):
            if not propagate_down[i]:
                continue
            sign = 1 if i == 0 else -1
            bottom[i].diff[...] = sign * self.scale * self.diff / bottom[i].num

class Learned(caffe.Layer):
    def setup(self, bottom, top):
        self.add_blob(1)
        self.blobs[0].data[...] = 2

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = bottom[0].data * self.blobs[0].data

    def backward(self, top, propagate_down, bottom):
        self.blobs[0].diff[...] += np.sum(top[0].diff * bottom[0].data)
        bottom[0].diff[...] = top[0].diff * self.blobs[0].data
'''


def test_python_layers_from_the_model_directory(tmp_path):
    (tmp_path / 'pyloss_mod.py').write_text(textwrap.dedent(PY_LAYER))
    model = tmp_path / 'net.prototxt'
    model.write_text('''force_backward: true
    layer { name: "i" type: "Input" top: "a" top: "b" input_param { shape { dim: 4 dim: 3 } } }
    layer { name: "s" type: "Python" bottom: "a" top: "s" python_param { module: "pyloss_mod" layer: "Learned" } }
    layer { name: "loss" type: "Python" bottom: "s" bottom: "b" top: "loss" loss_weight: 1
            python_param { module: "pyloss_mod" layer: "EuclideanLossLayer" param_str: "2" } }''')
    net = caffe.Net(str(model), caffe.TRAIN)
    a = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    net.blobs['a'].data[...] = a
    loss = net.forward()['loss']
    assert np.isclose(loss, 2 * np.sum((2 * a) ** 2) / 4 / 2, rtol=1e-5)
    net.backward()
    np.testing.assert_allclose(net.blobs['a'].diff, 2 * 2 * (2 * a) / 4, rtol=1e-5)
    assert net.params['s'][0].data.tolist() == [2] and net.params['s'][0].diff[0] != 0
    assert net.layers[1].impl.phase == caffe.TRAIN and net.layers[2].impl.param_str == '2'


def test_python_layer_import_errors_name_the_layer(tmp_path):
    with pytest.raises(LayerSetupError) as info:
        caffe.Net('layer { name: "i" type: "Input" top: "a" input_param { shape { dim: 1 } } }'
                  'layer { name: "mine" type: "Python" bottom: "a" top: "b" python_param { module: "no_such_mod_xyz" layer: "L" } }',
                  caffe.TEST)
    assert '"mine"' in str(info.value) and 'no_such_mod_xyz' in str(info.value)


def test_layer_type_list_has_every_bvlc_type():
    expected = {'AbsVal', 'Accuracy', 'ArgMax', 'BNLL', 'BatchNorm', 'BatchReindex', 'Bias', 'Clip', 'Concat',
                'ContrastiveLoss', 'Convolution', 'Crop', 'Deconvolution', 'Dropout', 'DummyData', 'ELU',
                'Eltwise', 'Embed', 'EuclideanLoss', 'Exp', 'Filter', 'Flatten', 'HDF5Data', 'HDF5Output',
                'HingeLoss', 'Im2col', 'InfogainLoss', 'InnerProduct', 'Input', 'LRN', 'LSTM', 'LSTMUnit',
                'Log', 'MVN', 'MemoryData', 'MultinomialLogisticLoss', 'PReLU', 'Parameter', 'Pooling',
                'Power', 'Python', 'RNN', 'ReLU', 'Reduction', 'Reshape', 'SPP', 'Scale', 'Sigmoid',
                'SigmoidCrossEntropyLoss', 'Silence', 'Slice', 'Softmax', 'SoftmaxWithLoss', 'Split', 'Swish',
                'TanH', 'Threshold', 'Tile'}
    assert expected <= set(caffe.layer_type_list())


def _data_net(tmp_path, batch=10):
    """A Data layer over an LMDB of 60 random 1x4x4 Datums."""
    from pycaffe_ft.data.db import DBWriter
    from pycaffe_ft.proto import caffe_pb2
    rng = np.random.default_rng(0)
    db = str(tmp_path / 'lmdb')
    with DBWriter(db) as writer:
        for i in range(60):
            d = caffe_pb2.Datum(channels=1, height=4, width=4, label=i % 10,
                                data=rng.integers(0, 256, 16, np.uint8).tobytes())
            writer.put('%03d' % i, d.SerializeToString())
    return caffe.Net('layer { name: "d" type: "Data" top: "data" top: "label" '
                     'data_param { source: "%s" batch_size: %d backend: LMDB } }' % (db, batch), caffe.TRAIN)


def test_a_batch_read_ahead_is_served_only_when_it_is_the_one_asked_for(tmp_path):
    """Synchronous mode (parallel trainers): read_ahead loads the expected next micro-batch in
    a thread; forward() takes it when (serving, position) match, else reads what is asked."""
    net = _data_net(tmp_path)
    layer = net.layers[0]
    layer.synchronous = True
    every_third = lambda p: (3 * p) % 60  # noqa: E731  (a worker's record mapping)
    reference = layer.load_batch(20, every_third)
    calls = []
    original = layer.load_batch
    layer.load_batch = lambda start, record_of=None: calls.append(start) or original(start, record_of)
    layer.serving, layer.record_of, layer.position = ('w', 1), every_third, 20
    layer.read_ahead(('w', 1), 20, every_third)
    net.forward()
    assert calls == [20]  # only the read ahead: forward did not read again
    assert np.array_equal(net.blobs['data'].data, reference[0]) and layer.last_records == reference[2]
    layer.read_ahead(('w', 1), 40, every_third)  # a wrong guess: another worker is served next
    layer.serving, layer.record_of, layer.position = ('other', 1), (lambda p: p % 60), 30
    net.forward()
    assert calls == [20, 40, 30] and layer.last_records == list(range(30, 40))
