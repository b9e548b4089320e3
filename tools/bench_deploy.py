"""Deploy (forward-only, TEST phase) speed: pycaffe-ft beside ONNX Runtime running the same net
exported by ``pycaffe-ft export-onnx``, same threads, interleaved rounds (A B A B).

Usage: python tools/bench_deploy.py [--threads 1] [--batches 1,16] [--rounds 3] [prototxt ...]
Defaults to LeNet, CaffeNet, GoogLeNet and ResNet-50 from ../shared/corpus/ with random
weights. Prints a markdown table of the median ms per forward (of ``--repeats`` per round,
the best round kept) and the ratio pycaffe-ft / ONNX Runtime. ONNX Runtime (``pip install
onnxruntime``) is optional: without it only pycaffe-ft's column is filled.
"""
import argparse
import os
import sys
import tempfile

import numpy as np

from bench_train import median_ms  # tools/ is this script's directory

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(os.path.dirname(os.path.dirname(HERE)), 'shared', 'corpus')
DEFAULTS = ['bvlc/examples/mnist/lenet.prototxt',
            'bvlc/models/bvlc_reference_caffenet/deploy.prototxt',
            'bvlc/models/bvlc_googlenet/deploy.prototxt',
            'wild/KaimingHe+deep-residual-networks/prototxt/ResNet-50-deploy.prototxt']


def build(path, batch):
    """The deploy net at ``batch``, random weights (positive BatchNorm variances)."""
    import pycaffe_ft as caffe
    from pycaffe_ft.netspec_io import load_net_param
    param, _ = load_net_param(path)
    for lp in param.layer:
        if lp.type == 'Input':
            for shape in lp.input_param.shape:
                shape.dim[0] = batch
    net = caffe.Net(param, caffe.TEST)
    rng = np.random.default_rng(0)
    for layer in net.layers:
        for blob in layer.blobs:
            if layer.type == 'BatchNorm':
                blob.data[...] = rng.uniform(0.5, 1.5, blob.shape)
            else:
                blob.data[...] = rng.standard_normal(blob.shape, dtype=np.float32) * 0.01
    for name in net.inputs:
        net.blobs[name].data[...] = rng.uniform(-1, 1, net.blobs[name].shape)
    return net


def ort_session(net, threads, workdir):
    """An ONNX Runtime session of ``net`` exported, and its feeds; None without onnxruntime."""
    try:
        import onnxruntime
    except ImportError:
        return None
    path = os.path.join(workdir, 'net.onnx')
    net.to_onnx(path)
    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    session = onnxruntime.InferenceSession(path, options, providers=['CPUExecutionProvider'])
    feeds = {i.name: net.blobs[i.name].data.copy() for i in session.get_inputs()}
    return lambda: session.run(None, feeds)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('nets', nargs='*')
    parser.add_argument('--threads', type=int, default=1)
    parser.add_argument('--batches', default='1,16')
    parser.add_argument('--rounds', type=int, default=3)
    parser.add_argument('--repeats', type=int, default=5)
    args = parser.parse_args(argv)
    import pycaffe_ft as caffe
    caffe.set_num_threads(args.threads)
    rows = []
    for path in args.nets or [os.path.join(CORPUS, p) for p in DEFAULTS]:
        for batch in (int(b) for b in args.batches.split(',')):
            net = build(path, batch)
            with tempfile.TemporaryDirectory() as workdir:
                ort = ort_session(net, args.threads, workdir)
                ours, theirs = [], []
                for _ in range(args.rounds):
                    ours.append(median_ms(net.forward, args.repeats, warmup=1))
                    if ort is not None:
                        theirs.append(median_ms(ort, args.repeats, warmup=1))
            name = os.path.relpath(path, CORPUS) if path.startswith(CORPUS) else path
            rows.append((name, batch, min(ours), min(theirs) if theirs else None))
            print('%s batch %d: %.1f ms%s' % (name, batch, rows[-1][2], '' if not theirs else
                                               ', ONNX Runtime %.1f ms' % rows[-1][3]), file=sys.stderr)
    print('| net | batch | pycaffe-ft ms | ONNX Runtime ms | ratio |')
    print('|---|---|---|---|---|')
    for name, batch, ours, theirs in rows:
        print('| %s | %d | %.2f | %s | %s |' % (name, batch, ours, '-' if theirs is None else '%.2f' % theirs,
                                             '-' if theirs is None else '%.2f' % (ours / theirs)))


if __name__ == '__main__':
    main()
