"""Gradient checks and behaviour of the neuron layers."""
import numpy as np

import pycaffe_ft as caffe
from tests.gradient_checker import LayerTestCase, make_layer


def neuron_case(layer_type, params='', kind='gaussian', **extra):
    return {'param': 'type: "%s" %s' % (layer_type, params), 'bottoms': [((2, 3, 2, 3), kind)], **extra}


class TestSigmoid(LayerTestCase):
    layer_type = 'Sigmoid'
    configs = [neuron_case('Sigmoid')]


class TestTanH(LayerTestCase):
    layer_type = 'TanH'
    configs = [neuron_case('TanH')]


class TestAbsVal(LayerTestCase):
    layer_type = 'AbsVal'
    configs = [neuron_case('AbsVal', kind='away:0.05')]


class TestBNLL(LayerTestCase):
    layer_type = 'BNLL'
    configs = [neuron_case('BNLL')]


class TestELU(LayerTestCase):
    layer_type = 'ELU'
    configs = [neuron_case('ELU', kind='away:0.05'), neuron_case('ELU', 'elu_param { alpha: 0.5 }', 'away:0.05')]


class TestClip(LayerTestCase):
    layer_type = 'Clip'
    configs = [neuron_case('Clip', 'clip_param { min: -0.5 max: 0.75 }', 'uniform:-0.45:0.7'),
               neuron_case('Clip', 'clip_param { min: -3 max: 3 }', 'uniform:-2:2')]


class TestExp(LayerTestCase):
    layer_type = 'Exp'
    configs = [neuron_case('Exp'), neuron_case('Exp', 'exp_param { base: 2 scale: 0.5 shift: 0.3 }')]


class TestLog(LayerTestCase):
    layer_type = 'Log'
    configs = [neuron_case('Log', kind='positive'),
               neuron_case('Log', 'log_param { base: 2 scale: 0.5 shift: 0.1 }', 'positive')]


class TestPower(LayerTestCase):
    layer_type = 'Power'
    configs = [neuron_case('Power', 'power_param { power: 2 scale: 0.5 shift: 1 }'),
               neuron_case('Power', 'power_param { power: 0.37 scale: 0.83 }', 'positive'),
               neuron_case('Power', 'power_param { power: 1 scale: -2 shift: 0.5 }'),
               neuron_case('Power', 'power_param { power: 3 scale: 0.5 shift: 0.2 }', 'positive'),
               neuron_case('Power', 'power_param { power: 0 scale: 3 shift: 1 }')]


class TestSwish(LayerTestCase):
    layer_type = 'Swish'
    configs = [neuron_case('Swish'), neuron_case('Swish', 'swish_param { beta: 0.5 }')]


class TestPReLU(LayerTestCase):
    layer_type = 'PReLU'
    configs = [neuron_case('PReLU', kind='away:0.05'),
               neuron_case('PReLU', 'prelu_param { channel_shared: true }', 'away:0.05')]


class TestDropout(LayerTestCase):
    layer_type = 'Dropout'
    configs = [neuron_case('Dropout', 'dropout_param { dropout_ratio: 0.3 }', fixed_rng=True),
               neuron_case('Dropout', phase=caffe.TEST)]


def test_in_place_neurons_see_their_input_in_backward():
    for layer_type, kind in (('AbsVal', 'away:0.1'), ('PReLU', 'away:0.1'), ('ELU', 'away:0.1')):
        layer, bottom, top = make_layer('type: "%s"' % layer_type, 1)
        x = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
        x += np.sign(x) * 0.1
        bottom[0].reshape(x.shape)
        bottom[0].data[...] = x
        layer.setup(bottom, top)
        layer.run_forward(bottom, top)
        top[0].diff[...] = 1
        layer.backward(top, [True], bottom)
        expected = bottom[0].diff.copy()
        inplace = [bottom[0]]
        bottom[0].data[...] = x
        layer.run_forward(bottom, inplace)
        bottom[0].diff[...] = 1
        layer.backward(inplace, [True], bottom)
        np.testing.assert_allclose(bottom[0].diff, expected, err_msg=layer_type)


def test_dropout_mask_fraction_and_scale():
    layer, bottom, top = make_layer('type: "Dropout" dropout_param { dropout_ratio: 0.25 }', 1)
    bottom[0].reshape(100, 100)
    bottom[0].data[...] = 1
    layer.setup(bottom, top)
    layer.run_forward(bottom, top)
    y = top[0].data
    assert set(np.unique(y)) <= {0, np.float32(1 / 0.75)}
    assert abs((y != 0).mean() - 0.75) < 0.02
