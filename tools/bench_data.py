"""Data layer throughput (records/s): the shipped MNIST, and synthetic CIFAR-sized (32x32) and
ImageNet-style (256x256, cropped to 227 with mirroring) records stored raw and JPEG-encoded
(written with convert-imageset), each read synchronously (what a rank without a spare core
does) and through the prefetch thread (decoding off the training thread: OpenCV releases the
GIL while it decodes). Compares the 256x256 rates with what AlexNet b16 training consumes here.

Usage: python tools/bench_data.py [--alexnet-ms MS]  (run from the repository root)
  --alexnet-ms: AlexNet b16 ms per training iteration on this machine (default: measured now
  with 2 forward/backward passes at one thread).
"""
import argparse
import os
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, 'tools'))


def synthetic_images(folder, count, size):
    """``count`` photo-like PNG files (smooth colour fields, edges and noise) and a list file."""
    import cv2
    rng = np.random.default_rng(size)
    os.makedirs(folder, exist_ok=True)
    yy, xx = np.mgrid[0:size, 0:size] / size
    lines = []
    for i in range(count):
        phase = rng.uniform(0, 6.28, 3)
        image = np.stack([127 + 100 * np.sin(6 * xx + 4 * yy * (c + 1) + phase[c]) for c in range(3)], -1)
        image += rng.normal(0, 12, image.shape)
        cv2.rectangle(image, tuple(int(v) for v in rng.integers(0, size, 2)),
                      tuple(int(v) for v in rng.integers(0, size, 2)), tuple(float(v) for v in rng.integers(0, 255, 3)), -1)
        name = 'img%05d.png' % i
        cv2.imwrite(os.path.join(folder, name), np.clip(image, 0, 255).astype(np.uint8))
        lines.append('%s %d' % (name, i % 10))
    with open(os.path.join(folder, 'list.txt'), 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return os.path.join(folder, 'list.txt')


def records_per_s(db, batch, transform, synchronous, batches):
    import pycaffe_ft as caffe
    net = caffe.Net('layer { name: "d" type: "Data" top: "data" top: "label" transform_param { %s } '
                    'data_param { source: "%s" batch_size: %d backend: LMDB } }' % (transform, db, batch), caffe.TRAIN)
    layer = net.layers[0]
    layer.synchronous = synchronous
    net.forward()
    t0 = time.perf_counter()
    for _ in range(batches):
        net.forward()
    rate = batches * batch / (time.perf_counter() - t0)
    layer.stop_prefetch()
    return rate


def alexnet_ms():
    import bench_nets
    import pycaffe_ft as caffe
    from pycaffe_ft.bench import time_net
    caffe.set_num_threads(1)
    proto, _ = bench_nets.build('alexnet', 16)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'alexnet.prototxt')
        with open(path, 'w') as f:
            f.write(str(proto))
        return time_net(path, iterations=2, out=lambda *a: None, streams=False)['total_ms']


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--alexnet-ms', type=float, default=None)
    args = ap.parse_args()
    from pycaffe_ft.data.convert import convert_imageset, convert_mnist
    tmp = tempfile.mkdtemp()
    mnist = os.path.join(ROOT, 'data', 'mnist')
    db = os.path.join(tmp, 'mnist_train_lmdb')
    t0 = time.perf_counter()
    convert_mnist(os.path.join(mnist, 'train-images-idx3-ubyte'), os.path.join(mnist, 'train-labels-idx1-ubyte'), db)
    print('convert-mnist: 60000 records in %.2f s' % (time.perf_counter() - t0))
    rows = []
    for synchronous in (True, False):
        rows.append(('MNIST 28x28 raw', 64, synchronous, records_per_s(db, 64, 'scale: 0.00390625', synchronous, 300)))
    for size, count, batch, transform, batches in (
            (32, 2000, 100, 'scale: 0.00390625', 15),
            (256, 400, 16, 'crop_size: 227 mirror: true mean_value: 104 mean_value: 117 mean_value: 123', 20)):
        listing = synthetic_images(os.path.join(tmp, 'img%d' % size), count, size)
        for encoded in (False, True):
            out = os.path.join(tmp, 'db%d_%s' % (size, 'jpg' if encoded else 'raw'))
            t0 = time.perf_counter()
            convert_imageset(os.path.dirname(listing) + '/', listing, out, encoded=encoded,
                             encode_type='jpg' if encoded else '')
            print('convert-imageset %dx%d %s: %d records in %.2f s' % (size, size, 'JPEG' if encoded else 'raw',
                                                                    count, time.perf_counter() - t0))
            for synchronous in (True, False):
                rows.append(('%dx%d %s' % (size, size, 'JPEG' if encoded else 'raw'), batch, synchronous,
                             records_per_s(out, batch, transform, synchronous, batches)))
    print('\n| records | batch | read | records/s |\n|---|---|---|---|')
    for name, batch, synchronous, rate in rows:
        print('| %s | %d | %s | %.0f |' % (name, batch, 'synchronous' if synchronous else 'prefetch thread', rate))
    ms = args.alexnet_ms or alexnet_ms()
    need = 16 / (ms / 1e3)
    worst = min(rate for name, _, _, rate in rows if name.startswith('256'))
    print('\nAlexNet b16 trains at %.0f ms/iteration here (one thread): it consumes %.1f records/s; the slowest '
          '256x256 reading above delivers %.0f records/s = %.0fx that.' % (ms, need, worst, worst / need))


if __name__ == '__main__':
    main()
