"""Gradient checks of LSTM, RNN (also with static input and exposed hidden state) and LSTMUnit."""
from tests.gradient_checker import LayerTestCase

CONT = ((3, 2), 'labels:2')


class TestLSTM(LayerTestCase):
    layer_type = 'LSTM'
    configs = [{'param': 'type: "LSTM" recurrent_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } '
                         'bias_filler { type: "gaussian" } }', 'bottoms': [(3, 2, 2), CONT], 'check_bottom': [0]},
               {'param': 'type: "LSTM" top: "h" top: "hT" top: "cT" recurrent_param { num_output: 2 expose_hidden: true '
                         'weight_filler { type: "gaussian" std: 0.3 } }',
                'bottoms': [(3, 2, 2), CONT, (2, 3), (1, 2, 2), (1, 2, 2)], 'check_bottom': [0, 2, 3, 4]}]


class TestRNN(LayerTestCase):
    layer_type = 'RNN'
    configs = [{'param': 'type: "RNN" recurrent_param { num_output: 3 weight_filler { type: "gaussian" std: 0.3 } '
                         'bias_filler { type: "gaussian" } }', 'bottoms': [(3, 2, 2), CONT], 'check_bottom': [0]},
               {'param': 'type: "RNN" top: "o" top: "hT" recurrent_param { num_output: 2 expose_hidden: true '
                         'weight_filler { type: "gaussian" std: 0.3 } }',
                'bottoms': [(3, 2, 2), CONT, (2, 3), (1, 2, 2)], 'check_bottom': [0, 2, 3]}]


class TestLSTMUnit(LayerTestCase):
    layer_type = 'LSTMUnit'
    configs = [{'param': 'type: "LSTMUnit" top: "c" top: "h"', 'bottoms': [(1, 2, 3), (1, 2, 12), ((1, 2), 'labels:2')],
                'check_bottom': [0, 1]}]
