"""caffe.NetSpec / caffe.layers / caffe.params produce prototxt our parser accepts."""
import numpy as np

import pycaffe_ft as caffe
from pycaffe_ft import layers as L, params as P
from pycaffe_ft.proto.io import parse_text
from pycaffe_ft.proto import caffe_pb2


def test_netspec_layers_params_and_autonames():
    n = caffe.NetSpec()
    n.data, n.label = L.DummyData(shape=[dict(dim=[2, 1, 8, 8]), dict(dim=[2])], ntop=2,
                                  data_filler=dict(type='gaussian'))
    n.conv = L.Convolution(n.data, kernel_size=3, num_output=4, param=[dict(lr_mult=1), dict(lr_mult=2, decay_mult=0)],
                           weight_filler=dict(type='xavier'))
    relu = L.ReLU(n.conv, in_place=True)
    n.pool = L.Pooling(relu, kernel_size=2, stride=2, pool=P.Pooling.MAX)
    n.ip = L.InnerProduct(L.Flatten(n.pool), num_output=3)
    n.loss = L.SoftmaxWithLoss(n.ip, n.label, loss_weight=2, include=dict(phase=caffe.TRAIN))
    n.silence = L.Silence(n.label, ntop=0)
    proto = n.to_proto()
    text = str(proto)
    parsed = parse_text(text, caffe_pb2.NetParameter())
    names = [l.name for l in parsed.layer]
    assert names == ['data', 'conv', 'ReLU1', 'pool', 'Flatten1', 'ip', 'loss', 'silence']
    conv = parsed.layer[1]
    assert [p.lr_mult for p in conv.param] == [1, 2] and conv.param[1].decay_mult == 0
    assert conv.convolution_param.weight_filler.type == 'xavier'
    assert list(parsed.layer[2].top) == ['conv'] and parsed.layer[3].pooling_param.pool == caffe_pb2.PoolingParameter.MAX
    assert parsed.layer[6].loss_weight[0] == 2 and parsed.layer[6].include[0].phase == caffe.TRAIN
    assert not len(parsed.layer[7].top)
    net = caffe.Net(text, caffe.TRAIN)
    assert np.isfinite(net.forward()['loss'])


def test_to_proto_of_tops_and_top_to_proto():
    data = L.Input(shape=dict(dim=[1, 2]))
    out = L.InnerProduct(data, num_output=2)
    proto = out.to_proto()
    assert [l.type for l in proto.layer] == ['Input', 'InnerProduct']
    assert [l.type for l in caffe.to_proto(out).layer] == ['Input', 'InnerProduct']
