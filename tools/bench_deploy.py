"""Forward time of deploy nets at batch 1 on one thread (issue 3's benchmark).

Usage: OPENBLAS_NUM_THREADS=1 python tools/bench_deploy.py [prototxt ...]
Defaults to ResNet-50 and GoogLeNet from ../shared/corpus/. Prints the median of 5 forwards.
"""
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
CORPUS = os.path.join(os.path.dirname(os.path.dirname(HERE)), 'shared', 'corpus')
DEFAULTS = ['wild/KaimingHe+deep-residual-networks/prototxt/ResNet-50-deploy.prototxt',
            'bvlc/models/bvlc_googlenet/deploy.prototxt']


def main(paths):
    import pycaffe_ft as caffe
    from pycaffe_ft.netspec_io import load_net_param
    for path in paths or [os.path.join(CORPUS, p) for p in DEFAULTS]:
        param, _ = load_net_param(path)
        for lp in param.layer:
            if lp.type == 'Input':
                for shape in lp.input_param.shape:
                    shape.dim[0] = 1
        net = caffe.Net(param, caffe.TEST)
        rng = np.random.default_rng(0)
        for layer in net.layers:
            for blob in layer.blobs:
                if layer.type == 'BatchNorm':  # positive variances and scale factor
                    blob.data[...] = rng.uniform(0.5, 1.5, blob.shape)
                else:
                    blob.data[...] = rng.standard_normal(blob.shape, dtype=np.float32) * 0.01
        for name in net.inputs:
            net.blobs[name].data[...] = rng.uniform(-1, 1, net.blobs[name].shape)
        net.forward()
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            net.forward()
            times.append(time.perf_counter() - t0)
        print('%-60s batch 1 forward: %.1f ms (median of 5)' % (os.path.basename(path), 1e3 * np.median(times)))


if __name__ == '__main__':
    main(sys.argv[1:])
