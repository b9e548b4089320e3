"""Intra-op threads: BLAS calls through cblas (transposed views, accumulation), and the promise
that a net computes the same bits whatever the thread count."""
import os
import time

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft import intra_op

NET = '''name: "threads" force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 12 dim: 3 dim: 19 dim: 19 } } }
layer { name: "label" type: "Input" top: "label" input_param { shape { dim: 12 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
        convolution_param { num_output: 16 kernel_size: 5 pad: 2 weight_filler { type: "xavier" }
                            bias_filler { type: "constant" value: 0.1 } } }
layer { name: "relu1" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "norm1" type: "LRN" bottom: "conv1" top: "norm1" lrn_param { local_size: 5 alpha: 0.01 beta: 0.75 } }
layer { name: "pool1" type: "Pooling" bottom: "norm1" top: "pool1" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
        convolution_param { num_output: 8 kernel_size: 3 stride: 2 group: 2 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: AVE kernel_size: 2 stride: 1 pad: 1 } }
layer { name: "ip" type: "InnerProduct" bottom: "pool2" top: "ip" inner_product_param { num_output: 300
        weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
'''


@pytest.mark.parametrize('rows, cols', [(37, 41), (1, 41), (37, 1)])  # 1 row or column: GEMV
@pytest.mark.parametrize('accumulate', [False, True])
def test_gemm_reads_transposed_views_and_accumulates(accumulate, rows, cols):
    rng = np.random.default_rng(0)
    a, b = rng.random((rows, 29), dtype=np.float32), rng.random((29, cols), dtype=np.float32)
    for a_view in (a, np.ascontiguousarray(a.T).T):
        for b_view in (b, np.ascontiguousarray(b.T).T):
            big = rng.random((50, 60), dtype=np.float32)
            before = big.copy()
            out = big[3:3 + rows, 5:5 + cols]  # a strided block of a larger array
            intra_op.gemm(a_view, b_view, out, accumulate=accumulate)
            expected = (before[3:3 + rows, 5:5 + cols] if accumulate else 0) + a.astype(np.float64) @ b
            np.testing.assert_allclose(out, expected, rtol=1e-5)
            before[3:3 + rows, 5:5 + cols] = out
            assert np.array_equal(before, big), 'gemm wrote outside its output block'



def _train_state(threads, steps=2):
    intra_op.set_num_threads(threads)
    caffe.set_random_seed(5)
    param = caffe.proto.caffe_pb2.SolverParameter(base_lr=0.05, momentum=0.9, weight_decay=0.001,
                                                  lr_policy='fixed', display=0, random_seed=5)
    param.net_param.MergeFrom(caffe.proto.caffe_pb2.NetParameter())
    from pycaffe_ft.netspec_io import load_net_param
    net_param, _ = load_net_param(NET)
    param.net_param.CopyFrom(net_param)
    solver = caffe.SGDSolver(param)
    rng = np.random.default_rng(1)
    solver.net.blobs['data'].data[...] = rng.standard_normal(solver.net.blobs['data'].shape)
    solver.net.blobs['label'].data[...] = rng.integers(0, 300, 12)
    solver.step(steps)
    blobs = {name: (b.data.copy(), b.diff.copy()) for name, b in solver.net.blobs.items()}
    return solver.net.param_data.copy(), solver.history[0].copy(), blobs


def test_one_thread_and_two_compute_the_same_bits(restore_threads):
    one = _train_state(1)
    two = _train_state(2)
    assert np.array_equal(one[0], two[0]), 'weights differ between 1 and 2 threads'
    assert np.array_equal(one[1], two[1]), 'momentum history differs between 1 and 2 threads'
    for name in one[2]:
        assert np.array_equal(one[2][name][0], two[2][name][0]), 'blob %s data' % name
        assert np.array_equal(one[2][name][1], two[2][name][1]), 'blob %s diff' % name


def test_matmul_gives_the_same_bits_with_any_thread_count(restore_threads):
    rng = np.random.default_rng(2)
    for m, k, n in ((16, 2000, 1500), (500, 800, 64)):  # split by columns, by rows
        a, b = rng.random((m, k), dtype=np.float32), rng.random((k, n), dtype=np.float32)
        results = []
        for threads in (1, 2, 3):
            intra_op.set_num_threads(threads)
            results.append(intra_op.matmul(a, b, np.empty((m, n), np.float32)))
        assert all(np.array_equal(results[0], r) for r in results[1:])
        np.testing.assert_allclose(results[0], a.astype(np.float64) @ b, rtol=1e-5)


def test_image_chunks_depend_on_the_shape_only():
    chunks = intra_op.image_chunks(100, 1000, target=5000)
    assert chunks[0] == (0, 5) and chunks[-1] == (95, 100)
    assert sum(hi - lo for lo, hi in chunks) == 100
    assert intra_op.image_chunks(3, 10 ** 9) == [(0, 1), (1, 2), (2, 3)]
    sizes = [hi - lo for lo, hi in intra_op.image_chunks(16, 301056)]  # AlexNet's conv4 (Winograd)
    assert len(sizes) == 6 and sum(sizes) == 16 and max(sizes) - min(sizes) == 1
    assert intra_op.image_chunks(0, 10) == []


@pytest.mark.parametrize('size', [100, 3 * intra_op._SUM_BLOCK + 17])
def test_sum_in_chunk_order_adds_like_the_sequential_loop(restore_threads, size):
    rng = np.random.default_rng(0)
    parts = [rng.standard_normal((size,)).astype(np.float32) * 10.0 ** rng.integers(-3, 4) for _ in range(5)]
    expected = parts[0].copy()
    for part in parts[1:]:
        expected += part
    for threads in (1, 2):
        intra_op.set_num_threads(threads)
        assert np.array_equal(intra_op.sum_in_chunk_order([p.copy() for p in parts]), expected)


def test_set_num_threads_rejects_nonsense(restore_threads):
    with pytest.raises(ValueError, match='at least 1'):
        caffe.set_num_threads(0)
    caffe.set_num_threads(3)
    assert caffe.num_threads() == 3


@pytest.mark.skipif(not hasattr(os, 'fork'), reason='needs fork()')
def test_a_forked_child_gets_threads_of_its_own(restore_threads):
    """A process forked after the worker threads exist must not wait on the parent's threads."""
    intra_op.set_num_threads(2)
    intra_op.run_chunks(lambda lo, hi: lo, [(0, 1), (1, 2)])  # the worker threads exist now
    pid = os.fork()
    if pid == 0:  # the child: would hang on the parent's (absent) threads
        ok = False
        try:
            ok = intra_op.run_chunks(lambda lo, hi: lo * 10, [(i, i + 1) for i in range(6)]) == \
                [0, 10, 20, 30, 40, 50]
        finally:
            os._exit(0 if ok else 1)
    deadline = time.time() + 30
    while time.time() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            assert os.waitstatus_to_exitcode(status) == 0
            return
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    pytest.fail('the forked child hung in run_chunks')


@pytest.mark.skipif(intra_op.blas_library() is None, reason='NumPy links a BLAS other than OpenBLAS')
def test_one_thread_from_the_environment_pins_blas_too():
    """PYCAFFE_FT_NUM_THREADS=1 alone (OpenBLAS's own variable unset) means one thread in all:
    OpenBLAS must not keep its default of one thread per core beside it."""
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in ('OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS')}
    env['PYCAFFE_FT_NUM_THREADS'] = '1'
    code = ('from pycaffe_ft import intra_op; n = intra_op.num_threads(); '
            'print(n, intra_op.blas_library().threads())')
    out = subprocess.run([sys.executable, '-c', code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.split() == ['1', '1']


def _policy_in_child(env_update, code='print(intra_op.thread_policy())'):
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k not in intra_op._ENV_VARS + ('PYCAFFE_FT_LAUNCHER_SET',)}
    env.update(env_update)
    out = subprocess.run([sys.executable, '-c', 'from pycaffe_ft import intra_op; ' + code], env=env,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


@pytest.mark.parametrize('var', intra_op._ENV_VARS)
def test_a_thread_variable_the_user_set_wins_and_is_never_adapted(var):
    line = _policy_in_child({var: '3'}, 'intra_op._LoadWatch.others = lambda self, t: 5.0; '
                                        'intra_op.adapt_threads(); intra_op.adapt_threads(); '
                                        'print(intra_op.num_threads(), intra_op.thread_policy())')
    assert line.startswith('3 3 threads (from %s' % var)


def test_variables_the_launcher_set_for_blas_do_not_fix_the_thread_count():
    line = _policy_in_child({'OMP_NUM_THREADS': '1', 'OPENBLAS_NUM_THREADS': '1',
                             'PYCAFFE_FT_LAUNCHER_SET': 'OMP_NUM_THREADS,OPENBLAS_NUM_THREADS'})
    assert 'automatic' in line


def test_automatic_threads_share_the_cores_among_the_ranks_of_a_node():
    cores = intra_op.usable_cores()
    line = _policy_in_child({'OMPI_COMM_WORLD_LOCAL_SIZE': '2'}, 'print(intra_op.num_threads())')
    assert int(line) == max(1, cores // 2)


def test_automatic_threads_follow_the_cores_other_processes_leave_free(restore_threads, monkeypatch):
    """With 4 usable cores: others using 1.0 core leave 3 threads, 2.8 cores leave 1, an idle
    machine all 4; an explicit count is left alone."""
    monkeypatch.setattr(intra_op, 'usable_cores', lambda: 4)
    monkeypatch.delenv('OMPI_COMM_WORLD_LOCAL_SIZE', raising=False)
    load = []
    monkeypatch.setattr(intra_op._LoadWatch, 'others', lambda self, interval: load[-1])
    intra_op._state.update(threads=4, source='automatic', watch=None)
    intra_op.adapt_threads()  # the first call starts watching
    for others, threads in ((1.0, 3), (2.8, 1), (0.1, 4), (None, 4), (1.6, 2)):
        load.append(others)
        assert intra_op.adapt_threads() == threads == intra_op.num_threads()
    intra_op.set_num_threads(4)
    load.append(3.0)
    assert intra_op.adapt_threads() == 4


def test_the_load_watch_sees_a_busy_process():
    """/proc/stat minus our own CPU time: a spinning child shows up as roughly one core."""
    import subprocess
    import sys
    if not os.path.exists('/proc/stat'):
        pytest.skip('no /proc/stat (not Linux)')
    watch = intra_op._LoadWatch(os.sched_getaffinity(0))
    spinner = subprocess.Popen([sys.executable, '-c', 'import time\nt = time.time()\nwhile time.time() - t < 3: pass'])
    try:
        time.sleep(1.5)
        others = watch.others(0.5)
    finally:
        spinner.kill()
        spinner.wait()
    assert others is not None and others > 0.5
    assert watch.others(10.0) is None  # too soon for another reading


def test_planes_are_rows_per_image_and_channel_of_any_array():
    from pycaffe_ft.intra_op import planes
    for shape, rows in (((2, 3, 4, 5), (6, 20)), ((4, 10), (40, 1)), ((7,), (7, 1)), ((), (1, 1)),
                        ((0, 3, 4), (0, 0))):
        a = np.arange(int(np.prod(shape)), dtype=np.float32).reshape(shape)
        view = planes(a)
        assert view.shape == rows and np.shares_memory(view, a) | (a.size == 0)
        assert view.reshape(-1).tolist() == a.reshape(-1).tolist()


def test_for_images_calls_each_image_range_once_in_order():
    """One range below ``least`` values, none for no images, else :func:`image_chunks` of
    about 256K values; for_images calls fn on exactly those ranges, results in their order."""
    assert intra_op.image_ranges(0, 10) == []
    assert intra_op.image_ranges(3, 10, least=100) == [(0, 3)]
    ranges = intra_op.image_ranges(16, 43264, least=1 << 19)
    assert ranges == intra_op.image_chunks(16, 43264, target=1 << 18)
    assert ranges[0][0] == 0 and ranges[-1][1] == 16 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    assert intra_op.for_images(lambda lo, hi: (lo, hi), 16, 43264, 1 << 19) == ranges
