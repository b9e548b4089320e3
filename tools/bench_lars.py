"""Large-batch LeNet with and without LARS (``lars_eta``): test accuracy curves side by side.

LeNet on the shipped MNIST with V virtual workers (global batch V x 64) in one process, the
learning rate scaled for the large batch, plain SGD against SGD with LARS at the same batch.
Prints the accuracy table and writes a PNG (needs matplotlib: pip install -e '.[bench]').

Usage: python tools/bench_lars.py [--workers 8] [--iters 300] [--out docs/lars-large-batch.png]
(run from the repository root after the README's first command has built the MNIST LMDBs).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SOLVER = '''net: "%(net)s"
test_iter: 20
test_interval: %(interval)d
base_lr: %(lr)g
momentum: 0.9
weight_decay: 0.0005
lr_policy: "poly"
power: 2
display: 0
max_iter: %(iters)d
snapshot_after_train: false
random_seed: 1
lars_eta: %(eta)g
'''


def run(tmp, label, workers, iters, lr, eta):
    net = open(os.path.join(ROOT, 'models', 'lenet', 'lenet_train_test.prototxt')).read()
    for name in ('mnist_train_lmdb', 'mnist_test_lmdb'):
        net = net.replace('data/mnist/' + name, os.path.join(ROOT, 'data', 'mnist', name))
    d = os.path.join(tmp, label)
    os.makedirs(d)
    with open(os.path.join(d, 'net.prototxt'), 'w') as f:
        f.write(net)
    with open(os.path.join(d, 'solver.prototxt'), 'w') as f:
        f.write(SOLVER % dict(net=os.path.join(d, 'net.prototxt'), interval=max(1, iters // 10), lr=lr,
                              iters=iters, eta=eta))
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt',
                           '--virtual-workers', str(workers)], cwd=d, capture_output=True, text=True,
                          env=dict(os.environ, GLOG_minloglevel='0'))
    diverged = re.search(r'iteration (\d+): the loss is nan', proc.stderr)
    if proc.returncode != 0 and not diverged:
        raise SystemExit(proc.stderr[-3000:])
    its = [int(m) for m in re.findall(r'Iteration (\d+), Testing net', proc.stderr)]
    acc = [float(m) for m in re.findall(r'Test net output #0: accuracy = ([\d.e+-]+|nan)', proc.stderr)]
    return list(zip(its, acc)), int(diverged.group(1)) if diverged else None


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--workers', type=int, default=8)
    ap.add_argument('--iters', type=int, default=300)
    ap.add_argument('--out', default=os.path.join(ROOT, 'docs', 'lars-large-batch.png'))
    args = ap.parse_args()
    batch = 64 * args.workers
    scaled = 0.01 * args.workers  # linear scaling from Caffe's LeNet (0.01 at batch 64)
    runs = [('SGD, lr %g (linear scaling)' % scaled, scaled, 0),
            ('SGD, lr %g' % (4 * scaled), 4 * scaled, 0),
            ('SGD + LARS eta 0.01, lr %g' % (4 * scaled), 4 * scaled, 0.01)]
    curves = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, (label, lr, eta) in enumerate(runs):
            curve, diverged = run(tmp, 'run%d' % i, args.workers, args.iters, lr, eta)
            if diverged is not None:
                label += ' (diverged: nan loss at iteration %d)' % diverged
            curves[label] = curve
            print('%-34s test accuracy at the end %s' % (label, curve[-1][1]), flush=True)
    print('\n| iteration | ' + ' | '.join(curves) + ' |')
    print('|---' * (len(curves) + 1) + '|')
    iterations = sorted({it for c in curves.values() for it, _ in c})
    for it in iterations:
        cells = [dict(c).get(it) for c in curves.values()]
        print('| %d | ' % it + ' | '.join('-' if v is None else '%.4f' % v for v in cells) + ' |')
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib missing: no chart (pip install -e ".[bench]")')
        return
    fig, ax = plt.subplots(figsize=(7, 4))
    for label, curve in curves.items():
        ax.plot([c[0] for c in curve], [c[1] for c in curve], marker='o', label=label)
    ax.set_xlabel('iteration (global batch %d = %d virtual workers x 64)' % (batch, args.workers))
    ax.set_ylabel('test accuracy (2,000 MNIST test images)')
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print('wrote', args.out)


if __name__ == '__main__':
    main()
