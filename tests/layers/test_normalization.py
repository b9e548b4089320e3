"""Gradient checks of BatchNorm, Scale, Bias, MVN."""
import numpy as np

import pycaffe_ft as caffe
from tests.gradient_checker import LayerTestCase


class TestBatchNorm(LayerTestCase):
    layer_type = 'BatchNorm'
    configs = [{'param': 'type: "BatchNorm"', 'bottoms': [(3, 2, 2, 2)], 'check_params': False,
                'threshold': 1e-2},
               {'param': 'type: "BatchNorm" batch_norm_param { use_global_stats: true }',
                'bottoms': [(2, 3)], 'check_params': False}]


class TestScale(LayerTestCase):
    layer_type = 'Scale'
    configs = [{'param': 'type: "Scale" scale_param { bias_term: true filler { type: "gaussian" } '
                         'bias_filler { type: "gaussian" } }', 'bottoms': [(2, 3, 2)]},
               {'param': 'type: "Scale" scale_param { axis: 0 }', 'bottoms': [(2, 3, 2), (2, 3)]}]


class TestBias(LayerTestCase):
    layer_type = 'Bias'
    configs = [{'param': 'type: "Bias" bias_param { filler { type: "gaussian" } }', 'bottoms': [(2, 3, 2)]},
               {'param': 'type: "Bias" bias_param { axis: 1 }', 'bottoms': [(2, 3, 2), (3, 2)]}]


class TestMVN(LayerTestCase):
    layer_type = 'MVN'
    configs = [{'param': 'type: "MVN"', 'bottoms': [(2, 3, 2, 3)], 'threshold': 5e-3},
               {'param': 'type: "MVN" mvn_param { across_channels: true }', 'bottoms': [(2, 3, 2, 2)], 'threshold': 5e-3},
               {'param': 'type: "MVN" mvn_param { normalize_variance: false }', 'bottoms': [(2, 3, 2, 2)]}]


def test_batchnorm_accumulators_follow_caffe():
    net = caffe.Net('layer { name: "i" type: "Input" top: "x" input_param { shape { dim: 4 dim: 2 } } }'
                    'layer { name: "bn" type: "BatchNorm" bottom: "x" top: "y" batch_norm_param { moving_average_fraction: 0.5 } }',
                    caffe.TRAIN)
    x = np.random.default_rng(0).standard_normal((4, 2)).astype(np.float32)
    net.blobs['x'].data[...] = x
    net.forward()
    net.forward()
    b = net.params['bn']
    assert b[2].data[0] == 1.5
    np.testing.assert_allclose(b[0].data, 1.5 * x.mean(0), rtol=1e-5)
    np.testing.assert_allclose(b[1].data, 1.5 * x.var(0, ddof=1), rtol=1e-5)
    assert net.params_lr[:3] == [0, 0, 0]
