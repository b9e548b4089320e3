"""Caffe's upgrade path: V0 (with padding layers), V1, data transforms, net inputs, BatchNorm
params, solver_type; checked against nets real Caffe upgraded (../shared/golden/nets/)."""
import json
import os

import pytest

from pycaffe_ft import cli
from pycaffe_ft.errors import NetError, SolverError
from pycaffe_ft.netspec_io import load_net_param, load_solver_param
from pycaffe_ft.proto import caffe_pb2
from pycaffe_ft.proto.io import parse_text
from pycaffe_ft.proto.upgrade import upgrade_net, upgrade_solver
from tests.helpers import SHARED, shared_path

V0 = '''
name: "v0"
input: "data"
input_dim: 1 input_dim: 3 input_dim: 8 input_dim: 8
layers { layer { name: "pad1" type: "padding" pad: 2 } bottom: "data" top: "pad1" }
layers { layer { name: "conv1" type: "conv" num_output: 4 kernelsize: 3 stride: 1 biasterm: false
                 weight_filler { type: "gaussian" std: 0.1 } blobs_lr: 1 blobs_lr: 2 weight_decay: 1 }
         bottom: "pad1" top: "conv1" }
layers { layer { name: "pool1" type: "pool" pool: MAX kernelsize: 2 stride: 2 } bottom: "conv1" top: "pool1" }
layers { layer { name: "fc" type: "innerproduct" num_output: 2 } bottom: "pool1" top: "fc" }
layers { layer { name: "drop" type: "dropout" dropout_ratio: 0.3 } bottom: "fc" top: "fc" }
'''


def test_v0_net_with_padding_layer():
    param = upgrade_net(parse_text(V0, caffe_pb2.NetParameter()))
    names = [l.name for l in param.layer]
    assert names == ['input', 'conv1', 'pool1', 'fc', 'drop']
    conv = param.layer[1]
    assert conv.type == 'Convolution' and list(conv.bottom) == ['data']
    assert list(conv.convolution_param.pad) == [2] and list(conv.convolution_param.kernel_size) == [3]
    assert conv.convolution_param.bias_term is False and conv.convolution_param.num_output == 4
    assert [p.lr_mult for p in conv.param] == [1, 2] and conv.param[0].decay_mult == 1
    assert param.layer[2].pooling_param.pool == caffe_pb2.PoolingParameter.MAX
    assert param.layer[4].dropout_param.dropout_ratio == pytest.approx(0.3)
    assert list(param.layer[0].input_param.shape[0].dim) == [1, 3, 8, 8]
    assert not len(param.input) and not len(param.layers)


def test_v0_padding_into_a_non_conv_layer_is_an_error():
    bad = V0.replace('bottom: "pad1" top: "conv1"', 'bottom: "data" top: "conv1"').replace(
        'layers { layer { name: "fc"', 'layers { layer { name: "r" type: "relu" } bottom: "pad1" top: "r" }\nlayers { layer { name: "fc"')
    with pytest.raises(NetError, match='padding'):
        upgrade_net(parse_text(bad, caffe_pb2.NetParameter()))


def test_v1_fields_and_data_transform():
    text = '''layers { name: "d" type: DATA top: "data" top: "label"
                 data_param { source: "x" batch_size: 2 scale: 0.5 mean_file: "m" crop_size: 3 mirror: true } }
              layers { name: "c" type: CONVOLUTION bottom: "data" top: "c" blobs_lr: 1 blobs_lr: 2
                 weight_decay: 1 weight_decay: 0 param: "shared_w" blob_share_mode: PERMISSIVE
                 convolution_param { num_output: 2 kernel_size: 1 } include { phase: TRAIN } }
              layers { name: "l" type: SOFTMAX_LOSS bottom: "c" bottom: "label" top: "l" loss_weight: 2 }'''
    param = upgrade_net(parse_text(text, caffe_pb2.NetParameter()))
    d, c, l = param.layer
    assert d.type == 'Data' and d.transform_param.scale == 0.5 and d.transform_param.mean_file == 'm'
    assert d.transform_param.crop_size == 3 and d.transform_param.mirror
    assert not d.data_param.HasField('scale') and d.data_param.batch_size == 2
    assert c.type == 'Convolution' and c.param[0].name == 'shared_w'
    assert c.param[0].share_mode == caffe_pb2.ParamSpec.PERMISSIVE
    assert [(p.lr_mult, p.decay_mult) for p in c.param] == [(1, 1), (2, 0)]
    assert c.include[0].phase == caffe_pb2.TRAIN
    assert l.type == 'SoftmaxWithLoss' and list(l.loss_weight) == [2]


def test_batchnorm_three_params_get_zero_lr():
    param = upgrade_net(parse_text('layer { name: "bn" type: "BatchNorm" param { lr_mult: 1 } '
                                   'param { lr_mult: 1 } param { lr_mult: 1 } }', caffe_pb2.NetParameter()))
    assert [(p.lr_mult, p.decay_mult) for p in param.layer[0].param] == [(0, 0)] * 3


def test_input_shape_upgrade():
    param = upgrade_net(parse_text('input: "a" input: "b" input_shape { dim: 2 } input_shape { dim: 3 dim: 4 } '
                                   'layer { name: "x" type: "Silence" bottom: "a" bottom: "b" }', caffe_pb2.NetParameter()))
    assert param.layer[0].name == 'input' and list(param.layer[0].top) == ['a', 'b']
    assert [list(s.dim) for s in param.layer[0].input_param.shape] == [[2], [3, 4]]


def test_solver_type_upgrade():
    s = upgrade_solver(parse_text('solver_type: ADAM base_lr: 0.1', caffe_pb2.SolverParameter()))
    assert s.type == 'Adam' and not s.HasField('solver_type')
    with pytest.raises(SolverError):
        upgrade_solver(parse_text('solver_type: ADAM type: "SGD"', caffe_pb2.SolverParameter()))


def _golden_v1_ids():
    index = os.path.join(SHARED, 'golden', 'nets', 'index.tsv')
    if not os.path.exists(index):
        return ['<missing>']
    with open(index) as f:
        header = f.readline().rstrip('\n').split('\t')
        rows = [dict(zip(header, line.rstrip('\n').split('\t'))) for line in f]
    return [r['id'] for r in rows if r['format'] == 'V1' or 'input' in r['inputs']]


def _comparable(param, substituted):
    out = []
    for lp in param.layer:
        if lp.name in substituted:
            continue
        lp = caffe_pb2.LayerParameter.FromString(lp.SerializeToString())
        out.append(lp)
    return out


@pytest.mark.parametrize('net_id', _golden_v1_ids())
def test_upgrade_matches_caffe(net_id):
    d = shared_path('golden', 'nets', 'nets', net_id)
    with open(os.path.join(d, 'meta.json')) as f:
        meta = json.load(f)
    ours, _ = load_net_param(shared_path('corpus', meta['original_path']))
    theirs, _ = load_net_param(os.path.join(d, 'net.prototxt'))
    substituted = {s['layer'] for s in meta['substitutions']}
    a, b = _comparable(ours, substituted), _comparable(theirs, substituted)
    # the recorder only changed data layers and the first Input layer's batch dimension
    for x, y in zip(a, b):
        if x.type == 'Input':
            for sx, sy in zip(x.input_param.shape, y.input_param.shape):
                sx.dim[0] = sy.dim[0]
    assert [str(x) for x in a] == [str(y) for y in b]


def test_upgrade_cli_writes_current_format(tmp_path):
    src, out = tmp_path / 'v0.prototxt', tmp_path / 'v2.prototxt'
    src.write_text(V0)
    assert cli.main(['upgrade-net', str(src), str(out)]) == 0
    param, _ = load_net_param(str(out))
    assert [l.type for l in param.layer] == ['Input', 'Convolution', 'Pooling', 'InnerProduct', 'Dropout']
    assert 'layers {' not in out.read_text()
    s_in, s_out = tmp_path / 's.prototxt', tmp_path / 's2.prototxt'
    s_in.write_text('net: "x"\nsolver_type: NESTEROV\n')
    assert cli.main(['upgrade-solver', str(s_in), str(s_out)]) == 0
    assert load_solver_param(str(s_out)).type == 'Nesterov' and 'solver_type' not in s_out.read_text()
