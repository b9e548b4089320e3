"""Net semantics: state filtering, splits, in-place, sharing, loss weights, backward analysis,
pycaffe's API, weights in and out, and clear errors."""
import logging

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import NetError, ShapeError, UnknownLayerTypeError, WeightsError
from pycaffe_ft.net import Net
from pycaffe_ft.proto import caffe_pb2

MLP = '''
name: "mlp"
layer { name: "data" type: "Input" top: "data" top: "label"
        input_param { shape { dim: 4 dim: 3 } shape { dim: 4 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "relu1" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2"
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "acc" type: "Accuracy" bottom: "ip2" bottom: "label" top: "acc" include { phase: TEST } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
'''


def make(text=MLP, phase=caffe.TRAIN, **kw):
    net = Net(text, phase, **kw)
    rng = np.random.default_rng(0)
    if 'data' in net.blobs:
        net.blobs['data'].data[...] = rng.standard_normal(net.blobs['data'].shape)
    if 'label' in net.blobs:
        net.blobs['label'].data[...] = rng.integers(0, 3, net.blobs['label'].shape)
    return net


def test_phase_filtering_and_splits():
    train, test = make(phase=caffe.TRAIN), make(phase=caffe.TEST)
    assert 'acc' not in train.layer_dict and 'acc' in test.layer_dict
    assert 'ip2_ip2_0_split' in test.layer_dict and 'ip2_ip2_0_split' not in train.layer_dict
    assert test.top_names['ip2_ip2_0_split'] == ['ip2_ip2_0_split_0', 'ip2_ip2_0_split_1']
    assert test.bottom_names['loss'] == ['ip2_ip2_0_split_1', 'label_data_1_split_1']


@pytest.mark.parametrize('rule,state,included', [
    ('min_level: 1', dict(level=0), False), ('min_level: 1', dict(level=1), True),
    ('max_level: 1', dict(level=2), False), ('stage: "a" stage: "b"', dict(stages=['a']), False),
    ('stage: "a" stage: "b"', dict(stages=['b', 'a']), True),
    ('not_stage: "a"', dict(stages=['a']), False), ('not_stage: "a"', dict(), True)])
def test_state_rules(rule, state, included):
    text = MLP.replace('include { phase: TEST }', 'include { %s }' % rule)
    assert ('acc' in make(text, caffe.TEST, **state).layer_dict) == included


def test_exclude_rule_and_both_rules_error():
    text = MLP.replace('include { phase: TEST }', 'exclude { phase: TEST }')
    assert 'acc' in make(text, caffe.TRAIN).layer_dict
    bad = MLP.replace('include { phase: TEST }', 'include { phase: TEST } exclude { stage: "x" }')
    with pytest.raises(NetError, match='either include rules or exclude rules'):
        make(bad)


def test_in_place_layer_shares_blob_and_gradient_flows():
    net = make()
    assert 'relu1' in net.layer_dict and list(net.blobs).count('ip1') == 1
    net.forward()
    assert (net.blobs['ip1'].data >= 0).all()
    net.backward()
    assert np.any(net.params['ip1'][0].diff)


def test_loss_weight_scales_loss_and_gradients():
    base = make()
    weighted = make(MLP.replace('top: "loss" }', 'top: "loss" loss_weight: 2.5 }'))
    weighted.copy_trained_layers_from_net(base)
    l1, l2 = base.forward_backward(), weighted.forward_backward()
    assert l2 == pytest.approx(2.5 * l1, rel=1e-6)
    np.testing.assert_allclose(weighted.param_diff, 2.5 * base.param_diff, rtol=1e-5, atol=1e-7)
    assert weighted.blob_loss_weights['loss'] == 2.5 and weighted.blob_loss_weights['ip2'] == 0


def test_loss_weight_on_a_non_loss_top_adds_a_split():
    text = MLP.replace('top: "ip2"\n', 'top: "ip2" loss_weight: 0.5\n', 1)
    net = make(text)
    assert 'ip2_ip2_0_split' in net.layer_dict
    loss = net.forward_from_to()
    expected = float(net.blobs['loss'].data) + 0.5 * float(net.blobs['ip2'].data.sum())
    assert loss == pytest.approx(expected, rel=1e-5)


def test_need_backward_analysis_and_propagate_down():
    net = make()
    names = net._layer_names
    assert net.layer_need_backward[names.index('data')] is False
    assert net.layer_need_backward[names.index('ip1')]
    # the label input never needs backward; the loss layer does not propagate to it
    assert net.bottom_need_backward[names.index('loss')] == [True, False]
    frozen = make(MLP.replace('bottom: "ip1" top: "ip2"', 'bottom: "ip1" top: "ip2" propagate_down: false'))
    i = frozen._layer_names.index('ip2')
    assert frozen.bottom_need_backward[i] == [False]
    frozen.forward_backward()
    assert not np.any(frozen.params['ip1'][0].diff) and np.any(frozen.params['ip2'][0].diff)


def test_lr_mult_zero_stops_backward_unless_forced():
    text = MLP.replace('bottom: "data" top: "ip1"', 'bottom: "data" top: "ip1" param { lr_mult: 0 } param { lr_mult: 0 }')
    net = make(text)
    assert not net.layer_need_backward[net._layer_names.index('ip1')]
    forced = make('force_backward: true\n' + text)
    assert forced.layer_need_backward[forced._layer_names.index('ip1')]
    forced.forward_backward()
    assert np.any(forced.blobs['data'].diff)
    assert forced.params_lr[0] == 0


def test_param_sharing_by_name():
    text = MLP.replace('inner_product_param { num_output: 3',
                       'param { name: "w" } param { name: "b" } inner_product_param { num_output: 5') \
              .replace('bottom: "data" top: "ip1"', 'bottom: "data" top: "ip1" param { name: "w0" }')
    text += '''layer { name: "ip3" type: "InnerProduct" bottom: "ip2" top: "ip3"
        param { name: "w" } param { name: "b" lr_mult: 1 }
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" } } }
    layer { name: "s" type: "Silence" bottom: "ip3" }'''
    text = text.replace('bottom: "ip2" bottom: "label" top: "acc"', 'bottom: "ip1" bottom: "label" top: "acc"')
    net = make(text.replace('bottom: "ip2" bottom: "label" top: "loss"', 'bottom: "ip1" bottom: "label" top: "loss"'))
    w2, w3 = net.params['ip2'][0], net.params['ip3'][0]
    assert np.shares_memory(w2.data, w3.data) and np.shares_memory(w2.diff, w3.diff)
    assert len(net.learnable_params) == 4


def test_sharing_shape_mismatch_and_permissive():
    text = '''
    layer { name: "d" type: "Input" top: "a" top: "b" input_param { shape { dim: 2 dim: 6 } shape { dim: 2 dim: 6 } } }
    layer { name: "x" type: "InnerProduct" bottom: "a" top: "x" param { name: "w" } inner_product_param { num_output: 4 bias_term: false } }
    layer { name: "y" type: "InnerProduct" bottom: "b" top: "y" param { name: "w" %s } inner_product_param { num_output: 6 bias_term: false transpose: true axis: 1 } }
    '''
    with pytest.raises(ShapeError, match='owned by layer "x"'):
        Net(text % '', caffe.TEST)
    # a transposed (6, 4) weight has the count of the owner's (4, 6): allowed when PERMISSIVE
    with pytest.raises(ShapeError):
        Net(text.replace('num_output: 6 bias_term: false transpose: true', 'num_output: 5 bias_term: false transpose: true') % 'share_mode: PERMISSIVE', caffe.TEST)
    net = Net(text.replace('num_output: 6 bias_term', 'num_output: 4 bias_term') % 'share_mode: PERMISSIVE', caffe.TEST)
    assert np.shares_memory(net.params['x'][0].data, net.params['y'][0].data)


def test_flat_parameter_buffer_views():
    net = make()
    assert net.param_data.size == sum(b.count for b in net.learnable_params)
    for b in net.learnable_params:
        assert np.shares_memory(b.data, net.param_data) and np.shares_memory(b.diff, net.param_diff)


def test_pycaffe_forward_backward_api():
    net = make(phase=caffe.TEST)
    assert net.inputs == ['data', 'label'] and net.outputs == ['acc', 'loss']
    out = net.forward()
    assert set(out) == {'acc', 'loss'} and out['loss'].shape == ()
    data = np.ones((4, 3), np.float32)
    out = net.forward(data=data, label=np.zeros(4), blobs=['ip1'])
    assert 'ip1' in out and np.allclose(net.blobs['data'].data, 1)
    with pytest.raises(NetError):
        net.forward(data=data)
    out = net.forward(end='ip1')
    assert set(out) == {'ip1'}
    grads = net.backward(diffs=['ip1'])
    assert set(grads) == {'data', 'label', 'ip1'}
    blob = net.blobs['data']
    assert (blob.num, blob.channels, blob.height, blob.width, blob.count) == (4, 3, 1, 1, 12)
    i = net._layer_names.index('ip1')
    assert net.layers[i].type == 'InnerProduct' and net.layer_dict['ip1'] is net.layers[i]


def test_hooks_see_every_layer_in_order():
    net = make()
    seen = []
    net.before_forward(lambda i: seen.append(('bf', i)))
    net.after_backward(lambda i: seen.append(('ab', i)))
    net.forward()
    net.backward()
    n = len(net.layers)
    assert seen == [('bf', i) for i in range(n)] + [('ab', i) for i in reversed(range(n))]


def test_reshape_propagates():
    net = make()
    net.blobs['data'].reshape(7, 3)
    net.blobs['label'].reshape(7)
    net.reshape()
    assert net.blobs['ip2'].shape == (7, 3)
    net.forward()


def test_save_and_copy_from_round_trip(tmp_path):
    net = make()
    path = str(tmp_path / 'w.caffemodel')
    net.save(path)
    other = Net(MLP, path, caffe.TEST)
    for name in ('ip1', 'ip2'):
        for a, b in zip(net.params[name], other.params[name]):
            assert np.array_equal(a.data, b.data)
    saved = caffe_pb2.NetParameter()
    saved.ParseFromString(open(path, 'rb').read())
    assert [l.name for l in saved.layer] == net._layer_names
    assert all(l.phase == caffe.TRAIN for l in saved.layer)


def test_copy_from_skips_unknown_layers_and_rejects_shape_mismatch(tmp_path):
    net = make()
    path = str(tmp_path / 'w.caffemodel')
    net.save(path)
    smaller = Net(MLP.replace('num_output: 5', 'num_output: 6'), caffe.TEST)
    with pytest.raises(WeightsError, match='ip1.*\\[5, 3\\].*\\[6, 3\\]'):
        smaller.copy_from(path)
    renamed = Net(MLP.replace('"ip2"', '"other"'), caffe.TEST)
    renamed.copy_from(path)
    assert np.array_equal(renamed.params['ip1'][0].data, net.params['ip1'][0].data)


def test_clear_errors_for_bad_nets(tmp_path):
    path = tmp_path / 'n.prototxt'
    path.write_text(MLP.replace('type: "ReLU"', 'type: "Relu6"'))
    with pytest.raises(UnknownLayerTypeError) as info:
        Net(str(path), caffe.TEST)
    msg = str(info.value)
    assert str(path) + ':7' in msg and '"relu1"' in msg and 'Relu6' in msg and 'ReLU' in msg
    with pytest.raises(NetError, match='unknown bottom blob "nope"'):
        Net(MLP.replace('bottom: "ip1" top: "ip2"', 'bottom: "nope" top: "ip2"'), caffe.TEST)
    with pytest.raises(NetError, match='produced by multiple sources'):
        Net(MLP + 'layer { name: "dup" type: "ReLU" bottom: "ip2" top: "loss" }', caffe.TRAIN)
    with pytest.raises(NetError) as info:
        Net(MLP.replace('dim: 4 }', 'dim: 5 }'), caffe.TRAIN)
    msg = str(info.value)
    assert '"loss"' in msg and '[4, 3] from layer "ip2"' in msg and '[5] from layer "data"' in msg


def test_debug_info_logs_like_caffe(caplog):
    net = make('debug_info: true\n' + MLP)
    from pycaffe_ft.log import logger
    logger.propagate = True
    try:
        with caplog.at_level(logging.INFO, logger='pycaffe_ft'):
            net.forward()
            net.backward()
    finally:
        logger.propagate = False
    text = caplog.text
    assert '[Forward] Layer ip1, top blob ip1 data:' in text
    assert '[Forward] Layer ip1, param blob 0 data:' in text
    assert '[Backward] Layer ip2, bottom blob ip1 diff:' in text


def test_net_level_input_is_upgraded_to_an_input_layer():
    net = Net('input: "data"\ninput_dim: 1\ninput_dim: 3\ninput_dim: 4\ninput_dim: 4\n'
              'layer { name: "r" type: "ReLU" bottom: "data" top: "r" }', caffe.TEST)
    assert net._layer_names[0] == 'input' and net.blobs['data'].shape == (1, 3, 4, 4)
    assert net.inputs == ['data']


def test_gpu_mode_warns_once_and_runs(caplog):
    caffe.set_mode_gpu()
    caffe.set_device(0)
    caffe.set_mode_cpu()
    make().forward()


def test_forward_all_batches_and_pads():
    net = caffe.Net('layer { name: "i" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 } } }'
                    'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" '
                    'inner_product_param { num_output: 2 weight_filler { type: "gaussian" } } }', caffe.TEST)
    x = np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32)
    out = net.forward_all(data=x)
    w = net.params['ip'][0].data
    assert out['ip'].shape == (10, 2) and np.allclose(out['ip'], x @ w.T, atol=1e-5)


def _input_net(tmp_path, dims, extra=''):
    path = tmp_path / 'n.prototxt'
    path.write_text('layer { name: "in" type: "Input" top: "x" input_param { shape { %s } } }\n%s'
                    % (' '.join('dim: %d' % d for d in dims), extra))
    return str(path)


@pytest.mark.parametrize('dims, extra, layer', [
    ((1000000, 1000000), '', 'in'),
    ((1, 1, 8, 8), 'layer { name: "c" type: "Convolution" bottom: "x" top: "y" convolution_param { num_output: 1 '
                   'kernel_size: 2147483647 } }', 'c'),
    ((4, 1000), 'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 1000 } }',
     'ip'),
])
def test_a_blob_over_the_limit_is_refused_naming_the_layer(tmp_path, monkeypatch, dims, extra, layer):
    monkeypatch.setenv('PYCAFFE_FT_MAX_BLOB_BYTES', str(1 << 20))  # 1 MB: the 4x1000 input fits, 1000x1000 weights not
    with pytest.raises(caffe.CaffeError) as info:
        caffe.Net(_input_net(tmp_path, dims, extra), caffe.TEST)
    message = str(info.value)
    assert 'n.prototxt' in message and 'layer "%s"' % layer in message and 'PYCAFFE_FT_MAX_BLOB_BYTES' in message


def test_a_large_blob_is_allowed_with_a_warning_naming_its_layer(tmp_path, monkeypatch, caplog):
    import pycaffe_ft.net as net_module
    monkeypatch.setattr(net_module, 'LARGE_BLOB_BYTES', 1 << 16)
    with caplog.at_level('WARNING', logger='pycaffe_ft'):
        caffe.Net(_input_net(tmp_path, (64, 256)), caffe.TEST)
    assert any('layer "in": a blob of shape [64, 256] takes' in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize('layer, field', [
    ('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" param { lr_mult: nan } '
     'inner_product_param { num_output: 2 } }', 'param[0].lr_mult is nan'),
    ('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" param { lr_mult: 1 } param { decay_mult: inf } '
     'inner_product_param { num_output: 2 } }', 'param[1].decay_mult is inf'),
    ('layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" inner_product_param { num_output: 2 '
     'weight_filler { type: "gaussian" std: -inf } } }', 'inner_product_param.weight_filler.std is -inf'),
    ('layer { name: "d" type: "Dropout" bottom: "x" top: "y" dropout_param { dropout_ratio: nan } }',
     'dropout_param.dropout_ratio is nan'),
])
def test_non_finite_layer_parameters_are_refused_naming_the_field(tmp_path, layer, field):
    with pytest.raises(caffe.CaffeError) as info:
        caffe.Net(_input_net(tmp_path, (2, 3), layer), caffe.TRAIN)
    assert 'n.prototxt:2' in str(info.value) and field in str(info.value) and 'finite' in str(info.value)


def test_weights_with_negative_dimensions_are_refused(tmp_path):
    from pycaffe_ft.proto import caffe_pb2
    path = _input_net(tmp_path, (1, 3), 'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "y" '
                                        'inner_product_param { num_output: 2 bias_term: false } }')
    model = caffe_pb2.NetParameter()
    layer = model.layer.add(name='ip')
    blob = layer.blobs.add(data=[1.0] * 6)
    blob.shape.dim.extend([-2, -3])
    (tmp_path / 'w.caffemodel').write_bytes(model.SerializeToString())
    with pytest.raises(caffe.CaffeError, match=r'w\.caffemodel.*negative dimension'):
        caffe.Net(path, str(tmp_path / 'w.caffemodel'), caffe.TEST)


FUSED_RELUS = '''
name: "fused"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 3 dim: 3 dim: 40 dim: 40 } } }
layer { name: "direct" type: "Convolution" bottom: "data" top: "direct"
        convolution_param { num_output: 8 kernel_size: 5 pad: 2 weight_filler { type: "gaussian" std: 0.3 }
                            bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu_direct" type: "ReLU" bottom: "direct" top: "direct" }
layer { name: "maxpool" type: "Pooling" bottom: "direct" top: "maxpool"
        pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "relu_max" type: "ReLU" bottom: "maxpool" top: "maxpool" }
layer { name: "im2col" type: "Convolution" bottom: "maxpool" top: "im2col"
        convolution_param { num_output: 16 kernel_size: 3 stride: 2 pad: 1 weight_filler { type: "gaussian" std: 0.3 }
                            bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu_im2col" type: "ReLU" bottom: "im2col" top: "im2col" }
layer { name: "winograd" type: "Convolution" bottom: "im2col" top: "winograd"
        convolution_param { num_output: 16 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu_winograd" type: "ReLU" bottom: "winograd" top: "winograd" }
layer { name: "avepool" type: "Pooling" bottom: "winograd" top: "avepool"
        pooling_param { pool: AVE kernel_size: 2 stride: 2 } }
layer { name: "relu_ave" type: "ReLU" bottom: "avepool" top: "avepool" }
layer { name: "leaky" type: "Convolution" bottom: "avepool" top: "leaky"
        convolution_param { num_output: 8 kernel_size: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu_leaky" type: "ReLU" bottom: "leaky" top: "leaky" relu_param { negative_slope: 0.1 } }
layer { name: "ip" type: "InnerProduct" bottom: "leaky" top: "ip"
        inner_product_param { num_output: 16 weight_filler { type: "gaussian" std: 0.3 }
                              bias_filler { type: "gaussian" std: 0.3 } } }
layer { name: "relu_ip" type: "ReLU" bottom: "ip" top: "ip" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip" top: "ip2"
        inner_product_param { num_output: 4 weight_filler { type: "gaussian" std: 0.3 } } }
'''


def _copy_parameters(net, other):
    """other's parameter blobs = net's (two nets of one definition)."""
    for name, layer in net.layer_dict.items():
        for mine, theirs in zip(layer.blobs, other.layer_dict[name].blobs):
            theirs.data[...] = mine.data


def _assert_same_parameter_bits(net, other, data=True):
    """Every parameter blob's diff (and, with ``data``, its data) has the same bits in both nets."""
    for name, layer in net.layer_dict.items():
        for mine, theirs in zip(layer.blobs, other.layer_dict[name].blobs):
            if data:
                assert mine.data.tobytes() == theirs.data.tobytes(), name
            assert mine.diff.tobytes() == theirs.diff.tobytes(), name


def test_a_relu_in_place_is_applied_by_the_layer_before_it_with_the_same_bits(monkeypatch):
    """Convolution (direct, im2col, Winograd), MAX/AVE pooling and InnerProduct write their top
    through the in-place ReLU after them in a whole pass: every blob as layer-by-layer runs give it (a
    forward hook turns the fusing off), the ReLU layers' own forward not called; a leaky ReLU
    is not fused; a pass that ends at the convolution keeps its output."""
    from pycaffe_ft.layers.neuron import ReLULayer
    net = Net(FUSED_RELUS, caffe.TEST)
    net.blobs['data'].data[...] = np.random.default_rng(3).standard_normal(net.blobs['data'].shape)
    assert [net.layer_dict[n].algorithms()[0] for n in ('direct', 'im2col', 'winograd')] == \
        ['direct', 'im2col', 'Winograd F(2x2, 3x3)']
    reference = Net(FUSED_RELUS, caffe.TEST)
    _copy_parameters(net, reference)
    reference.blobs['data'].data[...] = net.blobs['data'].data
    reference.after_forward(lambda i: None)  # something looks between layers
    reference.forward()
    calls = []
    original = ReLULayer.forward
    monkeypatch.setattr(ReLULayer, 'forward', lambda self, bottom, top: (calls.append(self.name),
                                                                        original(self, bottom, top)))
    net.forward()
    assert calls == ['relu_leaky']
    for name in net.blobs:
        assert net.blobs[name].data.tobytes() == reference.blobs[name].data.tobytes(), name
    assert (net.blobs['direct'].data == 0).any() and (net.blobs['ip'].data == 0).any()
    net.forward(end='direct')
    assert (net.blobs['direct'].data < 0).any()


NORMALIZED_RELUS = '''
name: "normalized"
force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 dim: 9 dim: 11 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
        convolution_param { num_output: 6 kernel_size: 3 pad: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" batch_norm_param { moving_average_fraction: 0.5 } }
layer { name: "relu_bn" type: "ReLU" bottom: "conv" top: "conv" }
layer { name: "conv2" type: "Convolution" bottom: "conv" top: "conv2"
        convolution_param { num_output: 5 kernel_size: 1 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "bn2" type: "BatchNorm" bottom: "conv2" top: "conv2" }
layer { name: "scale2" type: "Scale" bottom: "conv2" top: "conv2"
        scale_param { bias_term: true filler { type: "gaussian" std: 1 } bias_filler { type: "gaussian" std: 1 } } }
layer { name: "relu_scale" type: "ReLU" bottom: "conv2" top: "conv2" }
layer { name: "scaled" type: "Scale" bottom: "conv2" top: "scaled" scale_param { filler { type: "gaussian" std: 1 } } }
layer { name: "relu_scaled" type: "ReLU" bottom: "scaled" top: "scaled" }
layer { name: "sum" type: "Eltwise" bottom: "conv2" bottom: "scaled" top: "sum" eltwise_param { coeff: 1 coeff: -2 } }
layer { name: "relu_sum" type: "ReLU" bottom: "sum" top: "sum" }
layer { name: "sum3" type: "Eltwise" bottom: "conv2" bottom: "scaled" bottom: "sum" top: "sum3"
        eltwise_param { coeff: 1 coeff: -1 coeff: 0.5 } }
layer { name: "relu_sum3" type: "ReLU" bottom: "sum3" top: "sum3" }
'''


@pytest.mark.parametrize('phase', [caffe.TRAIN, caffe.TEST])
def test_batchnorm_scale_and_eltwise_apply_the_relu_in_place_after_them_with_the_same_bits(phase, monkeypatch):
    """BatchNorm (batch or stored statistics), Scale (in place or not, with a bias or not) and
    Eltwise (a weighted SUM of two, of three) write their top through the ReLU after them: data, diffs, parameter diffs and BatchNorm's
    statistics as layer-by-layer runs give them (a forward hook turns the fusing off), the
    ReLUs' own forward not called; the backward reads BatchNorm's output before the ReLU."""
    from pycaffe_ft.layers.neuron import ReLULayer
    nets = [Net(NORMALIZED_RELUS, phase), Net(NORMALIZED_RELUS, phase)]
    rng = np.random.default_rng(5)
    for layer in nets[0].layers:  # drawn here, not by the fillers: the same values in any test order
        for blob in layer.blobs:
            stored_statistics = layer.type == 'BatchNorm'  # mean, variance, factor
            blob.data[...] = rng.uniform(0.5, 1.5, blob.shape) if stored_statistics else rng.standard_normal(blob.shape)
    _copy_parameters(*nets)
    nets[1].after_forward(lambda i: None)  # something looks between layers
    data = rng.standard_normal(nets[0].blobs['data'].shape)
    top_diff = rng.standard_normal(nets[0].blobs['sum3'].shape)
    calls = []
    original = ReLULayer.forward
    monkeypatch.setattr(ReLULayer, 'forward', lambda self, bottom, top: (calls.append(self.name),
                                                                        original(self, bottom, top)))
    called = []
    for net in nets:
        calls.clear()
        net.blobs['data'].data[...] = data
        net.forward()
        net.blobs['sum3'].diff[...] = top_diff
        net.backward()
        called.append(list(calls))
    assert called == [[], ['relu_bn', 'relu_scale', 'relu_scaled', 'relu_sum', 'relu_sum3']]
    for name in ('conv', 'scaled', 'sum', 'sum3'):
        assert (nets[0].blobs[name].data == 0).any() and (nets[0].blobs[name].data > 0).any(), name
    for name in nets[0].blobs:
        assert nets[0].blobs[name].data.tobytes() == nets[1].blobs[name].data.tobytes(), name
        assert nets[0].blobs[name].diff.tobytes() == nets[1].blobs[name].diff.tobytes(), name
    _assert_same_parameter_bits(*nets)


def test_a_relu_in_place_is_masked_by_the_backward_of_the_layer_above_it_with_the_same_bits(monkeypatch):
    """Backward: the layer reading a ReLU's in-place top (Convolution by im2col, with a direct
    weight gradient and by Winograd, MAX and AVE pooling, InnerProduct) multiplies the diff it writes by the
    ReLU's mask: every data and parameter diff as layer-by-layer runs give it (a
    before-backward hook turns the fusing off), the ReLU layers' own backward not called (the
    leaky one's is), their after-backward hooks still called in order."""
    from pycaffe_ft.layers.neuron import ReLULayer
    nets = [Net(FUSED_RELUS, caffe.TRAIN), Net(FUSED_RELUS, caffe.TRAIN)]
    _copy_parameters(*nets)
    rng = np.random.default_rng(4)
    data, top_diff = rng.standard_normal(nets[0].blobs['data'].shape), rng.standard_normal(nets[0].blobs['ip2'].shape)
    nets[1].before_backward(lambda i: None)  # something looks between layers
    after = []
    nets[0].after_backward(after.append)
    calls = []
    original = ReLULayer.backward
    monkeypatch.setattr(ReLULayer, 'backward', lambda self, top, down, bottom: (calls.append(self.name),
                                                                               original(self, top, down, bottom)))
    called = []
    for net in nets:
        calls.clear()
        net.blobs['data'].data[...] = data
        net.forward()
        net.blobs['ip2'].diff[...] = top_diff
        net.backward()
        called.append(list(calls))
    assert called == [['relu_leaky'],
                      ['relu_ip', 'relu_leaky', 'relu_ave', 'relu_winograd', 'relu_im2col', 'relu_max', 'relu_direct']]
    assert after == list(range(len(nets[0].layers)))[::-1]
    for name in nets[0].blobs:
        assert nets[0].blobs[name].diff.tobytes() == nets[1].blobs[name].diff.tobytes(), name
    _assert_same_parameter_bits(*nets, data=False)
