"""Gradient checks and behaviour of the routing / shape / arithmetic layers."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import LayerSetupError
from tests.gradient_checker import LayerTestCase


class TestConcat(LayerTestCase):
    layer_type = 'Concat'
    configs = [{'param': 'type: "Concat"', 'bottoms': [(2, 3, 2), (2, 1, 2), (2, 2, 2)]},
               {'param': 'type: "Concat" concat_param { axis: 0 }', 'bottoms': [(1, 3), (2, 3)]}]


class TestSlice(LayerTestCase):
    layer_type = 'Slice'
    configs = [{'param': 'type: "Slice" top: "a" top: "b" top: "c" slice_param { axis: 1 slice_point: 1 slice_point: 3 }',
                'bottoms': [(2, 5, 2)]},
               {'param': 'type: "Slice" top: "a" top: "b" slice_param { axis: 0 }', 'bottoms': [(4, 3)]}]


class TestFlatten(LayerTestCase):
    layer_type = 'Flatten'
    configs = [{'param': 'type: "Flatten"', 'bottoms': [(2, 3, 2, 2)]}]


class TestReshape(LayerTestCase):
    layer_type = 'Reshape'
    configs = [{'param': 'type: "Reshape" reshape_param { shape { dim: 0 dim: -1 } }', 'bottoms': [(2, 3, 2)]}]


class TestTile(LayerTestCase):
    layer_type = 'Tile'
    configs = [{'param': 'type: "Tile" tile_param { axis: 1 tiles: 3 }', 'bottoms': [(2, 2, 3)]}]


class TestCrop(LayerTestCase):
    layer_type = 'Crop'
    configs = [{'param': 'type: "Crop" crop_param { axis: 2 offset: 1 offset: 2 }',
                'bottoms': [(2, 2, 5, 5), (2, 2, 3, 2)], 'check_bottom': [0]}]


class TestEltwise(LayerTestCase):
    layer_type = 'Eltwise'
    configs = [{'param': 'type: "Eltwise" eltwise_param { operation: PROD }', 'bottoms': [(2, 3), (2, 3), (2, 3)]},
               {'param': 'type: "Eltwise" eltwise_param { operation: PROD stable_prod_grad: false }',
                'bottoms': [((2, 3), 'positive'), ((2, 3), 'positive')]},
               {'param': 'type: "Eltwise" eltwise_param { operation: SUM coeff: 1 coeff: -0.5 }', 'bottoms': [(2, 3), (2, 3)]},
               {'param': 'type: "Eltwise" eltwise_param { operation: MAX }',
                'bottoms': [((2, 3), 'distinct'), ((2, 3), 'distinct:0.017'), ((2, 3), 'distinct:0.034')],
                'stepsize': 1e-3}]


class TestReduction(LayerTestCase):
    layer_type = 'Reduction'
    configs = [{'param': 'type: "Reduction" reduction_param { operation: %s axis: 1 coeff: 0.7 }' % op,
                'bottoms': [((2, 3, 2), 'away:0.05')]} for op in ('SUM', 'ASUM', 'SUMSQ', 'MEAN')]


class TestFilter(LayerTestCase):
    layer_type = 'Filter'
    configs = [{'param': 'type: "Filter"', 'bottoms': [(4, 3), ((4,), 'labels:2')], 'check_bottom': [0]}]


class TestBatchReindex(LayerTestCase):
    layer_type = 'BatchReindex'
    configs = [{'param': 'type: "BatchReindex"', 'bottoms': [(4, 2), ((6,), 'labels:4')], 'check_bottom': [0]}]


class TestEmbed(LayerTestCase):
    layer_type = 'Embed'
    configs = [{'param': 'type: "Embed" embed_param { input_dim: 5 num_output: 3 '
                         'weight_filler { type: "gaussian" } bias_filler { type: "gaussian" } }',
                'bottoms': [((4,), 'labels:5')], 'check_bottom': []}]


def test_argmax_ties_take_the_larger_index():
    net = caffe.Net('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 1 dim: 4 } } }'
                    'layer { name: "a" type: "ArgMax" bottom: "x" top: "y" argmax_param { top_k: 2 axis: 1 } }', caffe.TEST)
    net.blobs['x'].data[...] = [[1, 3, 3, 2]]
    net.forward()
    assert net.blobs['y'].data.tolist() == [[2, 1]]


def test_eltwise_max_ties_go_to_the_first_bottom():
    net = caffe.Net('force_backward: true layer { name: "i" type: "Input" top: "a" top: "b" input_param { shape { dim: 3 } } }'
                    'layer { name: "m" type: "Eltwise" bottom: "a" bottom: "b" top: "y" eltwise_param { operation: MAX } }'
                    'layer { name: "l" type: "Reduction" bottom: "y" top: "l" loss_weight: 1 }', caffe.TRAIN)
    net.blobs['a'].data[...] = [1, 2, 3]
    net.blobs['b'].data[...] = [1, 5, 0]
    net.forward()
    net.backward()
    assert net.blobs['a'].diff.tolist() == [0, 0, 1] and net.blobs['b'].diff.tolist() == [1, 1, 0]


def test_reshape_errors_are_clear():
    with pytest.raises(LayerSetupError, match='infer'):
        caffe.Net('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 } } }'
                  'layer { name: "r" type: "Reshape" bottom: "x" top: "y" reshape_param { shape { dim: 4 dim: -1 } } }',
                  caffe.TEST)


def test_filter_changes_the_batch_size():
    net = caffe.Net('layer { name: "i" type: "Input" top: "x" top: "s" input_param { shape { dim: 4 dim: 2 } shape { dim: 4 } } }'
                    'layer { name: "f" type: "Filter" bottom: "x" bottom: "s" top: "y" }', caffe.TEST)
    net.blobs['x'].data[...] = np.arange(8).reshape(4, 2)
    net.blobs['s'].data[...] = [0, 0.5, 0, -1]
    net.forward()
    assert net.blobs['y'].data.tolist() == [[2, 3], [6, 7]]
