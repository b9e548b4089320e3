"""The benchmark's nets build and train here, and its graph export carries every layer PyTorch
needs (checked against PyTorch itself where the optional bench extra is installed)."""
import importlib
import os
import sys

import numpy as np
import pytest

import pycaffe_ft as caffe

TOOLS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tools')
sys.path.insert(0, TOOLS)
bench_nets = importlib.import_module('bench_nets')
bench_train = importlib.import_module('bench_train')

# parameter counts of the published models
PARAMS = {'alexnet': 60965224, 'caffenet': 60965224}


@pytest.mark.parametrize('name', sorted(bench_nets.NETS))
def test_benchmark_net_builds_and_runs_forward_backward(name):
    proto, solver = bench_nets.build(name, 2)
    net = caffe.Net(proto, caffe.TRAIN)
    net.blobs['data'].data[...] = np.random.default_rng(0).uniform(-1, 1, net.blobs['data'].shape)
    net.blobs['label'].data[...] = [0, solver['classes'] - 1]
    loss = net.forward()['loss']
    net.backward()
    assert np.isfinite(loss) and loss > 0
    if name in PARAMS:
        assert sum(b.count for b in net.learnable_params) == PARAMS[name]


def test_exported_graph_runs_in_pytorch_like_the_net(tmp_path):
    torch = pytest.importorskip('torch', reason='PyTorch is the optional bench extra')
    path = str(tmp_path / 'cifar')
    bench_train.export_graph('cifar10_quick', 4, True, path)
    import json
    with open(path + '.json') as f:
        spec = json.load(f)
    arrays = np.load(path + '.npz')
    model = bench_train.TorchNet(spec, arrays, torch, set())
    model.training = False
    with torch.no_grad():
        theirs = model({'data': torch.from_numpy(arrays['data'])})['prob'].numpy()
    proto, _ = bench_nets.build('cifar10_quick', 4, deploy=True)
    caffe.set_random_seed(0)
    net = caffe.Net(proto, caffe.TEST)
    for ln, layer in zip(net._layer_names, net.layers):
        for i, blob in enumerate(layer.blobs):
            blob.data[...] = arrays['%s/%d' % (ln, i)]
    ours = net.forward(data=arrays['data'])['prob']
    np.testing.assert_allclose(ours, theirs, rtol=1e-3, atol=1e-5)


def test_deploy_benchmark_prints_a_table_beside_onnx_runtime(capsys):
    pytest.importorskip('onnxruntime', reason='ONNX Runtime is the optional onnx extra')
    from tests.helpers import shared_path
    bench_deploy = importlib.import_module('bench_deploy')
    lenet = shared_path('corpus', 'bvlc', 'examples', 'mnist', 'lenet.prototxt')
    bench_deploy.main([lenet, '--batches', '1,2', '--rounds', '1', '--repeats', '1'])
    rows = [line for line in capsys.readouterr().out.splitlines() if 'lenet' in line]
    assert len(rows) == 2
    for row, batch in zip(rows, (1, 2)):
        cells = [c.strip() for c in row.strip('|').split('|')]
        assert cells[1] == str(batch) and float(cells[2]) > 0 and float(cells[3]) > 0
        assert abs(float(cells[4]) - float(cells[2]) / float(cells[3])) < 0.1 * float(cells[4]) + 0.05


def test_compile_cost_tool_times_a_cold_then_a_warm_first_training_step(capsys):
    bench_jit = importlib.import_module('bench_jit')
    bench_jit.main(['--nets', 'lenet'])
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[1:3] for line in lines] == [['cold', 'cache'], ['warm', 'cache']]
    seconds = [float(line.split('first training step')[1].split()[0]) for line in lines]
    assert seconds[0] > seconds[1] > 0  # compiling on the first run, loading the cache on the second
