"""Dataset tools and the test command: convert-cifar, extract-features, pycaffe-ft test."""
import numpy as np

import pycaffe_ft as caffe
from pycaffe_ft import cli
from pycaffe_ft.data.datum import datum_to_array, parse_datum
from pycaffe_ft.data.db import open_db
from tests.helpers import shared_path


def test_convert_cifar_keys_and_records(tmp_path):
    rng = np.random.default_rng(0)
    batches = {}
    for name in ['data_batch_%d.bin' % i for i in range(1, 6)] + ['test_batch.bin']:
        records = rng.integers(0, 256, (3, 3073), dtype=np.uint8)
        records[:, 0] %= 10
        records.tofile(tmp_path / name)
        batches[name] = records
    assert cli.main(['convert-cifar', str(tmp_path), str(tmp_path / 'out')]) == 0
    train = open_db(str(tmp_path / 'out' / 'cifar10_train_lmdb'))
    assert [k.decode() for k in train.keys] == ['%05d' % (f * 10000 + i) for f in range(5) for i in range(3)]
    key, value = train[4]  # file 2, item 1
    datum = parse_datum(value)
    rec = batches['data_batch_2.bin'][1]
    assert datum.label == rec[0] and (datum.channels, datum.height, datum.width) == (3, 32, 32)
    assert np.array_equal(datum_to_array(datum).ravel(), rec[1:])
    test = open_db(str(tmp_path / 'out' / 'cifar10_test_lmdb'))
    assert [k.decode() for k in test.keys] == ['00000', '00001', '00002']


NET = '''name: "tiny"
layer { name: "data" type: "Data" top: "data" top: "label"
        transform_param { scale: 0.00390625 } data_param { source: "%s" batch_size: 5 backend: LMDB } }
layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 10 weight_filler { type: "gaussian" } } }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
'''


def _model(tmp_path):
    model = tmp_path / 'net.prototxt'
    model.write_text(NET % shared_path('golden', 'formats', 'mnist_small_lmdb'))
    caffe.set_random_seed(2)
    net = caffe.Net(str(model), caffe.TEST)
    net.save(str(tmp_path / 'w.caffemodel'))
    return model, tmp_path / 'w.caffemodel'


def test_extract_features_writes_one_datum_per_item(tmp_path):
    model, weights = _model(tmp_path)
    assert cli.main(['extract-features', str(weights), str(model), 'ip,data', '%s,%s' % (tmp_path / 'f_ip', tmp_path / 'f_data'), '2']) == 0
    feats = open_db(str(tmp_path / 'f_ip'))
    assert len(feats) == 10 and feats.keys[0] == b'0000000000'
    net = caffe.Net(str(model), str(weights), caffe.TEST)
    net.forward()
    net.forward()
    last = datum_to_array(parse_datum(feats[9][1])).ravel()
    assert np.allclose(last, net.blobs['ip'].data[4], atol=1e-6)
    assert len(open_db(str(tmp_path / 'f_data'))) == 10


def test_test_command_reports_means(tmp_path):
    model, weights = _model(tmp_path)
    from pycaffe_ft.cli.train import test
    means = test(str(model), str(weights), iterations=3)
    net = caffe.Net(str(model), str(weights), caffe.TEST)
    accs = [float(net.forward()['acc']) for _ in range(3)]
    assert abs(means['acc'] - np.mean(accs)) < 1e-6 and 'loss' in means
    assert cli.main(['test', '-model', str(model), '-weights', str(weights), '-iterations', '2']) == 0
