"""Caffe's "Learning LeNet" notebook as a script: define LeNet with NetSpec, write the
prototxts, train it with caffe.SGDSolver and read the test net's blobs.

Usage (from the repository root): python examples/learning_lenet.py [ITERATIONS] [WORKDIR]
The MNIST LMDBs are built from data/mnist/ if missing.
"""
import os
import sys

import numpy as np

import pycaffe_ft as caffe
from pycaffe_ft import layers as L, params as P


def lenet(lmdb, batch_size):
    n = caffe.NetSpec()
    n.data, n.label = L.Data(batch_size=batch_size, backend=P.Data.LMDB, source=lmdb,
                             transform_param=dict(scale=1. / 255), ntop=2)
    n.conv1 = L.Convolution(n.data, kernel_size=5, num_output=20, weight_filler=dict(type='xavier'))
    n.pool1 = L.Pooling(n.conv1, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.conv2 = L.Convolution(n.pool1, kernel_size=5, num_output=50, weight_filler=dict(type='xavier'))
    n.pool2 = L.Pooling(n.conv2, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.fc1 = L.InnerProduct(n.pool2, num_output=500, weight_filler=dict(type='xavier'))
    n.relu1 = L.ReLU(n.fc1, in_place=True)
    n.score = L.InnerProduct(n.relu1, num_output=10, weight_filler=dict(type='xavier'))
    n.loss = L.SoftmaxWithLoss(n.score, n.label)
    return n.to_proto()


SOLVER = '''train_net: "lenet_auto_train.prototxt"
test_net: "lenet_auto_test.prototxt"
test_iter: 100
test_interval: 500
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 100
max_iter: 10000
snapshot: 5000
snapshot_prefix: "lenet"
'''


def main(iterations=200, workdir='examples/work_lenet'):
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    mnist = os.path.join(root, 'data', 'mnist')
    from pycaffe_ft.cli import main as cli
    cli(['prepare-mnist', mnist])
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    with open('lenet_auto_train.prototxt', 'w') as f:
        f.write(str(lenet(os.path.join(mnist, 'mnist_train_lmdb'), 64)))
    with open('lenet_auto_test.prototxt', 'w') as f:
        f.write(str(lenet(os.path.join(mnist, 'mnist_test_lmdb'), 100)))
    with open('lenet_auto_solver.prototxt', 'w') as f:
        f.write(SOLVER)
    caffe.set_mode_cpu()
    solver = caffe.SGDSolver('lenet_auto_solver.prototxt')
    print([(k, v.data.shape) for k, v in solver.net.blobs.items()])
    print([(k, v[0].data.shape) for k, v in solver.net.params.items()])
    solver.net.forward()
    solver.test_nets[0].forward()
    train_loss = np.zeros(iterations)
    for it in range(iterations):
        solver.step(1)
        train_loss[it] = solver.net.blobs['loss'].data.item()
    correct = 0
    for _ in range(100):
        solver.test_nets[0].forward()
        correct += int(np.sum(solver.test_nets[0].blobs['score'].data.argmax(1) ==
                              solver.test_nets[0].blobs['label'].data))
    accuracy = correct / 1e4
    print('first loss %.4f, last loss %.4f, test accuracy %.4f' % (train_loss[0], train_loss[-1], accuracy))
    return train_loss, accuracy


if __name__ == '__main__':
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 200, sys.argv[2] if len(sys.argv) > 2 else 'examples/work_lenet')
