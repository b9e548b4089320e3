"""Numba compile cost: the time to a net's first pass with an empty kernel cache (what a user
waits for on the first run after installing) and with the cache warm, each in a fresh process.

By default LeNet's deploy net (``models/lenet/lenet.prototxt``), first forward + backward, as
this tool has measured since session 7. With ``--nets``, the first training step (SGD, Input
layers, the nets of ``tools/bench_nets.py``) of each named net instead. The kernels compiled in
the background meanwhile (``pycaffe_ft.kernels.tiered``) are waited for before the probe ends,
and how much later they were done is printed too: the next pass runs them.

Usage: python tools/bench_jit.py [--nets lenet,cifar10_quick,alexnet] [--rounds N]
"""
import argparse
import os
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
DEPLOY_PROBE = '''
import time
t0 = time.perf_counter()
import numpy as np
import pycaffe_ft as caffe
t1 = time.perf_counter()
net = caffe.Net(%r, caffe.TRAIN)
net.blobs['data'].data[...] = np.random.rand(*net.blobs['data'].shape)
net.forward()
net.backward()
t2 = time.perf_counter()
from pycaffe_ft.kernels import tiered
tiered.finish()
print('import %%.2f s, first forward+backward %%.2f s (background compiles done %%.2f s later)'
      %% (t1 - t0, t2 - t1, time.perf_counter() - t2))
''' % os.path.join(ROOT, 'models', 'lenet', 'lenet.prototxt')
TRAIN_PROBE = '''
import sys, time
t0 = time.perf_counter()
import pycaffe_ft
sys.path.insert(0, %r)
import bench_train
t1 = time.perf_counter()
name = sys.argv[1]
caffe, proto, solver, data, label = bench_train._build(name, bench_train.TRAIN_BATCH[name], False)
s = bench_train.sgd_solver(caffe, proto, solver)
s.net.blobs['data'].data[...] = data
s.net.blobs['label'].data[...] = label
s.step(1)
t2 = time.perf_counter()
from pycaffe_ft.kernels import tiered
tiered.finish()
print('import %%.2f s, first training step %%.2f s (background compiles done %%.2f s later)'
      %% (t1 - t0, t2 - t1, time.perf_counter() - t2))
''' % HERE


def _probe(code, args, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, '-c', code] + args, env=env, capture_output=True, text=True)
    lines = (out.stdout or out.stderr).strip().splitlines()
    return lines[-1] if lines else 'no output (exit %d)' % out.returncode


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--nets', default='', help='comma-separated nets of tools/bench_nets.py (training step)')
    parser.add_argument('--rounds', type=int, default=1, help='cold + warm pairs per net, each with a new cache')
    args = parser.parse_args(argv)
    cases = [(name, TRAIN_PROBE, [name]) for name in args.nets.split(',') if name] or [('lenet deploy', DEPLOY_PROBE, [])]
    for name, code, extra in cases:
        for _ in range(args.rounds):
            cache = tempfile.mkdtemp(prefix='kernel_cache_')
            try:
                for label in ('cold cache', 'warm cache'):
                    print('%-14s %-10s %s' % (name, label, _probe(code, extra, cache)), flush=True)
            finally:
                shutil.rmtree(cache, ignore_errors=True)


if __name__ == '__main__':
    main()
