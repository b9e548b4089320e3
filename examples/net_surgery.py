"""Net surgery: cast LeNet's fully connected layers into convolutions (as Caffe's
"Editing model parameters" notebook does for CaffeNet), copy the weights, and check that the
fully convolutional net computes the same scores - and scores every window of a larger input.

Usage: python examples/net_surgery.py [WORKDIR]
"""
import os
import sys

import numpy as np

import pycaffe_ft as caffe

DEPLOY = '''name: "LeNet"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 1 dim: 28 dim: 28 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" convolution_param { num_output: 20 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
layer { name: "conv2" type: "Convolution" bottom: "pool1" top: "conv2" convolution_param { num_output: 50 kernel_size: 5 weight_filler { type: "xavier" } } }
layer { name: "pool2" type: "Pooling" bottom: "conv2" top: "pool2" pooling_param { pool: MAX kernel_size: 2 stride: 2 } }
%s
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
%s
layer { name: "prob" type: "Softmax" bottom: "ip2" top: "prob" }
'''
FC = ('layer { name: "ip1" type: "InnerProduct" bottom: "pool2" top: "ip1" inner_product_param { num_output: 500 weight_filler { type: "xavier" } } }',
      'layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 10 weight_filler { type: "xavier" } } }')
CONV = ('layer { name: "ip1-conv" type: "Convolution" bottom: "pool2" top: "ip1" convolution_param { num_output: 500 kernel_size: 4 } }',
        'layer { name: "ip2-conv" type: "Convolution" bottom: "ip1" top: "ip2" convolution_param { num_output: 10 kernel_size: 1 } }')


def main(workdir='examples/work_surgery'):
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    with open('lenet_deploy.prototxt', 'w') as f:
        f.write(DEPLOY % FC)
    with open('lenet_full_conv.prototxt', 'w') as f:
        f.write(DEPLOY % CONV)
    caffe.set_random_seed(0)
    net = caffe.Net('lenet_deploy.prototxt', caffe.TEST)
    net.save('lenet.caffemodel')
    params = ['ip1', 'ip2']
    fc_params = {pr: (net.params[pr][0].data, net.params[pr][1].data) for pr in params}
    for fc in params:
        print('{} weights are {} dimensional and biases are {} dimensional'.format(
            fc, fc_params[fc][0].shape, fc_params[fc][1].shape))
    net_full_conv = caffe.Net('lenet_full_conv.prototxt', 'lenet.caffemodel', caffe.TEST)
    params_full_conv = ['ip1-conv', 'ip2-conv']
    conv_params = {pr: (net_full_conv.params[pr][0].data, net_full_conv.params[pr][1].data) for pr in params_full_conv}
    for pr, pr_conv in zip(params, params_full_conv):
        conv_params[pr_conv][0].flat = fc_params[pr][0].flat  # flat unrolls the arrays
        conv_params[pr_conv][1][...] = fc_params[pr][1]
    net_full_conv.save('lenet_full_conv.caffemodel')
    x = np.random.default_rng(1).random((2, 1, 28, 28)).astype(np.float32)
    fc_scores = net.forward(data=x)['prob'].copy()
    conv_scores = net_full_conv.forward(data=x)['prob'].reshape(2, 10)
    assert np.allclose(fc_scores, conv_scores, atol=1e-6), 'surgery changed the scores'
    net_full_conv.blobs['data'].reshape(1, 1, 40, 40)
    net_full_conv.reshape()
    out = net_full_conv.forward(data=np.random.default_rng(2).random((1, 1, 40, 40)).astype(np.float32))
    print('fully convolutional scores on a 40x40 input:', out['prob'].shape)
    return fc_scores, conv_scores, out['prob'].shape


if __name__ == '__main__':
    main(*sys.argv[1:2])
