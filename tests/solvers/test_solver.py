"""Solver behaviour: resume == uninterrupted (bitwise), Caffe's solverstates resume here,
snapshots survive a SIGKILL and a full disk, Caffe's log format, bad input."""
import errno
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import SolverError
from pycaffe_ft.proto import caffe_pb2
from pycaffe_ft.proto.io import read_binary
from tests.helpers import shared_path

NET = '''name: "tiny"
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TRAIN }
        transform_param { scale: 0.00390625 mirror: true crop_size: 24 }
        data_param { source: "%(db)s" batch_size: 8 backend: LMDB } }
layer { name: "data" type: "Data" top: "data" top: "label" include { phase: TEST }
        transform_param { scale: 0.00390625 crop_size: 24 }
        data_param { source: "%(db)s" batch_size: 10 backend: LMDB } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 4 kernel_size: 5 stride: 2 weight_filler { type: "xavier" } } }
layer { name: "drop" type: "Dropout" bottom: "conv" top: "conv" dropout_param { dropout_ratio: 0.2 } }
layer { name: "ip" type: "InnerProduct" bottom: "conv" top: "ip"
        inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "acc" type: "Accuracy" bottom: "ip" bottom: "label" top: "acc" include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
'''
SOLVER = '''net: "net.prototxt"
test_iter: 3
test_interval: 4
base_lr: 0.05
momentum: 0.9
weight_decay: 0.0005
lr_policy: "multistep"
stepvalue: 5
stepvalue: 9
gamma: 0.5
display: 2
max_iter: %(max_iter)d
snapshot: %(snapshot)d
snapshot_prefix: "snap"
random_seed: 7
type: "%(type)s"
'''


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'net.prototxt').write_text(NET % {'db': shared_path('golden', 'formats', 'mnist_small_lmdb')})
    return tmp_path


def write_solver(path, max_iter=12, snapshot=0, solver_type='SGD'):
    path.write_text(SOLVER % {'max_iter': max_iter, 'snapshot': snapshot, 'type': solver_type})
    return str(path)


@pytest.mark.parametrize('solver_type', ['SGD', 'Adam'])
def test_resume_equals_uninterrupted_bitwise(workdir, solver_type):
    full = caffe.get_solver(write_solver(workdir / 'a.prototxt', solver_type=solver_type))
    full.param.snapshot_after_train = False
    full.solve()
    part = caffe.get_solver(write_solver(workdir / 'b.prototxt', max_iter=12, snapshot=6, solver_type=solver_type))
    part.step(6)
    assert os.path.exists('snap_iter_6.solverstate')
    resumed = caffe.get_solver(write_solver(workdir / 'c.prototxt', solver_type=solver_type))
    resumed.param.snapshot_after_train = False
    resumed.solve('snap_iter_6.solverstate')
    assert resumed.iter == full.iter == 12 and resumed.current_step == full.current_step == 2
    assert np.array_equal(resumed.net.param_data, full.net.param_data)
    for a, b in zip(resumed.history, full.history):
        assert np.array_equal(a, b)


@pytest.mark.parametrize('name', ['sgd', 'adam', 'adam_h5'])
def test_caffe_solverstates_resume_here(tmp_path, monkeypatch, name):
    if name.endswith('h5'):
        pytest.importorskip('h5py')
    src = shared_path('golden', 'formats')
    for f in os.listdir(src):
        if not os.path.isdir(os.path.join(src, f)):
            shutil.copy(os.path.join(src, f), tmp_path)
    monkeypatch.chdir(tmp_path)
    with open('formats.json') as f:
        info = json.load(f)['solverstate']
    solver = caffe.get_solver('solverstate_%s_solver.prototxt' % name)
    state_file = [k for k in os.listdir('.') if k.startswith(name + '_iter_5.solverstate')][0]
    solver.restore(state_file)
    expected = np.load('solverstate_%s.npz' % name)
    assert solver.iter == 5
    for layer in ('ip1', 'ip2'):
        for i in range(2):
            assert np.array_equal(solver.net.params[layer][i].data, expected['param/%s/%d' % (layer, i)])
    history = [expected['history/%d' % i] for i in range(len([k for k in expected.files if k.startswith('history/')]))]
    ours = np.concatenate([h.ravel() for h in history])
    assert np.array_equal(np.concatenate([h for h in solver.history]), ours)
    assert isinstance(info, dict)
    solver.step(1)  # and training goes on from there, and snapshots in the same format
    assert solver.iter == 6
    model, state = solver.snapshot()
    assert state.endswith('.solverstate.h5' if name.endswith('h5') else '.solverstate')
    again = caffe.get_solver('solverstate_%s_solver.prototxt' % name)
    again.restore(state)
    assert again.iter == 6 and np.array_equal(again.net.param_data, solver.net.param_data)
    assert all(np.array_equal(a, b) for a, b in zip(again.history, solver.history))


def test_our_solverstate_carries_every_field_caffe_writes(workdir):
    solver = caffe.get_solver(write_solver(workdir / 's.prototxt', max_iter=10))
    solver.step(6)
    model, state = solver.snapshot()
    msg = read_binary(state, caffe_pb2.SolverState())
    assert (msg.iter, msg.learned_net, msg.current_step) == (6, 'snap_iter_6.caffemodel', 1)
    assert len(msg.history) == len(solver.net.learnable_params)
    assert all(h.HasField('shape') for h in msg.history)
    caffe_state = read_binary(shared_path('golden', 'formats', 'sgd_iter_5.solverstate'), caffe_pb2.SolverState())
    assert {f.name for f, _ in msg.ListFields()} == {f.name for f, _ in caffe_state.ListFields()}


def test_kill_during_snapshot_leaves_the_previous_one_loadable(workdir):
    write_solver(workdir / 's.prototxt', max_iter=20, snapshot=4)
    env = dict(os.environ, PYCAFFE_FT_INJECT_FAULT='0:8:snapshot', GLOG_minloglevel='2')
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 's.prototxt'],
                          cwd=str(workdir), env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == -9, proc.stderr
    assert os.path.exists('snap_iter_4.caffemodel') and os.path.exists('snap_iter_4.solverstate')
    assert not os.path.exists('snap_iter_8.caffemodel')  # only a temp file was being written
    solver = caffe.get_solver('s.prototxt')
    solver.restore('snap_iter_4.solverstate')
    assert solver.iter == 4


def test_full_disk_keeps_previous_snapshot_and_says_so(workdir, monkeypatch):
    solver = caffe.get_solver(write_solver(workdir / 's.prototxt', max_iter=10))
    solver.step(2)
    solver.snapshot()
    solver.step(2)
    import pycaffe_ft.atomic as atomic

    def full(path, data, midway=None):
        raise OSError(errno.ENOSPC, 'No space left on device')
    monkeypatch.setattr('pycaffe_ft.proto.io.atomic_write_bytes', full)
    with pytest.raises(SolverError, match='No space left'):
        solver.snapshot()
    assert os.path.exists('snap_iter_2.caffemodel') and not glob.glob('*.tmp')
    assert atomic.atomic_write_bytes is not full


def test_nan_loss_stops_with_the_iteration(workdir):
    solver = caffe.get_solver(write_solver(workdir / 's.prototxt'))
    solver.step(1)
    solver.net.params['ip'][0].data[0, 0] = np.nan
    before = solver.net.param_data.copy()
    with pytest.raises(SolverError, match='iteration 1: the loss is nan'):
        solver.step(1)
    assert np.array_equal(solver.net.param_data, before, equal_nan=True)


PARSE_LOG = {  # the regexes of Caffe's tools/extra/parse_log.py
    'iteration': re.compile(r'Iteration (\d+)'),
    'train_output': re.compile(r'Train net output #(\d+): (\S+) = ([\.\deE+-]+)'),
    'test_output': re.compile(r'Test net output #(\d+): (\S+) = ([\.\deE+-]+)'),
    'learning_rate': re.compile(r'lr = ([-+]?[0-9]*\.?[0-9]+([eE]?[-+]?[0-9]+)?)'),
}
GLOG_PREFIX = re.compile(r'^[IWEF]\d{4} \d\d:\d\d:\d\d\.\d{6} +\d+ [\w.]+:\d+\] ')


def test_log_lines_match_caffe_parse_log(workdir):
    write_solver(workdir / 's.prototxt', max_iter=8)
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '-solver', 's.prototxt'],
                          cwd=str(workdir), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, GLOG_minloglevel='0'))
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert all(GLOG_PREFIX.match(l) for l in lines if l.strip()), [l for l in lines if not GLOG_PREFIX.match(l)][:3]
    text = proc.stderr
    assert re.search(r'Iteration 2 \([\d.e+-]+ iter/s, [\d.e+-]+s/2 iters\), loss = [\d.e+-]+', text)
    assert PARSE_LOG['train_output'].search(text) and PARSE_LOG['test_output'].search(text)
    assert PARSE_LOG['learning_rate'].search(text)
    tests = [m.group(2) for m in PARSE_LOG['test_output'].finditer(text)]
    assert 'acc' in tests and 'loss' in tests
    assert 'Snapshotting to binary proto file snap_iter_8.caffemodel' in text
    assert 'Optimization Done.' in text
    # the timestamp parse_log.py does
    first = lines[0].split()
    assert int(first[0][1:3]) in range(1, 13) and len(first[1].split(':')) == 3


def test_bad_solver_input_is_clear(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(caffe.CaffeError, match='not found'):
        caffe.get_solver('missing.prototxt')
    (tmp_path / 'net.prototxt').write_text('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 1 } } }')
    (tmp_path / 'a.prototxt').write_text('net: "net.prototxt"\ntest_iter: 5\n')
    with pytest.raises(SolverError, match='test_interval'):
        caffe.get_solver('a.prototxt')
    (tmp_path / 'b.prototxt').write_text('net: "net.prototxt"\ntype: "Sgd"\n')
    with pytest.raises(SolverError, match='AdaDelta.*SGD'):
        caffe.get_solver('b.prototxt')
    (tmp_path / 'c.prototxt').write_text('net: "net.prototxt"\nlr_policy: "cosine"\nbase_lr: 0.1\n')
    solver = caffe.get_solver('c.prototxt')
    with pytest.raises(SolverError, match='multistep'):
        solver.step(1)
    with pytest.raises(SolverError, match='--np'):
        caffe.NCCL()


def test_weights_for_a_different_net_name_the_layer(workdir):
    solver = caffe.get_solver(write_solver(workdir / 's.prototxt'))
    solver.net.save('w.caffemodel')
    (workdir / 'net.prototxt').write_text((workdir / 'net.prototxt').read_text().replace('num_output: 10', 'num_output: 12'))
    with pytest.raises(caffe.CaffeError, match='"ip".*\\[10, 400\\].*\\[12, 400\\]'):
        caffe.get_solver(write_solver(workdir / 's2.prototxt')).net.copy_from('w.caffemodel')


def test_parse_log_reads_our_log_and_caffes(workdir, tmp_path):
    write_solver(workdir / 's.prototxt', max_iter=8)
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '-solver', 's.prototxt'],
                          cwd=str(workdir), capture_output=True, text=True, timeout=300,
                          env=dict(os.environ, GLOG_minloglevel='0'))
    (workdir / 'train.log').write_text(proc.stderr)
    from pycaffe_ft.logparse import parse_log
    train, test = parse_log(str(workdir / 'train.log'))
    assert [r['NumIters'] for r in train] == [0, 2, 4, 6]
    assert [r['NumIters'] for r in test] == [0, 4, 8] and 'acc' in test[-1] and 'loss' in test[-1]
    assert train[1]['LearningRate'] == pytest.approx(0.05) and train[-1]['Seconds'] >= 0
    import gzip
    with gzip.open(shared_path('golden', 'mnist_lenet', 'caffe_train.log.gz'), 'rt') as f:
        (tmp_path / 'caffe.log').write_text(f.read())
    caffe_train, caffe_test = parse_log(str(tmp_path / 'caffe.log'))
    assert len(caffe_train) == 1000 and [r['NumIters'] for r in caffe_test] == [0, 250, 500, 750, 1000]
    assert caffe_test[-1]['accuracy'] == pytest.approx(0.9823)
    from pycaffe_ft import cli
    assert cli.main(['parse-log', str(workdir / 'train.log'), str(tmp_path)]) == 0
    assert (tmp_path / 'train.log.test').read_text().splitlines()[0].startswith('NumIters,Seconds,LearningRate')


WIDE_NET = '''name: "wide"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 6 dim: 40 } shape { dim: 6 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param { num_output: 30 transpose: true weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" param { name: "shared" }
        inner_product_param { num_output: 30 weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "ip3" type: "InnerProduct" bottom: "ip2" top: "ip3" param { name: "shared" }
        inner_product_param { num_output: 30 weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "ip4" type: "InnerProduct" bottom: "ip3" top: "ip4" param { lr_mult: 0 } param { lr_mult: 1 }
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.2 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip4" bottom: "label" top: "loss" }
'''


@pytest.mark.parametrize('iter_size', [1, 2])
def test_weight_diffs_left_to_the_backward_train_as_cleared_ones(tmp_path, monkeypatch, iter_size):
    """With every InnerProduct's weight diff overwritable (OVERWRITE_FROM 1), the solver's clear
    leaves only ip1's to its backward (ip2 and ip3 share theirs, ip4's has lr_mult 0); training
    then follows the run that zeroes every diff, with iter_size too. A pass that stops before the
    backward leaves that diff zeroed, as Caffe's clear would."""
    from pycaffe_ft.layers import inner_product
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'net.prototxt').write_text(WIDE_NET)
    (tmp_path / 'solver.prototxt').write_text('net: "net.prototxt"\nbase_lr: 0.1\nmomentum: 0.9\nweight_decay: 0.001\n'
                                              'lr_policy: "fixed"\nmax_iter: 10\nrandom_seed: 3\niter_size: %d\n'
                                              % iter_size)
    rng = np.random.default_rng(5)
    data, label = rng.standard_normal((6, 40)), rng.integers(0, 5, 6)
    runs, written = [], []
    weight_gradient = inner_product._weight_gradient
    monkeypatch.setattr(inner_product, '_weight_gradient', lambda *args: (written.append(args[-1]),
                                                                          weight_gradient(*args)))
    for least in (1 << 60, 1):
        monkeypatch.setattr(inner_product, 'OVERWRITE_FROM', least)
        solver = caffe.SGDSolver('solver.prototxt')
        net = solver.net
        net.blobs['data'].data[...], net.blobs['label'].data[...] = data, label
        solver.step(4)
        runs.append([blob.data.copy() for blob in net.learnable_params] +
                    [blob.diff.copy() for blob in net.learnable_params])
    assert [(layer.layer_param.name, j) for layer, j, _, _ in net._overwritable] == [('ip1', 0)]
    assert written == [True] * 4  # ip1's (transposed) weights, written once an iteration
    for ours, theirs in zip(runs[1], runs[0]):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)
    net.param_diff[...] = np.nan
    net.clear_param_diffs(overwrite_next=True)
    ip1 = net.params['ip1'][0].diff
    assert np.isnan(ip1).all() and np.count_nonzero(net.param_diff) == ip1.size
    net.settle_param_diffs()
    assert not net.param_diff.any()
    net.param_diff[...] = np.nan
    net.clear_param_diffs()  # pycaffe's: every diff zeroed, none left to a backward
    assert not net.param_diff.any() and not net.layers[1].param_diffs_to_overwrite
