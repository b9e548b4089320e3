"""The ../shared/corpus/ conformance suite: real prototxts parse, upgrade and build.

* Every file needing no fork field parses and upgrades (nets and solvers).
* Every file needing a fork's field fails with an error naming that field, file and line.
* Every BVLC-only net builds in TEST phase (data layers replaced by Input layers of the
  right shape) and runs forward on random input, and builds in TRAIN phase and runs forward
  and backward; nets with fork layer types fail naming them.
"""
import csv
import os

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import CaffeError, PrototxtError
from pycaffe_ft.netspec_io import load_net_param, load_solver_param
from pycaffe_ft.synthetic_inputs import replace_data_layers
from tests.helpers import SHARED, shared_path

# Nets that take over ~1 s here (big ImageNet models, FCN/HED at 500x500): marked slow, run
# with -m slow. Measured on the 2-core machine.
HEAVY_NETS = {
    'bvlc/examples/feature_extraction/imagenet_val.prototxt',
    'bvlc/examples/finetune_pascal_detection/pascal_finetune_trainval_test.prototxt',
    'bvlc/examples/net_surgery/bvlc_caffenet_full_conv.prototxt',
    'bvlc/models/bvlc_alexnet/deploy.prototxt',
    'bvlc/models/bvlc_alexnet/train_val.prototxt',
    'bvlc/models/bvlc_reference_caffenet/deploy.prototxt',
    'bvlc/models/bvlc_reference_caffenet/train_val.prototxt',
    'bvlc/models/finetune_flickr_style/deploy.prototxt',
    'bvlc/models/finetune_flickr_style/train_val.prototxt',
    'wild/BVLC+caffe@rc/examples/feature_extraction/imagenet_val.prototxt',
    'wild/BVLC+caffe@rc/examples/finetune_pascal_detection/pascal_finetune_train.prototxt',
    'wild/BVLC+caffe@rc/examples/finetune_pascal_detection/pascal_finetune_val.prototxt',
    'wild/BVLC+caffe@rc/examples/imagenet/bvlc_caffenet_full_conv.prototxt',
    'wild/BVLC+caffe@rc/models/bvlc_alexnet/deploy.prototxt',
    'wild/BVLC+caffe@rc/models/bvlc_alexnet/train_val.prototxt',
    'wild/BVLC+caffe@rc/models/bvlc_reference_caffenet/deploy.prototxt',
    'wild/BVLC+caffe@rc/models/bvlc_reference_caffenet/train_val.prototxt',
    'wild/BVLC+caffe@rc/models/finetune_flickr_style/train_val.prototxt',
    'wild/KaimingHe+deep-residual-networks/prototxt/ResNet-101-deploy.prototxt',
    'wild/KaimingHe+deep-residual-networks/prototxt/ResNet-152-deploy.prototxt',
    'wild/rbgirshick+rcnn/finetuning/voc_2007_prototxt/pascal_finetune_train.prototxt',
    'wild/rbgirshick+rcnn/finetuning/voc_2007_prototxt/pascal_finetune_val.prototxt',
    'wild/rbgirshick+rcnn/finetuning/voc_2012_prototxt/pascal_finetune_train.prototxt',
    'wild/rbgirshick+rcnn/finetuning/voc_2012_prototxt/pascal_finetune_val.prototxt',
    'wild/rbgirshick+rcnn/model-defs/pascal_finetune_deploy.prototxt',
    'wild/rbgirshick+rcnn/model-defs/rcnn_batch_256_output_fc7.prototxt',
    'wild/s9xie+hed/examples/hed/deploy.prototxt',
    'wild/shelhamer+fcn.berkeleyvision.org/voc-fcn8s/deploy.prototxt',
    'wild/soeaver+caffe-model/cls/inception/deploy_inception-resnet-v2.prototxt',
    'wild/soeaver+caffe-model/cls/inception/deploy_inception-v3.prototxt',
    'wild/soeaver+caffe-model/cls/inception/deploy_inception-v4.prototxt',
    'wild/soeaver+caffe-model/cls/inception/deploy_xception.prototxt',
    'wild/soeaver+caffe-model/cls/resnet-v2/deploy_resnet101-v2.prototxt',
    'wild/soeaver+caffe-model/cls/resnet-v2/deploy_resnet152-v2.prototxt',
    'wild/soeaver+caffe-model/cls/resnet-v2/deploy_resnet269-v2.prototxt',
    'wild/soeaver+caffe-model/cls/resnet-v2/deploy_resnet38a.prototxt',
    'wild/soeaver+caffe-model/cls/resnet/deploy_resnet101.prototxt',
    'wild/soeaver+caffe-model/cls/resnet/deploy_resnet152.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg13-pytorch.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg13bn-pytorch.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg16-3c4x.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg16-5x.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg16-dsd.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg16-pytorch.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg16-tf.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg16bn-pytorch.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg19-pytorch.prototxt',
    'wild/soeaver+caffe-model/cls/vgg/deploy_vgg19bn-pytorch.prototxt',
}

# Data shapes the prototxt cannot tell (HDF5 datasets): from the BVLC examples' own data.
HDF5_SHAPES = {'data': (10, 4), 'label': (10,)}


def manifest():
    path = os.path.join(SHARED, 'corpus', 'MANIFEST.tsv')
    if not os.path.exists(path):
        return [{'local_path': '<missing>'}]
    with open(path) as f:
        return list(csv.DictReader(f, delimiter='\t'))


ROWS = manifest()
IDS = [r['local_path'] for r in ROWS]


def _load(row):
    path = shared_path('corpus', row['local_path'])
    if row['format'] == 'SolverParameter':
        return load_solver_param(path)
    return load_net_param(path)


def _fork_fields(row):
    value = row['fields_not_in_bvlc_proto']
    if value == '-':
        return []
    return [f for f in value.split(',') if not f.startswith('bad-value') and not f.startswith('(')]


@pytest.mark.parametrize('row', ROWS, ids=IDS)
def test_parse_and_upgrade(row):
    if row['local_path'] == '<missing>':
        shared_path('corpus', 'MANIFEST.tsv')
    forks = _fork_fields(row)
    if row['fields_not_in_bvlc_proto'] == '-':
        result = _load(row)
        if row['format'] != 'SolverParameter':
            param, _ = result
            assert len(param.layers) == 0 and len(param.input) == 0
            assert len(param.layer) > 0
        else:
            assert not result.HasField('solver_type')
        return
    with pytest.raises(PrototxtError) as info:
        _load(row)
    message = str(info.value)
    assert row['local_path'].split('/')[-1] in message
    assert info.value.line is not None
    if forks:
        assert any(f.split('.')[-1] in message for f in forks), message


def fill_scaled(net, seed=0):
    """Params drawn like ../shared/golden/nets/fill_params.py's rule (N(0,1)/sqrt(fan_in),
    BatchNorm mean N(0,.1), variance U(.5,1.5), factor 1; Scale U(.5,1.5)): unlike the deploy
    prototxts' own fillers this keeps deep nets finite. Inputs U(-1, 1), labels in [0, 2)."""
    rng = np.random.default_rng(seed)
    for layer, lp in zip(net.layers, net._layer_names):
        for j, blob in enumerate(layer.blobs):
            shape = blob.shape
            if layer.type == 'BatchNorm':
                blob.data[...] = [lambda: rng.standard_normal(shape) * 0.1, lambda: rng.uniform(0.5, 1.5, shape),
                                  lambda: 1.0][min(j, 2)]()
            elif layer.type == 'Scale' and j == 0 and len(layer.layer_param.bottom) == 1:
                blob.data[...] = rng.uniform(0.5, 1.5, shape)
            else:
                fan_in = blob.count // shape[0] if len(shape) >= 2 else 1
                blob.data[...] = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(fan_in))
    for name in net.inputs:
        blob = net.blobs[name]
        blob.data[...] = rng.integers(0, 2, blob.shape) if 'label' in name else rng.uniform(-1, 1, blob.shape)


def cap_batch(param, batch=2):
    """Input shapes with the batch dimension capped (as the golden recorder did): the suite
    checks shapes and finiteness, not throughput."""
    for lp in param.layer:
        if lp.type == 'Input':
            for shape in lp.input_param.shape:
                if len(shape.dim):
                    shape.dim[0] = min(shape.dim[0], batch)
    return param


def _custom_types(flag):
    """(fork layer types, Python layer module paths) named by a MANIFEST custom_layer_flag."""
    custom, python = [], []
    for part in flag.split(';') if flag != '-' else []:
        kind, _, names = part.partition(':')
        (custom if kind == 'CUSTOM' else python).extend(names.split(','))
    return custom, python


def _test_stages(param):
    """Stages to build the TEST net with: none, unless every TEST data layer needs one (Caffe's
    mnist_autoencoder: "test-on-test"); then the last such stage, as the golden recorder did."""
    stages = []
    for lp in param.layer:
        for rule in lp.include:
            if rule.phase == caffe.TEST and len(rule.stage):
                stages.append(rule.stage[0])
    needs = stages and not any(
        any(r.phase == caffe.TEST and not len(r.stage) for r in lp.include)
        for lp in param.layer if lp.type in ('Data', 'ImageData', 'HDF5Data', 'WindowData', 'MemoryData'))
    return stages[-1:] if needs else []


def _bvlc_net_rows():
    return [r for r in ROWS if r.get('format') in ('V1', 'V2') and r['fields_not_in_bvlc_proto'] == '-']


NET_ROWS = [pytest.param(r, id=r['local_path'],
                         marks=[pytest.mark.slow] if r['local_path'] in HEAVY_NETS else [])
            for r in (_bvlc_net_rows() or ROWS[:1])]


@pytest.mark.parametrize('row', NET_ROWS)
def test_build_and_forward(row):
    if row['local_path'] == '<missing>':
        shared_path('corpus', 'MANIFEST.tsv')
    param, source = load_net_param(shared_path('corpus', row['local_path']))
    types = {lp.type for lp in param.layer}
    custom, python_modules = _custom_types(row['custom_layer_flag'])
    missing = sorted(t for t in types - set(custom) if t not in caffe.layer_type_list()
                     and t not in ('Data', 'ImageData', 'HDF5Data', 'WindowData', 'MemoryData'))
    if missing:
        pytest.skip('layer types not implemented yet: %s' % ', '.join(missing))
    if custom or python_modules:
        with pytest.raises(CaffeError) as info:
            net_param, _ = replace_data_layers(param, HDF5_SHAPES)
            caffe.Net(net_param, caffe.TEST)
        names = custom + [m.split('.')[0] for m in python_modules]
        assert any(n in str(info.value) for n in names), str(info.value)
        return
    net_param, _ = replace_data_layers(param, HDF5_SHAPES if 'HDF5Data' in types else None)
    net = caffe.Net(cap_batch(net_param), caffe.TEST, stages=_test_stages(param))
    fill_scaled(net)
    net.forward()
    for name, blob in net.blobs.items():
        assert np.all(np.isfinite(blob.data)), name
    # TRAIN phase: forward and backward
    train_param, _ = replace_data_layers(param, HDF5_SHAPES if 'HDF5Data' in types else None)
    train = caffe.Net(cap_batch(train_param), caffe.TRAIN)
    fill_scaled(train)
    train.forward()
    train.backward()
    for name, blob in train.blobs.items():
        assert np.all(np.isfinite(blob.data)) and np.all(np.isfinite(blob.diff)), name
    assert np.all(np.isfinite(train.param_diff))
