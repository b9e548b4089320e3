"""pycaffe's process-wide helpers (pycaffe_ft.caffe_runtime): caffe.log and caffe.init_log,
caffe.Timer, has_nccl, and solver_count / solver_rank with Caffe's meaning: only the root
solver tests, displays and snapshots, and a TRAIN Data layer of solver r of S reads records
r, r + S, ... (DataLayer::Skip)."""
import io
import logging
import os

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft import caffe_runtime
from pycaffe_ft.errors import SolverError
from pycaffe_ft.log import logger, set_stream

from .layers.test_data_sources import _data_net


@pytest.fixture
def lines():
    """The log lines written during the test (through a handler of their own)."""
    records = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)
    handler = Keep()
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


@pytest.fixture
def restore_runtime():
    level, state = logger.level, dict(caffe_runtime._state)
    yield
    caffe_runtime._state.update(state)
    logger.setLevel(level)
    caffe_runtime.init_log(None, True)


def test_caffe_log_is_pycaffes_function_writing_an_info_line(lines):
    assert callable(caffe.log)
    caffe.log('a line from a script')
    assert [(r.levelname, r.getMessage()) for r in lines] == [('INFO', 'a line from a script')]
    assert lines[0].pathname == __file__  # the caller's file:line, as glog shows the caller's


def test_init_log_sets_glogs_minloglevel(lines, restore_runtime):
    caffe.init_log()
    caffe.init_log(1)
    logger.info('hidden')
    logger.warning('shown')
    caffe.init_log(0)
    logger.info('shown too')
    assert [r.getMessage() for r in lines] == ['shown', 'shown too']
    for bad in (4, -1, 'INFO', True):
        with pytest.raises(ValueError, match='minloglevel'):
            caffe.init_log(bad)


def test_init_log_without_stderr_writes_glogs_file_and_only_errors_to_stderr(restore_runtime):
    stderr = io.StringIO()  # what the stderr handler writes
    previous = set_stream(stderr)
    try:
        caffe.init_log(0, False)
        path = caffe_runtime.log_to_stderr(False)
        logger.info('to the file')
        logger.error('to both')
        with open(path) as f:
            text = f.read()
        assert os.path.basename(path).startswith('pycaffe-ft.') and '.log.INFO.' in path
        assert 'to the file' in text and 'to both' in text and text.startswith('I')
        assert 'to the file' not in stderr.getvalue() and 'to both' in stderr.getvalue()
        caffe.init_log(0, True)
        logger.info('back on stderr')
        assert 'back on stderr' in stderr.getvalue() and 'back on stderr' not in open(path).read()
        os.unlink(path)
    finally:
        set_stream(previous)


def test_timer_measures_between_start_and_stop(monkeypatch, lines):
    clock = iter([10.0, 10.25, 11.0, 11.5])
    monkeypatch.setattr(caffe_runtime.time, 'perf_counter', lambda: next(clock))
    timer = caffe.Timer()
    assert timer.ms == 0.0 and 'never been run' in lines[-1].getMessage()
    timer.start()
    timer.stop()
    assert timer.ms == 250.0
    timer.start()
    assert timer.ms == 500.0 and not timer.running  # reading a running timer stops it


def test_solver_bookkeeping(restore_runtime):
    assert (caffe.solver_count(), caffe.solver_rank(), caffe.has_nccl()) == (1, 0, False)
    caffe.set_solver_count(4)
    caffe.set_solver_rank(3)
    caffe.set_multiprocess(True)
    assert (caffe.solver_count(), caffe.solver_rank(), caffe_runtime.multiprocess()) == (4, 3, True)
    with pytest.raises(ValueError, match='set_solver_count'):
        caffe.set_solver_count(0)
    with pytest.raises(ValueError, match='set_solver_rank'):
        caffe.set_solver_rank(-1)


def test_a_train_data_layer_of_solver_r_of_s_reads_every_sth_record(tmp_path, restore_runtime):
    caffe.set_solver_count(3)
    caffe.set_solver_rank(2)
    net = _data_net(tmp_path, batch=25)
    net.forward()
    net.forward()  # the second batch goes round the 60 records
    assert net.layers[0].last_records == [(2 + 3 * p) % 60 for p in range(25, 50)]
    test = caffe.Net(_test_net(tmp_path), caffe.TEST)
    test.forward()
    assert test.layers[0].last_records == list(range(25))  # TEST reads every record (as Caffe)


def _test_net(tmp_path):
    from pycaffe_ft.proto import caffe_pb2
    param = caffe_pb2.NetParameter()
    param.layer.add(name='d', type='Data', top=['data', 'label'],
                    data_param=caffe_pb2.DataParameter(source=str(tmp_path / 'lmdb'), batch_size=25,
                                                        backend=caffe_pb2.DataParameter.LMDB))
    path = tmp_path / 'test.prototxt'
    from google.protobuf import text_format
    path.write_text(text_format.MessageToString(param))
    return str(path)


SOLVER = '''net_param {
  layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
  layer { name: "y" type: "Input" top: "y" input_param { shape { dim: 4 dim: 2 } } }
  layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
          inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
  layer { name: "loss" type: "EuclideanLoss" bottom: "ip" bottom: "y" top: "loss" }
}
base_lr: 0.1
lr_policy: "fixed"
max_iter: 4
display: 1
test_iter: 1
test_interval: 2
snapshot: 2
snapshot_prefix: "%s"
'''


def test_only_the_root_solver_tests_displays_and_snapshots(tmp_path, restore_runtime, lines):
    path = tmp_path / 'solver.prototxt'
    path.write_text(SOLVER % (tmp_path / 'snap'))
    caffe.set_solver_count(2)
    caffe.set_solver_rank(1)
    worker = caffe.SGDSolver(str(path))
    assert worker.test_nets == [] and worker.max_iter == 4
    del lines[:]
    worker.solve()
    messages = [r.getMessage() for r in lines]
    assert worker.iter == 4 and not any(m.startswith(('Iteration', 'Snapshotting', '    Test')) for m in messages)
    assert not list(tmp_path.glob('snap_iter_*'))
    with pytest.raises(SolverError, match='only the root solver writes snapshots'):
        worker.snapshot()
    caffe.set_solver_rank(0)
    root = caffe.SGDSolver(str(path))
    del lines[:]
    root.solve()
    assert len(root.test_nets) == 1 and sorted(p.name for p in tmp_path.glob('snap_iter_*')) == [
        'snap_iter_2.caffemodel', 'snap_iter_2.solverstate', 'snap_iter_4.caffemodel', 'snap_iter_4.solverstate']
    assert any(r.getMessage().startswith('Iteration 1 ') for r in lines)


def test_share_weights_gives_a_net_the_solvers_weights(tmp_path):
    path = tmp_path / 'solver.prototxt'
    path.write_text(SOLVER % (tmp_path / 'snap'))
    solver = caffe.SGDSolver(str(path))
    other = caffe.Net(str(_deploy(tmp_path)), caffe.TEST)
    solver.share_weights(other)
    solver.step(1)
    assert np.shares_memory(other.params['ip'][0].data, solver.net.params['ip'][0].data)
    assert np.array_equal(other.params['ip'][0].data, solver.net.params['ip'][0].data)


def _deploy(tmp_path):
    path = tmp_path / 'deploy.prototxt'
    path.write_text(SOLVER.split('}\nbase_lr')[0].replace('net_param {', '') + '\n')
    return path


IP_NET = '''force_backward: true
layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 4 dim: 3 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip"
        inner_product_param { num_output: 2 weight_filler { type: "gaussian" std: 0.1 } } }
'''


def test_forward_backward_all_runs_batches_both_ways(tmp_path):
    """Against one pass at a time: 10 samples through a batch of 4 (the last padded), the
    output diffs given per sample; outputs, input diffs and padding as pycaffe returns them."""
    path = tmp_path / 'ip.prototxt'
    path.write_text(IP_NET)
    net = caffe.Net(str(path), caffe.TEST)
    rng = np.random.default_rng(1)
    x, dip = rng.standard_normal((10, 3)).astype(np.float32), rng.standard_normal((10, 2)).astype(np.float32)
    outs, diffs = net.forward_backward_all(blobs=['ip'], diffs=['x'], x=x, ip=dip)
    assert sorted(outs) == ['ip'] and sorted(diffs) == ['x']
    assert outs['ip'].shape == (10, 2) and diffs['x'].shape == (10, 3)
    for lo in range(0, 10, 4):
        k = len(x[lo:lo + 4])
        xb, db = np.zeros((4, 3), np.float32), np.zeros((4, 2), np.float32)
        xb[:k], db[:k] = x[lo:lo + 4], dip[lo:lo + 4]
        net.forward(x=xb)
        got = net.backward(ip=db)
        assert np.array_equal(outs['ip'][lo:lo + k], net.blobs['ip'].data[:k])
        assert np.array_equal(diffs['x'][lo:lo + k], got['x'][:k])
    assert np.allclose(diffs['x'], dip @ net.params['ip'][0].data, atol=1e-6)
    with pytest.raises(caffe.CaffeError, match='neither inputs'):
        net.forward_backward_all(z=x)


def test_pycaffes_private_views(tmp_path):
    net = caffe.Net(str(_deploy(tmp_path)), caffe.TEST)
    names = net._blob_names
    assert [names[i] for i in net._inputs] == net.inputs and [names[i] for i in net._outputs] == net.outputs
    assert net._blob_loss_weights == [net.blob_loss_weights[n] for n in names]
    for i, layer in enumerate(net._layer_names):
        assert [names[j] for j in net._top_ids(i)] == net.top_names[layer]
        assert [names[j] for j in net._bottom_ids(i)] == net.bottom_names[layer]
