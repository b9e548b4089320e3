"""Numba compile cost: time to the first LeNet forward+backward with a cold kernel cache and
with a warm one (each in a fresh process).

Usage: python tools/bench_jit.py
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROBE = '''
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
print('import %%.2f s, first forward+backward %%.2f s' %% (t1 - t0, t2 - t1))
''' % os.path.join(ROOT, 'models', 'lenet', 'lenet.prototxt')


def main():
    cache = tempfile.mkdtemp()
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    for label in ('cold cache', 'warm cache'):
        out = subprocess.run([sys.executable, '-c', PROBE], env=env, capture_output=True, text=True)
        print('%-10s %s' % (label, (out.stdout or out.stderr).strip().splitlines()[-1]))


if __name__ == '__main__':
    main()
