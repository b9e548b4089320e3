"""caffe.draw as pycaffe draws a net: labels, colours, in-place neuron layers, edge labels,
phase filtering, display_lrm; the DOT text written without pydot (.dot, .raw)."""
import re

import pytest

import pycaffe_ft as caffe
from pycaffe_ft import draw
from pycaffe_ft.proto import caffe_pb2
from google.protobuf import text_format

NET = '''name: "lenetish"
layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TRAIN }
        data_param { source: "x" batch_size: 64 } }
layer { name: "input" type: "Input" top: "data" top: "label" include { phase: TEST }
        input_param { shape { dim: 100 dim: 1 dim: 28 dim: 28 } shape { dim: 100 } } }
layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1" param { lr_mult: 1 } param { lr_mult: 2 }
        convolution_param { num_output: 20 kernel_size: 5 stride: 2 } }
layer { name: "pool1" type: "Pooling" bottom: "conv1" top: "pool1" pooling_param { pool: AVE kernel_size: 3 stride: 2 pad: 1 } }
layer { name: "ip1" type: "InnerProduct" bottom: "pool1" top: "ip1" inner_product_param { num_output: 10 bias_term: false } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }
'''


def _net():
    return text_format.Parse(NET, caffe_pb2.NetParameter())


def _node(dot, name):
    """The attributes of the node whose label starts with ``name``."""
    match = re.search(r'layer_\d+ \[label="%s[^"]*", (.*)\];' % re.escape(name), dot)
    assert match, name
    return match.group(0)


def test_nodes_are_labelled_and_coloured_as_pycaffe_draws_them():
    dot = draw.get_dot(_net(), 'TB')
    assert 'label="conv1 (Convolution) kernel size: 5 stride: 2 pad: 0"' in _node(dot, 'conv1')
    assert 'fillcolor="#FF5050"' in _node(dot, 'conv1')
    assert 'label="pool1 (AVE Pooling) kernel size: 3 stride: 2 pad: 1"' in _node(dot, 'pool1')
    assert 'fillcolor="#FF9900"' in _node(dot, 'pool1') and 'fillcolor="#CC33FF"' in _node(dot, 'ip1')
    assert 'fillcolor="#90EE90"' in _node(dot, 'relu1')  # in place: a neuron layer
    assert 'fillcolor="#6495ED"' in _node(dot, 'loss')
    assert '"blob_data" [label="data", shape="octagon", fillcolor="#E0E0E0", style="filled"];' in dot
    horizontal = draw.get_dot(_net(), 'LR')
    assert 'label="conv1\\n(Convolution)\\nkernel size: 5\\nstride: 2\\npad: 0"' in horizontal
    assert draw.get_pooling_types_dict() == {0: 'MAX', 1: 'AVE', 2: 'STOCHASTIC'}


def test_edges_to_tops_carry_the_batch_or_the_output_count():
    dot = draw.get_dot(_net(), 'LR')
    conv = re.search(r'(layer_\d+) \[label="conv1', dot).group(1)
    assert '%s -> "blob_conv1" [label="20"];' % conv in dot
    assert re.search(r'layer_0 -> "blob_data" \[label="Batch 64"\];', dot)
    assert re.search(r'layer_\d+ -> "blob_loss" \[label=""\];', dot)
    assert '[label="20"]' not in draw.get_dot(_net(), 'LR', label_edges=False)


def test_phase_filtering_and_both_rules_refused():
    train, test = draw.get_dot(_net(), 'LR', phase=caffe.TRAIN), draw.get_dot(_net(), 'LR', phase=caffe.TEST)
    assert 'mnist' in train and 'input\\n(Input)' not in train
    assert 'input\\n(Input)' in test and 'mnist' not in test
    net = _net()
    net.layer[2].exclude.add(phase=caffe.TEST)
    net.layer[2].include.add(phase=caffe.TRAIN)
    for error in (ValueError, caffe.CaffeError):
        with pytest.raises(error, match='conv1 has both include and exclude'):
            draw.get_dot(net, 'LR', phase=caffe.TRAIN)


def test_display_lrm_shows_the_learned_layers_lr_mult():
    dot = draw.get_dot(_net(), 'TB', display_lrm=True)
    assert 'pad: 0 lr mult: 1, 2"' in _node(dot, 'conv1')
    assert '(InnerProduct) lr mult: 1"' in _node(dot, 'ip1')  # no bias: one multiplier
    assert 'lr mult' not in _node(dot, 'pool1') and 'lr mult' not in draw.get_dot(_net(), 'TB')


@pytest.mark.parametrize('ext', ['dot', 'raw'])
def test_dot_and_raw_files_need_nothing_installed(tmp_path, ext):
    path = tmp_path / ('net.' + ext)
    draw.draw_net_to_file(_net(), str(path), 'BT', caffe.TRAIN, display_lrm=True)
    assert path.read_text() == draw.get_dot(_net(), 'BT', phase=caffe.TRAIN, display_lrm=True)
    assert path.read_text().startswith('digraph "lenetish" {\n  rankdir=BT;')
