"""Gradient checks of the loss layers."""
from tests.gradient_checker import LayerTestCase


class TestEuclideanLoss(LayerTestCase):
    layer_type = 'EuclideanLoss'
    configs = [{'param': 'type: "EuclideanLoss" loss_weight: 1.5', 'bottoms': [(3, 4), (3, 4)]}]


class TestSigmoidCrossEntropyLoss(LayerTestCase):
    layer_type = 'SigmoidCrossEntropyLoss'
    configs = [{'param': 'type: "SigmoidCrossEntropyLoss"', 'bottoms': [(3, 4), ((3, 4), 'uniform:0:1')],
                'check_bottom': [0]},
               {'param': 'type: "SigmoidCrossEntropyLoss" loss_param { ignore_label: 1 normalization: VALID }',
                'bottoms': [(3, 4), ((3, 4), 'labels:3')], 'check_bottom': [0]}]


class TestHingeLoss(LayerTestCase):
    layer_type = 'HingeLoss'
    configs = [{'param': 'type: "HingeLoss"', 'bottoms': [((4, 5), 'uniform:-0.5:0.5'), ((4,), 'labels:5')],
                'check_bottom': [0]},
               {'param': 'type: "HingeLoss" hinge_loss_param { norm: L2 }',
                'bottoms': [((4, 5), 'uniform:-0.5:0.5'), ((4,), 'labels:5')], 'check_bottom': [0]}]


class TestInfogainLoss(LayerTestCase):
    layer_type = 'InfogainLoss'
    configs = [{'param': 'type: "InfogainLoss"', 'bottoms': [(4, 3), ((4,), 'labels:3'), ((1, 1, 3, 3), 'positive')],
                'check_bottom': [0]}]


class TestMultinomialLogisticLoss(LayerTestCase):
    layer_type = 'MultinomialLogisticLoss'
    configs = [{'param': 'type: "MultinomialLogisticLoss"', 'bottoms': [((4, 3), 'uniform:0.2:1'), ((4,), 'labels:3')],
                'check_bottom': [0], 'stepsize': 1e-3}]


class TestContrastiveLoss(LayerTestCase):
    layer_type = 'ContrastiveLoss'
    configs = [{'param': 'type: "ContrastiveLoss" contrastive_loss_param { margin: 3 }',
                'bottoms': [(5, 3), (5, 3), ((5,), 'labels:2')], 'check_bottom': [0, 1]},
               {'param': 'type: "ContrastiveLoss" contrastive_loss_param { margin: 10 legacy_version: true }',
                'bottoms': [(5, 3), (5, 3), ((5,), 'labels:2')], 'check_bottom': [0, 1]}]
