"""The embedded MNIST copy becomes Caffe's LMDBs, and LeNet trained on them tracks real Caffe's
recorded 1000-iteration run (../shared/golden/mnist_lenet/)."""
import hashlib
import json
import os
import shutil

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.data.convert import convert_mnist
from pycaffe_ft.data.db import open_db
from tests.helpers import ROOT, shared_path

MNIST = os.path.join(ROOT, 'data', 'mnist')


@pytest.fixture(scope='module')
def mnist_lmdbs(tmp_path_factory):
    d = tmp_path_factory.mktemp('mnist')
    convert_mnist(os.path.join(MNIST, 'train-images-idx3-ubyte'), os.path.join(MNIST, 'train-labels-idx1-ubyte'),
                  str(d / 'mnist_train_lmdb'))
    convert_mnist(os.path.join(MNIST, 't10k-images-idx3-ubyte'), os.path.join(MNIST, 't10k-labels-idx1-ubyte'),
                  str(d / 'mnist_test_lmdb'))
    return d


def test_full_mnist_lmdbs_match_caffe_digests(mnist_lmdbs):
    with open(shared_path('golden', 'mnist_lenet', 'lmdb_digests.json')) as f:
        digests = json.load(f)['dbs']
    for name, ref in digests.items():
        db = open_db(str(mnist_lmdbs / name))
        assert len(db) == ref['records']
        for rec in ref['first_1000']:
            key, value = db[rec['index']]
            assert key.decode() == rec['key'] and hashlib.sha256(value).hexdigest() == rec['value_sha256']
        everything = hashlib.sha256()
        for i in range(len(db)):
            key, value = db[i]
            everything.update(len(key).to_bytes(4, 'little') + key + len(value).to_bytes(4, 'little') + value)
        assert everything.hexdigest() == ref['sha256_all_records']


def test_lenet_tracks_caffe_for_1000_iterations(mnist_lmdbs, monkeypatch):
    golden = shared_path('golden', 'mnist_lenet')
    for name in ('lenet_solver.prototxt', 'lenet_train_test.prototxt', 'init.caffemodel'):
        shutil.copy(os.path.join(golden, name), str(mnist_lmdbs / name))
    with open(os.path.join(golden, 'curve.json')) as f:
        curve = json.load(f)
    monkeypatch.chdir(mnist_lmdbs)
    solver = caffe.get_solver('lenet_solver.prototxt')
    solver.param.snapshot_after_train = False
    solver.net.copy_from('init.caffemodel')
    losses, tests = [], {}
    solver.add_callback(on_gradients_ready=lambda: losses.append(float(solver.net.blobs['loss'].data)))
    original_test = solver.test

    def record(i=0):
        result = original_test(i)
        tests[solver.iter] = result
        return result
    solver.test = record
    solver.solve()
    theirs = np.array([t['loss'] for t in curve['train']])
    ours = np.array(losses)
    assert len(ours) == len(theirs) == 1000
    assert ours[0] == pytest.approx(theirs[0], rel=1e-5)
    assert tests[0]['accuracy'] == pytest.approx(curve['test'][0]['accuracy'], abs=1e-9)
    assert tests[0]['loss'] == pytest.approx(curve['test'][0]['loss'], rel=1e-5)
    smooth = lambda x: np.convolve(x, np.ones(50) / 50, mode='valid')  # noqa: E731
    rel = np.abs(smooth(ours) - smooth(theirs)) / smooth(theirs)
    assert rel.max() < 0.10, 'moving averages differ by up to %.1f%%' % (100 * rel.max())
    assert abs(tests[1000]['accuracy'] - 0.9823) <= 0.005
