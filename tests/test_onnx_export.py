"""ONNX export (pycaffe_ft/onnx_export.py, ``pycaffe-ft export-onnx``): every deploy net of the
corpus that real Caffe ran (../shared/golden/nets) exports, passes the full ONNX checker and
gives pycaffe-ft's outputs in ONNX Runtime within 1e-4 relative; Caffe's pooling edge cases are
exact; layers without a faithful mapping are refused by name; Caffe's trained LeNet keeps its
MNIST accuracy."""
import csv
import importlib.util
import os
import subprocess
import sys

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.onnx_export import ExportError, export_onnx
from tests.helpers import ROOT, SHARED, shared_path

onnx = pytest.importorskip('onnx', reason='the optional onnx extra is not installed (pip install -e ".[onnx]")')
ort = pytest.importorskip('onnxruntime', reason='the optional onnx extra is not installed')


def _deploy_nets():
    index = os.path.join(SHARED, 'golden', 'nets', 'index.tsv')
    if not os.path.exists(index):
        return [pytest.param('<missing>')]
    with open(index) as f:
        rows = [r for r in csv.DictReader(f, delimiter='\t') if r['kind'] == 'deploy' and r['status'] == 'ok']
    return [pytest.param(r['id'], marks=[pytest.mark.slow] if float(r['forward_s'] or 0) > 0.2 else [])
            for r in rows]


def _run_both(net, model, seed=0, fixed=None):
    rng = np.random.default_rng(seed)
    for name in net.inputs:
        net.blobs[name].data[...] = (fixed or {}).get(name, rng.uniform(-1, 1, net.blobs[name].shape))
    feeds = {name: net.blobs[name].data.copy() for name in net.inputs}
    reference = net.forward()
    session = ort.InferenceSession(model.SerializeToString(), providers=['CPUExecutionProvider'])
    used = {i.name for i in session.get_inputs()}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, {k: v for k, v in feeds.items() if k in used})))
    return reference, got


def assert_same_outputs(net, model):
    reference, got = _run_both(net, model)
    assert sorted(got) == sorted(reference)  # outputs named as the Caffe blobs
    for name, ref in reference.items():
        assert got[name].shape == ref.shape, name
        scale = max(float(np.abs(ref).max()), 1e-30)
        assert float(np.abs(got[name] - ref).max()) <= 1e-4 * scale, name


@pytest.mark.parametrize('net_id', _deploy_nets())
def test_corpus_deploy_net_exports_and_matches_onnx_runtime(net_id):
    d = shared_path('golden', 'nets', 'nets', net_id)
    spec = importlib.util.spec_from_file_location('fill', shared_path('golden', 'nets', 'fill_params.py'))
    fill = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fill)
    net = caffe.Net(os.path.join(d, 'net.prototxt'), caffe.TEST)
    layers = [{'name': n, 'type': l.type, 'num_bottoms': len(b), 'param_shapes': [list(x.shape) for x in l.blobs]}
              for n, l, b in zip(net._layer_names, net.layers, net.bottom_ids)]
    values = fill.fill_params(layers)
    for name, layer in zip(net._layer_names, net.layers):
        for k, blob in enumerate(layer.blobs):
            blob.data[...] = values[(name, k)]
    model = export_onnx(net)  # also runs onnx.checker.check_model(full_check=True)
    assert [i.name for i in model.graph.input] == [n for n in net.inputs]
    assert_same_outputs(net, model)


POOLING_NET = '''layer { name: "in" type: "Input" top: "x" input_param { shape { dim: 2 dim: 3 dim: %(h)d dim: %(w)d } } }
layer { name: "pool" type: "Pooling" bottom: "x" top: "y" pooling_param { pool: %(pool)s kernel_size: %(k)d
        stride: %(s)d pad: %(p)d } }
'''


@pytest.mark.parametrize('pool', ['MAX', 'AVE'])
@pytest.mark.parametrize('h, w, k, s, p', [
    (7, 7, 3, 2, 0),     # ceil: the last window hangs over the edge
    (6, 7, 3, 2, 1),     # padded, clipped windows: AVE divides by the window inside the padded input
    (5, 5, 2, 3, 1),     # the last window would start in the padding: Caffe drops it
    (8, 8, 3, 3, 0),     # windows never reach the last row: a Slice, then no padding
    (3, 3, 5, 1, 2),     # a window larger than the input
    (13, 11, 3, 2, 1),
])
def test_caffes_pooling_edges_are_exact(tmp_path, pool, h, w, k, s, p):
    (tmp_path / 'n.prototxt').write_text(POOLING_NET % dict(h=h, w=w, k=k, s=s, p=p, pool=pool))
    net = caffe.Net(str(tmp_path / 'n.prototxt'), caffe.TEST)
    assert_same_outputs(net, export_onnx(net))


def test_the_fuzz_nets_cover_the_other_layers_and_batchnorm_folding():
    """The two nets the fuzz suite starts from hold most layer types (BatchNorm + Scale,
    LRN, Slice, Eltwise with coefficients, Concat, Reshape, Deconvolution, Crop, PReLU, SPP,
    MVN, Power, ELU, Exp, Log, Threshold, Tile, Reduction, Flatten, Bias, ArgMax, Embed, AbsVal,
    Clip, Swish), and Scale/Bias with a second bottom or several axes."""
    sys.path.insert(0, os.path.join(ROOT, 'tools'))
    fuzz = importlib.import_module('fuzz_readers')
    two_bottoms = ('layer { name: "in" type: "Input" top: "x" top: "s" top: "b" input_param { shape { dim: 2 dim: 3 '
                   'dim: 4 dim: 4 } shape { dim: 2 dim: 3 } shape { dim: 3 dim: 4 } } }\n'
                   'layer { name: "scale" type: "Scale" bottom: "x" bottom: "s" top: "y" scale_param { axis: 0 '
                   'bias_term: true } }\nlayer { name: "bias" type: "Bias" bottom: "y" bottom: "b" top: "z" bias_param '
                   '{ axis: 1 } }\nlayer { name: "scale2" type: "Scale" bottom: "z" top: "w" scale_param { axis: 1 '
                   'num_axes: 2 bias_term: true } }\n')
    for text in (fuzz.DEPLOY, fuzz.DEPLOY_MORE, two_bottoms):
        text = '\n'.join(line for line in text.splitlines() if '"Im2col"' not in line)  # refused, below
        net = caffe.Net(text, caffe.TEST)
        for layer in net.layers:  # non-trivial statistics and scales
            for blob in layer.blobs:
                blob.data[...] = np.random.default_rng(1).uniform(0.5, 1.5, blob.shape)
        model = export_onnx(net)
        ops = [node.op_type for node in model.graph.node]
        if text.startswith('name: "fuzz"'):  # BatchNorm + Scale: one node, the Scale folded in
            assert ops.count('BatchNormalization') == 1 and ops[ops.index('BatchNormalization') + 1] == 'LeakyRelu'
        ids = {'ids': np.array([[3, 0, 9], [1, 2, 3]], np.float32)} if 'ids' in net.blobs else None
        reference, got = _run_both(net, model, fixed=ids)
        for name, ref in reference.items():
            assert np.abs(got[name] - ref).max() <= 1e-4 * max(np.abs(ref).max(), 1e-30), name


@pytest.mark.parametrize('layer, why', [
    ('layer { name: "loss" type: "SoftmaxWithLoss" bottom: "x" bottom: "label" top: "loss" }', 'a loss layer'),
    ('layer { name: "acc" type: "Accuracy" bottom: "x" bottom: "label" top: "acc" }', 'evaluation layer'),
    ('layer { name: "py" type: "Python" bottom: "x" top: "y" python_param { module: "m" layer: "L" } }', 'Python'),
    ('layer { name: "lstm" type: "LSTM" bottom: "seq" bottom: "cont" top: "h" recurrent_param { num_output: 2 } }',
     'recurrent'),
    ('layer { name: "cols" type: "Im2col" bottom: "img" top: "c" convolution_param { kernel_size: 2 } }', 'im2col'),
    ('layer { name: "sp" type: "Pooling" bottom: "img" top: "p" pooling_param { pool: STOCHASTIC kernel_size: 2 } }',
     'STOCHASTIC'),
])
def test_layers_without_a_faithful_mapping_are_refused_by_name(tmp_path, monkeypatch, layer, why):
    (tmp_path / 'm.py').write_text('import pycaffe_ft as caffe\nclass L(caffe.Layer):\n    def setup(self, b, t): pass\n'
                                   '    def reshape(self, b, t): t[0].reshape(*b[0].data.shape)\n'
                                   '    def forward(self, b, t): t[0].data[...] = b[0].data\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    (tmp_path / 'n.prototxt').write_text(
        'layer { name: "in" type: "Input" top: "x" top: "label" top: "seq" top: "cont" top: "img" input_param { '
        'shape { dim: 2 dim: 3 } shape { dim: 2 } shape { dim: 2 dim: 1 dim: 3 } shape { dim: 2 dim: 1 } '
        'shape { dim: 1 dim: 1 dim: 4 dim: 4 } } }\n' + layer)
    net = caffe.Net(str(tmp_path / 'n.prototxt'), caffe.TEST)
    name = layer.split('"')[1]
    with pytest.raises(ExportError, match='layer "%s" .*cannot be exported to ONNX: .*%s' % (name, why)):
        export_onnx(net)


def test_trained_lenet_keeps_its_mnist_accuracy_in_onnx_runtime(tmp_path):
    """Caffe's own LeNet after 1,000 iterations, exported through the CLI with --verify and
    --dynamic-batch, classifies the 10,000 MNIST test digits as pycaffe-ft does."""
    from pycaffe_ft.data.convert import read_idx
    weights = shared_path('golden', 'mnist_lenet', 'lenet_iter_1000.caffemodel')
    model = os.path.join(ROOT, 'models', 'lenet', 'lenet.prototxt')
    out = tmp_path / 'lenet.onnx'
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'export-onnx', '--model', model, '--weights', weights,
                           '--out', str(out), '--dynamic-batch', '--verify'], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert 'verified: every output within 1e-4 relative' in proc.stdout
    images = read_idx(os.path.join(ROOT, 'data', 'mnist', 't10k-images-idx3-ubyte'), 2051)
    labels = read_idx(os.path.join(ROOT, 'data', 'mnist', 't10k-labels-idx1-ubyte'), 2049)
    x = images.reshape(-1, 1, 28, 28).astype(np.float32) * np.float32(0.00390625)
    session = ort.InferenceSession(str(out), providers=['CPUExecutionProvider'])
    onnx_pred = np.concatenate([session.run(None, {'data': x[i:i + 1000]})[0].argmax(1) for i in range(0, 10000, 1000)])
    net = caffe.Net(model, weights, caffe.TEST)
    ours = []
    for i in range(0, 10000, 64):
        batch = x[i:i + 64]
        net.blobs['data'].reshape(*batch.shape)
        net.blobs['data'].data[...] = batch
        ours.append(net.forward()['prob'].argmax(1))
    ours = np.concatenate(ours)
    onnx_accuracy, our_accuracy = (onnx_pred == labels).mean(), (ours == labels).mean()
    assert onnx_accuracy == our_accuracy and our_accuracy > 0.97


@pytest.mark.parametrize('net_text, flags, inputs', [
    ('layer { name: "x" type: "DummyData" top: "x" dummy_data_param { shape { dim: 2 dim: 3 } '
     'data_filler { type: "gaussian" } } }\n', [], ['x']),
    ('layer { name: "mnist" type: "Data" top: "data" top: "label" include { phase: TEST } transform_param { scale: 0.1 } '
     'data_param { source: "no/such_lmdb" batch_size: 100 backend: LMDB } }\n',
     ['--input-shape', 'data=1,1,28,28', '--dynamic-batch'], ['data', 'label']),
])
def test_dummy_data_and_data_layers_become_graph_inputs(tmp_path, net_text, flags, inputs):
    bottom = inputs[0]
    (tmp_path / 'n.prototxt').write_text(
        net_text + 'layer { name: "ip" type: "InnerProduct" bottom: "%s" top: "ip" inner_product_param { num_output: 3 '
        'weight_filler { type: "xavier" } } }\nlayer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }\n' % bottom)
    out = tmp_path / 'n.onnx'
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'export-onnx', '--model', str(tmp_path / 'n.prototxt'),
                           '--out', str(out), '--verify'] + flags, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and 'verified' in proc.stdout, proc.stdout + proc.stderr
    model = onnx.load(str(out))
    assert [i.name for i in model.graph.input] == inputs and 'prob' in [o.name for o in model.graph.output]
    if '--dynamic-batch' in flags:
        assert model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == 'N'
