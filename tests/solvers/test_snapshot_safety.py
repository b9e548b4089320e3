"""Snapshots and solver states under damage: a state without usable weights is refused (never
a silent fresh start), reads are bounded, and temp files a killed writer left are removed at
the next snapshot while every earlier snapshot stays intact."""

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import SolverError
from pycaffe_ft.proto import caffe_pb2

NET = ('layer { name: "x" type: "DummyData" top: "x" top: "y" dummy_data_param { shape { dim: 2 dim: 3 } '
       'shape { dim: 2 } data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }\n'
       'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { num_output: 2 '
       'weight_filler { type: "gaussian" } } }\n'
       'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }\n')


@pytest.fixture
def job(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'net.prototxt').write_text(NET)
    (tmp_path / 's.prototxt').write_text('net: "net.prototxt" base_lr: 0.1 lr_policy: "fixed" max_iter: 6 '
                                         'snapshot: 2 snapshot_prefix: "snap" random_seed: 1')
    solver = caffe.get_solver('s.prototxt')
    solver.step(2)
    return tmp_path


def state_with(job, learned):
    state = caffe_pb2.SolverState()
    state.ParseFromString((job / 'snap_iter_2.solverstate').read_bytes())
    state.learned_net = learned
    (job / 'bad.solverstate').write_bytes(state.SerializeToString())
    return 'bad.solverstate'


@pytest.mark.parametrize('learned, message', [
    ('', 'names no weights file (learned_net is empty) and bad.caffemodel does not exist'),
    ('/dev/zero', 'not a regular file'),
    ('missing.caffemodel', 'missing.caffemodel: file not found'),
    ('s.prototxt', 'not a valid binary NetParameter'),
])
def test_a_state_without_usable_weights_is_refused(job, learned, message):
    with pytest.raises(SolverError, match='bad.solverstate') as info:
        caffe.get_solver('s.prototxt').restore(state_with(job, learned))
    assert message in str(info.value)


def test_an_empty_learned_net_takes_the_caffemodel_beside_the_state(job):
    """Where Caffe writes it: <stem>.caffemodel next to <stem>.solverstate."""
    state = caffe_pb2.SolverState()
    state.ParseFromString((job / 'snap_iter_2.solverstate').read_bytes())
    state.learned_net = ''
    (job / 'snap_iter_2.solverstate').write_bytes(state.SerializeToString())
    solver = caffe.get_solver('s.prototxt')
    solver.restore('snap_iter_2.solverstate')
    saved = caffe.Net('net.prototxt', 'snap_iter_2.caffemodel', caffe.TEST)
    assert solver.iter == 2 and np.array_equal(solver.net.params['ip'][0].data, saved.params['ip'][0].data)


def test_temp_files_of_a_killed_writer_are_removed_and_snapshots_kept(job):
    leftovers = ['.snap_iter_4.caffemodel.abc123.tmp', '.snap_iter_4.solverstate.x_9.tmp',
                 'snap_iter_4.solverstate.h5.tmp']
    others = ['.other_iter_4.caffemodel.abc.tmp', 'snap_iter_4.caffemodel.tmp', 'notes.txt']
    for name in leftovers + others:
        (job / name).write_bytes(b'half written')
    before = {name: (job / name).read_bytes() for name in ('snap_iter_2.caffemodel', 'snap_iter_2.solverstate')}
    solver = caffe.get_solver('s.prototxt')
    solver.restore('snap_iter_2.solverstate')
    solver.step(2)  # snapshots at 4
    assert not any((job / name).exists() for name in leftovers)
    assert all((job / name).exists() for name in others)  # not ours: left alone
    assert all((job / name).read_bytes() == data for name, data in before.items())
    assert (job / 'snap_iter_4.solverstate').exists()


DIVERGING = ('layer { name: "x" type: "DummyData" top: "x" top: "y" dummy_data_param { shape { dim: 2 dim: 3 } '
             'shape { dim: 2 dim: 1 } data_filler { type: "constant" value: 1 } data_filler { type: "constant" '
             'value: 1 } } }\n'
             'layer { name: "ip1" type: "InnerProduct" bottom: "x" top: "h" inner_product_param { num_output: 4 '
             'weight_filler { type: "constant" value: %s } } }\n'
             'layer { name: "%s" type: "%s" bottom: "h" top: "p" %s }\n'
             'layer { name: "ip2" type: "InnerProduct" bottom: "p" top: "out" inner_product_param { num_output: 1 '
             'weight_filler { type: "constant" value: 1 } } }\n'
             'layer { name: "loss" type: "EuclideanLoss" bottom: "out" bottom: "y" top: "loss" }\n')


@pytest.mark.parametrize('weight, layer, kind, params, message', [
    # sqrt at 0: the loss is finite, the gradient is not; found going backward at the Power layer
    (0, 'root', 'Power', 'power_param { power: 0.5 }',
     'iteration 0: the gradient is not finite (first non-finite value: backward, layer "root" (type Power), '
     'bottom blob "h" diff)'),
    # log of a negative number: the loss is NaN; found going forward at the Log layer
    (-1, 'log', 'Log', '',
     'iteration 0: the loss is nan (first non-finite value: forward, layer "log" (type Log), top blob "p" data)'),
])
def test_non_finite_training_names_the_iteration_and_the_layer_and_keeps_snapshots(
        tmp_path, monkeypatch, weight, layer, kind, params, message):
    monkeypatch.chdir(tmp_path)
    (tmp_path / 'net.prototxt').write_text(DIVERGING % (weight, layer, kind, params))
    (tmp_path / 's.prototxt').write_text('net: "net.prototxt" base_lr: 0.1 lr_policy: "fixed" max_iter: 2 '
                                         'snapshot: 1 snapshot_prefix: "snap"')
    solver = caffe.get_solver('s.prototxt')
    before = solver.net.params['ip1'][0].data.copy()
    with pytest.raises(SolverError) as info:
        solver.step(1)
    assert message in str(info.value) and 'before applying this update' in str(info.value)
    assert np.array_equal(solver.net.params['ip1'][0].data, before)  # not applied
    assert not list(tmp_path.glob('snap_iter_*'))  # nothing written from non-finite weights
