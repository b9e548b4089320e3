"""Gradient checks of BatchNorm, Scale, Bias, MVN."""
import numpy as np
import pytest

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
               {'param': 'type: "MVN" mvn_param { normalize_variance: false }', 'bottoms': [(2, 3, 2, 2)]},
               {'param': 'type: "MVN" mvn_param { across_channels: true }', 'bottoms': [(3, 4)], 'threshold': 5e-3},
               {'param': 'type: "MVN" mvn_param { across_channels: true }', 'bottoms': [(2, 3, 4)], 'threshold': 5e-3},
               {'param': 'type: "MVN"', 'bottoms': [(2, 3, 4)], 'threshold': 5e-3}]


@pytest.mark.parametrize('shape', [(4, 3), (4, 3, 5), (2, 3, 4, 5), (6,)])
@pytest.mark.parametrize('variance', [True, False])
@pytest.mark.parametrize('across', [True, False])
def test_mvn_reads_any_bottom_through_caffes_legacy_axes(shape, variance, across):
    """Caffe's MVN sees (num, channels, height, width), 1 for a missing axis: its top is that
    4-D shape, normalised per (num, channel) row over height*width, or per num row."""
    net = caffe.Net('layer { name: "i" type: "Input" top: "x" input_param { shape { %s } } }'
                    'layer { name: "mvn" type: "MVN" bottom: "x" top: "y" mvn_param { normalize_variance: %s '
                    'across_channels: %s } }' % (' '.join('dim: %d' % d for d in shape), str(variance).lower(),
                                                 str(across).lower()), caffe.TRAIN)
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    net.blobs['x'].data[...] = x
    net.forward()
    legacy = tuple(shape) + (1,) * (4 - len(shape))
    assert net.blobs['y'].shape == legacy
    rows = x.astype(np.float64).reshape(legacy[0] if across else legacy[0] * legacy[1], -1)
    want = rows - rows.mean(axis=1, keepdims=True)
    if variance:
        want = want / (np.sqrt((want * want).mean(axis=1, keepdims=True)) + 1e-9)
    np.testing.assert_allclose(net.blobs['y'].data.reshape(rows.shape), want, rtol=1e-4, atol=1e-5)


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
