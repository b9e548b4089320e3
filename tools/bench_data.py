"""Data layer throughput (records/s) on the shipped MNIST, with and without the prefetch thread.

Usage: python tools/bench_data.py
"""
import os
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


def main():
    import pycaffe_ft as caffe
    from pycaffe_ft.data.convert import convert_mnist
    tmp = tempfile.mkdtemp()
    mnist = os.path.join(ROOT, 'data', 'mnist')
    db = os.path.join(tmp, 'mnist_train_lmdb')
    t0 = time.perf_counter()
    convert_mnist(os.path.join(mnist, 'train-images-idx3-ubyte'), os.path.join(mnist, 'train-labels-idx1-ubyte'), db)
    print('convert-mnist: 60000 records in %.2f s' % (time.perf_counter() - t0))
    for synchronous in (False, True):
        net = caffe.Net('layer { name: "d" type: "Data" top: "data" top: "label" transform_param { scale: 0.00390625 } '
                        'data_param { source: "%s" batch_size: 64 backend: LMDB } }' % db, caffe.TRAIN)
        layer = net.layers[0]
        layer.synchronous = synchronous
        net.forward()
        batches = 300
        t0 = time.perf_counter()
        for _ in range(batches):
            net.forward()
        rate = batches * 64 / (time.perf_counter() - t0)
        print('Data layer (%s): %.0f MNIST records/s' % ('synchronous' if synchronous else 'prefetch thread', rate))
        layer.stop_prefetch()


if __name__ == '__main__':
    main()
