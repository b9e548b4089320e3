"""Train a linear regression whose loss is the Python EuclideanLossLayer (pyloss.py), with
caffe.SGDSolver, on data fed through a MemoryData layer.

Usage: python examples/pyloss/train_linreg.py [ITERATIONS]
"""
import os
import sys
import tempfile

import numpy as np

import pycaffe_ft as caffe

NET = '''name: "LinearRegression"
layer { name: "data" type: "MemoryData" top: "data" top: "y"
        memory_data_param { batch_size: 50 channels: 1 height: 1 width: 3 } }
layer { name: "fc" type: "InnerProduct" bottom: "data" top: "fc"
        inner_product_param { num_output: 1 weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "flat" type: "Flatten" bottom: "y" top: "yflat" }
layer { name: "loss" type: "Python" bottom: "fc" bottom: "yflat" top: "loss" loss_weight: 1
        python_param { module: "pyloss" layer: "EuclideanLossLayer" } }
'''
SOLVER = '''net: "%s"
base_lr: 0.1
lr_policy: "fixed"
momentum: 0.9
max_iter: 1000
display: 0
snapshot_after_train: false
random_seed: 5
'''


def main(iterations=300):
    here = os.path.dirname(os.path.abspath(__file__))
    work = tempfile.mkdtemp()
    net_path = os.path.join(here, 'linreg.prototxt')  # next to pyloss.py: the module is found there
    with open(net_path, 'w') as f:
        f.write(NET)
    with open(os.path.join(work, 'solver.prototxt'), 'w') as f:
        f.write(SOLVER % net_path)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((500, 1, 1, 3)).astype(np.float32)
    w_true, b_true = np.array([1.5, -2.0, 0.5], np.float32), 0.3
    y = (x.reshape(500, 3) @ w_true + b_true).astype(np.float32)
    solver = caffe.SGDSolver(os.path.join(work, 'solver.prototxt'))
    solver.net.set_input_arrays(x, y)
    losses = []
    for _ in range(iterations):
        solver.step(1)
        losses.append(solver.net.blobs['loss'].data.item())
    w = solver.net.params['fc'][0].data.ravel()
    b = float(solver.net.params['fc'][1].data[0])
    print('loss %.5f -> %.6f; learned w %s b %.3f (true %s, %.1f)' % (losses[0], losses[-1], w, b, w_true, b_true))
    return losses, w, b


if __name__ == '__main__':
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 300)
