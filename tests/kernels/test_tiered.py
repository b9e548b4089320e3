"""Tiered compilation (pycaffe_ft.kernels.tiered), in fresh processes with an empty kernel cache
and two threads: the first pass runs the references (and its chunks on one thread) while the
worker compiles the vector kernels (and the thread crew's; the Winograd convolution's run as
NumPy meanwhile), a pass after the worker is done
loads those from the cache the worker wrote; every pass gives the bits the vector kernels give when compiled in
place; a worker that dies or cannot start leaves the compiles to the process."""
import json
import os
import subprocess
import sys

import pytest

from pycaffe_ft.kernels import tiered

NET = '''
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 64 dim: 1 dim: 28 dim: 28 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } bias_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "pool3" type: "Pooling" bottom: "pool2" top: "pool3" pooling_param { pool: AVE kernel_size: 3 pad: 1 } }
'''

WINOGRAD_NET = NET.replace('bottom: "pool2" top: "pool3"', 'bottom: "conv3" top: "pool3"').replace(
    'layer { name: "pool3"', '''layer { name: "conv3" type: "Convolution" bottom: "pool2" top: "conv3"
  convolution_param { num_output: 16 kernel_size: 3 pad: 1 weight_filler { type: "xavier" } } }
layer { name: "pool3"''')

PASSES = '''
import gc, json, sys
import numpy as np
import pycaffe_ft as caffe
from numba.core.dispatcher import Dispatcher
from pycaffe_ft.kernels import tiered

def compiled():
    """{kernel: (compiled here, loaded from the cache)} of the pooling and convolution kernels
    and the thread crew's."""
    return {d.py_func.__qualname__: (sum(d.stats.cache_misses.values()), sum(d.stats.cache_hits.values()))
            for d in gc.get_objects() if isinstance(d, Dispatcher) and d.py_func.__module__.endswith(
                ('kernels.pooling', 'kernels.direct_conv', 'kernels.spin', 'kernels.winograd')) and d.overloads}

caffe.set_random_seed(1)
net = caffe.Net(sys.argv[1], caffe.TRAIN)
net.blobs['data'].data[...] = np.random.default_rng(0).standard_normal(net.blobs['data'].shape)
if sys.argv[2] == 'no-worker':
    tiered.sys.executable = '/nonexistent/python'
out = {}
for name in ('first', 'second'):
    net.forward()
    out[name] = {'blobs': {b: net.blobs[b].data.tobytes().hex() for b in net.blobs}, 'kernels': compiled()}
    if sys.argv[2] == 'worker-dies' and name == 'first':
        tiered._worker[0]._process.kill()
        tiered.finish()  # the answer reader sees the worker end and releases its jobs
    elif name == 'first':
        tiered.finish()  # the vector kernels run once the worker has them
print(json.dumps(out))
'''


def _passes(tmp_path, mode, background, net=NET):
    net_path = tmp_path / 'net.prototxt'
    net_path.write_text(net)
    cache = tmp_path / ('cache-' + mode + background)
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), PYCAFFE_FT_NUM_THREADS='2', **{tiered.ENV: background})
    out = subprocess.run([sys.executable, '-c', PASSES, str(net_path), mode], env=env, capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope='module')
def in_place(tmp_path_factory):
    """Both passes with every kernel compiled in place (no background compiles)."""
    return _passes(tmp_path_factory.mktemp('in_place'), 'worker', '0')


REFERENCES = {'forward_reference'}  # (the pooling's references are NumPy)
# Helpers compiled only as callees of cached kernels, whose caches hold their code (see
# pycaffe_ft.kernels): the Winograd pipeline's pieces, and the plane-lane pooling's transposes
# (where the CPU has no AVX-512, this net's pools go by plane lanes)
PIECES = {'to_channels_last', 'tile_transform', 'tile_inverse', 'from_channels_last', '_line', '_zero_border',
          '_to_lanes', '_from_lanes'}


def test_the_first_pass_runs_the_references_and_the_next_the_vector_kernels_the_worker_compiled(tmp_path):
    """(A net with a Winograd convolution, whose kernels' references are NumPy.)"""
    (tmp_path / 'in_place').mkdir()
    in_place = _passes(tmp_path / 'in_place', 'worker', '0', WINOGRAD_NET)
    fast = set(in_place['first']['kernels']) - {'_max_pool_backward'}
    assert not fast & REFERENCES and {'await_other', 'publish', 'convolve_images'} < fast and len(fast) > 6
    out = _passes(tmp_path, 'worker', '1', WINOGRAD_NET)
    first, second = out['first']['kernels'], out['second']['kernels']
    assert REFERENCES <= set(first)
    for kernel in fast:  # loaded from the worker's cache (in the first pass too once it is done), not compiled here
        assert first.get(kernel, (0, 0))[0] == 0 and second.get(kernel, (0, 0))[0] == 0, kernel
        # (the pieces come inside their callers, which are loaded)
        assert kernel in PIECES or second[kernel][1] > 0, kernel
    assert second['convolve_images'][1] > 0
    for name in ('first', 'second'):
        assert out[name]['blobs'] == in_place[name]['blobs']


@pytest.mark.parametrize('mode', ['no-worker', 'worker-dies'])
def test_without_a_worker_the_kernels_compile_in_place(tmp_path, in_place, mode):
    out = _passes(tmp_path, mode, '1')
    fast = set(in_place['first']['kernels']) - {'_max_pool_backward'}
    kernels = out['second']['kernels']
    assert fast <= set(kernels)
    if mode == 'no-worker':  # the worker could not start: the first pass compiles them at once
        assert not REFERENCES & set(out['first']['kernels'])
    for name in ('first', 'second'):
        assert out[name]['blobs'] == in_place[name]['blobs']


TRAIN_NET = NET.replace('dim: 64 dim: 1 dim: 28 dim: 28', 'dim: 16 dim: 1 dim: 28 dim: 28') + '''
layer { name: "label" type: "Input" top: "label" input_param { shape { dim: 16 } } }
layer { name: "ip" type: "InnerProduct" bottom: "pool3" top: "ip"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "label" top: "loss" }
'''

AHEAD = '''
import json, sys
import numpy as np
import pycaffe_ft as caffe
from pycaffe_ft.kernels import c_functions, tiered

caffe.set_random_seed(1)
net = caffe.Net(sys.argv[1], caffe.TRAIN)
ahead = [kernel for layer in net.layers for kernel, _ in layer.backward_compiles()]
handed = sorted(getattr(k, '__qualname__', '') for k in tiered._ahead)
tiered.finish()  # the worker has compiled what the backward will need
rng = np.random.default_rng(0)
net.blobs['data'].data[...] = rng.standard_normal(net.blobs['data'].shape)
net.blobs['label'].data[...] = rng.integers(0, 10, 16)
net.forward()
net.backward()
compiled = {}
for kernel in ahead:  # (compiled here, loaded from the cache)
    if hasattr(kernel, 'py_func'):
        compiled[kernel.py_func.__qualname__] = (sum(kernel.stats.cache_misses.values()),
                                                 sum(kernel.stats.cache_hits.values()))
    elif kernel in c_functions._made:  # (without the worker the fast C functions run from the start)
        made = c_functions._made[kernel]
        compiled[kernel.__qualname__] = (1 - made._cache_hits, made._cache_hits)
diffs = {'%s/%d' % (name, i): b.diff.tobytes().hex() for name, blobs in net.params.items() for i, b in enumerate(blobs)}
print(json.dumps({'handed': handed, 'compiled': compiled, 'diffs': diffs}))
'''


def test_a_training_net_hands_its_backward_compiles_to_the_worker_ahead(tmp_path):
    """The convolutions' backward kernels (the direct weight gradient's reference; the im2col
    chunk kernel and its C functions) compile in the worker while the net is built and its first
    forward runs: the backward loads them from the cache, and its diffs are those of a run
    compiling everything in place."""
    net_path = tmp_path / 'net.prototxt'
    net_path.write_text(TRAIN_NET)
    runs = {}
    for background in ('1', '0'):
        env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / ('cache' + background)), **{tiered.ENV: background})
        out = subprocess.run([sys.executable, '-c', AHEAD, str(net_path)], env=env, capture_output=True, text=True,
                             timeout=600)
        assert out.returncode == 0, out.stderr
        runs[background] = json.loads(out.stdout.strip().splitlines()[-1])
    with_worker = runs['1']
    assert len(with_worker['compiled']) >= 1 and len(with_worker['handed']) == len(with_worker['compiled'])
    for kernel, (here, loaded) in with_worker['compiled'].items():
        assert here == 0 and loaded > 0, kernel
    assert not runs['0']['handed']  # without the worker nothing is handed ahead
    assert with_worker['diffs'] == runs['0']['diffs']


def test_a_run_waits_for_the_worker_of_a_run_still_compiling_into_its_cache(tmp_path):
    """While another run's worker holds the cache's compile lock, a new run's first tiered
    kernel waits for it to end (then loads what it compiled) instead of compiling beside it."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / 'cache'), **{tiered.ENV: '1'})
    holder = subprocess.Popen([sys.executable, '-c', 'import sys, time\nfrom pycaffe_ft.kernels import tiered\n'
                               'lock = tiered._compile_lock()\nprint(bool(lock), flush=True)\ntime.sleep(3)'],
                              env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == 'True'
        probe = ('import time\nfrom pycaffe_ft.kernels import tiered\nstart = time.monotonic()\n'
                 'print(tiered._after_other_runs(), tiered._after_other_runs(), time.monotonic() - start)')
        out = subprocess.run([sys.executable, '-c', probe], env=env, capture_output=True, text=True, timeout=120)
        waited, again, seconds = out.stdout.split()
        assert (waited, again) == ('True', 'False') and float(seconds) >= 1.0  # once a process
        out = subprocess.run([sys.executable, '-c', probe], env=env, capture_output=True, text=True, timeout=120)
        assert out.stdout.split()[0] == 'False'  # the holder has ended: nothing to wait for
    finally:
        holder.kill()
        holder.wait()


TAKE_OVER = '''
import json
import numpy as np
from pycaffe_ft.kernels import relu, small_gemm, tiered
f = np.zeros(64, np.float32)
first, gemm_args = small_gemm.batched_gemm_reference, (f, 0, 0, 4, 1, f, 0, 0, 4, f, 0, 0, 4, 1, 4, 4, 4)
tiered.ahead(first, gemm_args)  # the worker starts, then compiles this for a second or more
tiered.ahead(relu.relu_backward_kernel, (f, f, f))
later = tiered._ahead[relu.relu_backward_kernel][0]
tiered.await_ahead(first)  # meanwhile this process compiles the later one
taken = later.taken and relu.relu_backward_kernel in tiered._ready
here = sum(relu.relu_backward_kernel.stats.cache_misses.values())
assert tiered.ready(first, gemm_args)
print(json.dumps({'taken': taken, 'here': here, 'first': [sum(first.stats.cache_misses.values()),
                                                          sum(first.stats.cache_hits.values())]}))
'''


def test_a_process_waiting_for_the_worker_compiles_the_last_ahead_compile_it_has_not_started(tmp_path):
    """While the backward waits for an ahead compile the worker has not finished, this process
    compiles the last one handed after it (the worker takes them in order, so it reaches that
    one last): the two cores share the backward's compiles. The awaited kernel is then loaded
    from the cache the worker wrote."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / 'cache'), **{tiered.ENV: '1'})
    out = subprocess.run([sys.executable, '-c', TAKE_OVER], env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {'taken': True, 'here': 1, 'first': [0, 1]}
