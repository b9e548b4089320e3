"""Gradient checks of every differentiable layer (one LayerTestCase per type) and the
meta-test that no registered differentiable type lacks one."""
import pycaffe_ft as caffe
from pycaffe_ft.registry import LAYERS
from tests.gradient_checker import LayerTestCase

# Types whose backward is absent in Caffe or that have no bottoms to differentiate.
NOT_DIFFERENTIABLE = {'Input', 'DummyData', 'Accuracy', 'ArgMax', 'Threshold', 'Silence',
                      'Data', 'ImageData', 'HDF5Data', 'HDF5Output', 'MemoryData', 'WindowData',
                      'Python', 'Parameter'}


class TestConvolution(LayerTestCase):
    layer_type = 'Convolution'
    configs = [
        {'param': 'type: "Convolution" convolution_param { num_output: 3 kernel_size: 3 pad: 1 '
                  'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
         'bottoms': [(2, 2, 5, 4)]},
        {'param': 'type: "Convolution" convolution_param { num_output: 4 kernel_h: 2 kernel_w: 3 '
                  'stride_h: 2 stride_w: 1 pad_h: 0 pad_w: 1 group: 2 dilation: 2 '
                  'weight_filler { type: "gaussian" } }',
         'bottoms': [(2, 4, 7, 6)]},
        {'param': 'type: "Convolution" convolution_param { num_output: 2 kernel_size: 1 '
                  'bias_term: false weight_filler { type: "gaussian" } }',
         'bottoms': [(1, 3, 3, 3)]},
        # rows of at least 8 outputs: the direct forward and weight gradient (5 outputs: an
        # overlapping block; 10 wide: a masked last block), the bottom diff by im2col
        {'param': 'type: "Convolution" convolution_param { num_output: 5 kernel_size: 3 pad: 1 '
                  'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
         'bottoms': [(2, 2, 6, 10)]},
        {'param': 'type: "Convolution" convolution_param { num_output: 4 kernel_size: 5 '
                  'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
         'bottoms': [(2, 1, 7, 12)]},
    ]


class TestPooling(LayerTestCase):
    layer_type = 'Pooling'
    configs = [
        {'param': 'type: "Pooling" pooling_param { pool: MAX kernel_size: 3 stride: 2 pad: 1 }',
         'bottoms': [((2, 2, 5, 6), 'distinct')]},
        {'param': 'type: "Pooling" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 }',
         'bottoms': [(2, 2, 5, 6)]},
        {'param': 'type: "Pooling" pooling_param { pool: AVE global_pooling: true }',
         'bottoms': [(2, 3, 4, 3)]},
        {'param': 'type: "Pooling" pooling_param { pool: MAX kernel_h: 2 kernel_w: 3 stride: 1 '
                  'round_mode: FLOOR }', 'bottoms': [((1, 2, 4, 5), 'distinct')]},
    ]


class TestInnerProduct(LayerTestCase):
    layer_type = 'InnerProduct'
    configs = [
        {'param': 'type: "InnerProduct" inner_product_param { num_output: 4 '
                  'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
         'bottoms': [(3, 2, 2, 2)]},
        {'param': 'type: "InnerProduct" inner_product_param { num_output: 3 transpose: true axis: 2 '
                  'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
         'bottoms': [(2, 3, 4)]},
        {'param': 'type: "InnerProduct" inner_product_param { num_output: 7 '  # 16 items: weights x 16 in registers
                  'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
         'bottoms': [(16, 5, 2, 2)]},
    ]


class TestReLU(LayerTestCase):
    layer_type = 'ReLU'
    configs = [
        {'param': 'type: "ReLU"', 'bottoms': [((2, 3, 4), 'away:0.05')]},
        {'param': 'type: "ReLU" relu_param { negative_slope: 0.1 }',
         'bottoms': [((2, 3, 4), 'away:0.05')]},
    ]


class TestSoftmax(LayerTestCase):
    layer_type = 'Softmax'
    configs = [
        {'param': 'type: "Softmax"', 'bottoms': [(2, 5, 2, 3)]},
        {'param': 'type: "Softmax" softmax_param { axis: -1 }', 'bottoms': [(3, 4)]},
    ]


class TestSoftmaxWithLoss(LayerTestCase):
    layer_type = 'SoftmaxWithLoss'
    configs = [
        {'param': 'type: "SoftmaxWithLoss"', 'bottoms': [(4, 5), ((4,), 'labels:5')],
         'check_bottom': [0]},
        {'param': 'type: "SoftmaxWithLoss" loss_weight: 2 loss_param { ignore_label: 1 '
                  'normalization: FULL }', 'bottoms': [(2, 3, 2, 2), ((2, 2, 2), 'labels:3')],
         'check_bottom': [0]},
        {'param': 'type: "SoftmaxWithLoss" loss_param { normalize: false }',
         'bottoms': [(2, 3, 2), ((2, 2), 'labels:3')], 'check_bottom': [0]},
    ]


class TestSplit(LayerTestCase):
    layer_type = 'Split'
    configs = [{'param': 'type: "Split" top: "a" top: "b" top: "c"', 'bottoms': [(2, 3)]}]


def _all_test_cases():
    import importlib
    import pkgutil
    import tests.layers as pkg
    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module('tests.layers.' + info.name)

    def walk(cls):
        for sub in cls.__subclasses__():
            yield sub
            yield from walk(sub)
    return {c.layer_type for c in walk(LayerTestCase)}


def test_every_differentiable_layer_has_a_layer_test_case():
    covered = _all_test_cases()
    missing = [t for t in caffe.layer_type_list() if t not in NOT_DIFFERENTIABLE and t not in covered]
    assert not missing, 'registered differentiable layer types without a LayerTestCase: %s' % missing


def test_registry_lists_v1_names_of_layers():
    assert LAYERS.v1_names['Convolution'] == 'CONVOLUTION'
