"""Every kernel a training step compiles is saved in the kernel cache: a second process with the
same cache compiles nothing (a kernel Numba cannot cache, e.g. one handing a jitted function to
a body it does not inline, would be compiled again by every run)."""
import json
import os
import subprocess
import sys

NET = '''
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 16 dim: 1 dim: 28 dim: 28 } } }
layer { name: "label" type: "Input" top: "label" input_param { shape { dim: 16 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
  convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "bn1" type: "BatchNorm" bottom: "conv1" top: "conv1" }
layer { name: "scale1" type: "Scale" bottom: "conv1" top: "conv1" scale_param { bias_term: true } }
layer { name: "relu0" type: "ReLU" bottom: "conv1" top: "conv1" }
layer { name: "sum1" type: "Eltwise" bottom: "conv1" bottom: "conv1" top: "sum1" }
layer { name: "pool1" type: "Pooling" bottom: "sum1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2"
  convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1"
  inner_product_param { num_output: 100 weight_filler { type: "xavier" } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
  inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
'''

STEP = '''
import gc, json, sys
import numpy as np
import pycaffe_ft as caffe
from numba.core.dispatcher import Dispatcher
net = caffe.Net(sys.argv[1], caffe.TRAIN)
rng = np.random.default_rng(0)
net.blobs['data'].data[...] = rng.random(net.blobs['data'].shape)
net.blobs['label'].data[...] = rng.integers(0, 10, net.blobs['label'].shape)
net.forward()
net.backward()
compiled = sorted({d.py_func.__qualname__ for d in gc.get_objects()
                   if isinstance(d, Dispatcher) and sum(d.stats.cache_misses.values())})
print(json.dumps(compiled))
'''


def _compiled_by_a_step(net_path, cache):
    env = dict(os.environ, NUMBA_CACHE_DIR=cache)
    out = subprocess.run([sys.executable, '-c', STEP, net_path], env=env, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_second_training_step_process_compiles_nothing(tmp_path):
    net_path = tmp_path / 'lenet.prototxt'
    net_path.write_text(NET)
    cache = str(tmp_path / 'kernel_cache')
    first = _compiled_by_a_step(str(net_path), cache)
    assert first, 'the first process should compile the kernels (the cache was empty)'
    assert _compiled_by_a_step(str(net_path), cache) == []
