"""Gradient checks of LSTM, RNN (also with static input and exposed hidden state) and LSTMUnit.

With expose_hidden, Caffe propagates no diff from the h_T/c_T tops and gives none to the
h_0/c_0 bottoms (its unrolled net shares only their data): the checks give those tops nonzero
diffs that must have no effect, and check x and x_static only."""
import numpy as np

import pycaffe_ft as caffe
from tests.gradient_checker import LayerTestCase

CONT = ((3, 2), 'labels:2')


class TestLSTM(LayerTestCase):
    layer_type = 'LSTM'
    configs = [{'param': 'type: "LSTM" recurrent_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } '
                         'bias_filler { type: "gaussian" } }', 'bottoms': [(3, 2, 2), CONT], 'check_bottom': [0]},
               {'param': 'type: "LSTM" top: "h" top: "hT" top: "cT" recurrent_param { num_output: 2 expose_hidden: true '
                         'weight_filler { type: "gaussian" std: 0.3 } }',
                'bottoms': [(3, 2, 2), CONT, (2, 3), (1, 2, 2), (1, 2, 2)], 'check_bottom': [0, 2], 'check_tops': [0]}]


class TestRNN(LayerTestCase):
    layer_type = 'RNN'
    configs = [{'param': 'type: "RNN" recurrent_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } '
                         'bias_filler { type: "gaussian" } }', 'bottoms': [(3, 2, 2), CONT], 'check_bottom': [0]},
               {'param': 'type: "RNN" top: "o" top: "hT" recurrent_param { num_output: 2 expose_hidden: true '
                         'weight_filler { type: "gaussian" std: 0.3 } }',
                'bottoms': [(3, 2, 2), CONT, (2, 3), (1, 2, 2)], 'check_bottom': [0, 2], 'check_tops': [0]}]


class TestLSTMUnit(LayerTestCase):
    layer_type = 'LSTMUnit'
    configs = [{'param': 'type: "LSTMUnit" top: "c" top: "h"', 'bottoms': [(1, 2, 3), (1, 2, 12), ((1, 2), 'labels:2')],
                'check_bottom': [0, 1]}]


def test_exposed_initial_states_receive_no_diff(tmp_path):
    """As in Caffe, backward leaves the h_0/c_0 bottoms' diffs as they were."""
    net_text = """force_backward: true
    layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 3 dim: 2 dim: 2 } } }
    layer { name: "cont" type: "Input" top: "cont" input_param { shape { dim: 3 dim: 2 } } }
    layer { name: "h0" type: "Input" top: "h0" input_param { shape { dim: 1 dim: 2 dim: 3 } } }
    layer { name: "c0" type: "Input" top: "c0" input_param { shape { dim: 1 dim: 2 dim: 3 } } }
    layer { name: "lstm" type: "LSTM" bottom: "x" bottom: "cont" bottom: "h0" bottom: "c0"
            top: "h" top: "hT" top: "cT" recurrent_param { num_output: 3 expose_hidden: true
            weight_filler { type: "gaussian" std: 0.3 } } }"""
    path = tmp_path / 'net.prototxt'
    path.write_text(net_text)
    net = caffe.Net(str(path), caffe.TRAIN)
    rng = np.random.default_rng(0)
    for name in ('x', 'h0', 'c0'):
        net.blobs[name].data[...] = rng.standard_normal(net.blobs[name].shape)
    net.blobs['cont'].data[...] = [[0, 0], [1, 1], [1, 0]]
    net.forward()
    for name in ('h', 'hT', 'cT'):
        net.blobs[name].diff[...] = rng.standard_normal(net.blobs[name].shape)
    net.blobs['h0'].diff[...] = 7.0
    net.blobs['c0'].diff[...] = -7.0
    net.backward()
    assert (net.blobs['h0'].diff == 7.0).all() and (net.blobs['c0'].diff == -7.0).all()
    assert np.abs(net.blobs['x'].diff).max() > 0
