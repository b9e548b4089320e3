"""Through the opt-in ``caffe`` alias, as a pycaffe script sees it: caffe.coord_map, HDF5 net
I/O, a Python layer whose add_blob parameters train under SGDSolver and survive save/load, and
the process-wide helpers (init_log, log, Timer, the solver count and rank)."""
import os
import subprocess
import sys
import textwrap

import pytest

pytest.importorskip('h5py')

LAYER = '''
import numpy as np
import caffe


class Affine(caffe.Layer):
    """y = w * x + b, with w and b learnable blobs added in setup."""
    def setup(self, bottom, top):
        self.blobs.add_blob(1)
        self.blobs.add_blob(1)
        self.blobs[0].data[...] = 0.5

    def reshape(self, bottom, top):
        top[0].reshape(*bottom[0].data.shape)

    def forward(self, bottom, top):
        top[0].data[...] = self.blobs[0].data * bottom[0].data + self.blobs[1].data

    def backward(self, top, propagate_down, bottom):
        self.blobs[0].diff[...] += (top[0].diff * bottom[0].data).sum()
        self.blobs[1].diff[...] += top[0].diff.sum()
        bottom[0].diff[...] = top[0].diff * self.blobs[0].data
'''

SCRIPT = '''
import numpy as np
import caffe
import caffe.coord_map
from caffe import layers as L, params as P
from caffe.coord_map import crop

# the preamble of Caffe's multi-GPU python/train.py, one solver
caffe.init_log(2, True)
caffe.log('Using devices [0]')
caffe.set_mode_cpu()
caffe.set_solver_count(1)
caffe.set_solver_rank(0)
caffe.set_multiprocess(True)
timer = caffe.Timer()
timer.start()
timer.stop()
print('runtime', timer.ms >= 0, caffe.has_nccl(), caffe.solver_count(), caffe.solver_rank())

# coord_map through the alias
n = caffe.NetSpec()
n.data = L.Input(shape=dict(dim=[1, 1, 10, 10]))
n.conv = L.Convolution(n.data, num_output=1, kernel_size=3, pad=3)
n.out = crop(n.conv, n.data)
print('crop offset', list(n.to_proto().layer[-1].crop_param.offset))
try:
    crop(n.data, n.conv)
except AssertionError as e:
    print('misaligned crop: AssertionError')

# a Python layer with add_blob parameters, trained by SGDSolver to fit y = 3 x - 1
n = caffe.NetSpec()
n.x = L.Input(shape=dict(dim=[16, 1]))
n.y = L.Input(shape=dict(dim=[16, 1]))
n.pred = L.Python(n.x, python_param=dict(module='affine', layer='Affine'))
n.loss = L.EuclideanLoss(n.pred, n.y)
open('net.prototxt', 'w').write(str(n.to_proto()))
open('solver.prototxt', 'w').write('net: "net.prototxt" base_lr: 0.2 lr_policy: "fixed" momentum: 0.5 '
                                   'max_iter: 300 display: 0 snapshot_after_train: false')
solver = caffe.SGDSolver('solver.prototxt')
rng = np.random.RandomState(0)
for _ in range(200):
    x = rng.uniform(-1, 1, (16, 1)).astype(np.float32)
    solver.net.blobs['x'].data[...] = x
    solver.net.blobs['y'].data[...] = 3 * x - 1
    solver.step(1)
w, b = (float(blob.data[0]) for blob in solver.net.params['pred'])
print('learned %.3f %.3f' % (w, b))
solver.net.save('affine.caffemodel')
solver.net.save_hdf5('affine.caffemodel.h5')
for path, load in (('affine.caffemodel', 'init'), ('affine.caffemodel.h5', 'load_hdf5')):
    net = caffe.Net('net.prototxt', caffe.TEST)
    if load == 'init':
        net = caffe.Net('net.prototxt', path, caffe.TEST)
    else:
        net.load_hdf5(path)
    print(load, [round(float(blob.data[0]), 6) for blob in net.params['pred']] == [round(w, 6), round(b, 6)])
'''


def test_pycaffe_script_through_the_alias(tmp_path):
    from pycaffe_ft.alias import install_alias
    install_alias(str(tmp_path / 'site'))
    (tmp_path / 'affine.py').write_text(textwrap.dedent(LAYER))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / 'site'), str(tmp_path)]), GLOG_minloglevel='2')
    out = subprocess.run([sys.executable, '-c', SCRIPT], cwd=str(tmp_path), env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    assert 'runtime True False 1 0' in lines
    assert 'crop offset [2]' in lines and 'misaligned crop: AssertionError' in lines
    w, b = (float(v) for v in next(l for l in lines if l.startswith('learned')).split()[1:])
    assert abs(w - 3) < 0.05 and abs(b + 1) < 0.05
    assert 'init True' in lines and 'load_hdf5 True' in lines
