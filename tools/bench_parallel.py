"""Parallel-training benchmark (issue 6): iteration time with 1 and 2 ranks for LeNet and
CIFAR10-quick, the cost of the per-iteration Agree, and detect-to-resume recovery time for 4 and
8 ranks (median of 5 kills each).

Usage: python tools/bench_parallel.py   (run from the repository root; takes a few minutes)
LeNet reads the shipped MNIST (LMDBs built in a temp dir); CIFAR10-quick, which has no data
here, reads a synthetic LMDB of random 3x32x32 images (said in the output).
"""
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

SOLVER = '''net: "net.prototxt"
base_lr: 0.001
momentum: 0.9
lr_policy: "fixed"
display: %(display)d
max_iter: %(max_iter)d
snapshot_after_train: false
snapshot_prefix: "snap"
random_seed: 1
'''


def build_data(tmp):
    from pycaffe_ft.data.convert import convert_mnist
    from pycaffe_ft.data.db import DBWriter
    from pycaffe_ft.proto import caffe_pb2
    mnist = os.path.join(ROOT, 'data', 'mnist')
    convert_mnist(os.path.join(mnist, 'train-images-idx3-ubyte'), os.path.join(mnist, 'train-labels-idx1-ubyte'),
                  os.path.join(tmp, 'mnist_train_lmdb'))
    rng = np.random.default_rng(0)
    with DBWriter(os.path.join(tmp, 'cifar_synthetic_lmdb')) as db:
        for i in range(5000):
            d = caffe_pb2.Datum(channels=3, height=32, width=32, data=rng.integers(0, 256, 3072, np.uint8).tobytes(),
                                label=int(rng.integers(0, 10)))
            db.put('%05d' % i, d.SerializeToString())


def job(tmp, name, net_text, max_iter, display):
    d = os.path.join(tmp, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, 'net.prototxt'), 'w') as f:
        f.write(net_text)
    with open(os.path.join(d, 'solver.prototxt'), 'w') as f:
        f.write(SOLVER % {'max_iter': max_iter, 'display': display})
    return d


def run(d, flags, env_extra=None, cpus=None):
    """Train in job directory d with these CLI flags; ``cpus``: the CPUs the job may run on
    (all when None)."""
    env = dict(os.environ, GLOG_minloglevel='0', OPENBLAS_NUM_THREADS='1')
    env.update(env_extra or {})
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt'] + flags,
                       cwd=d, env=env, capture_output=True, text=True, timeout=900,
                       preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus is not None else None)
    if p.returncode != 0:
        raise SystemExit(p.stderr[-2000:])
    return p.stderr, time.perf_counter() - t0


def iteration_ms(log):
    """Mean ms per iteration over the display intervals after the first (warm)."""
    rates = [float(m.group(1)) for m in re.finditer(r'Iteration \d+ \(([\d.e+-]+) iter/s', log)][1:]
    return 1e3 / statistics.mean(rates)


def glog_time(line):
    hms = line.split()[1]
    h, m, s = hms.split(':')
    return int(h) * 3600 + int(m) * 60 + float(s)


def train_nets(tmp):
    """{'LeNet': text, 'CIFAR10-quick': text}: the models' train nets reading the LMDBs that
    build_data(tmp) wrote, without their TEST data and accuracy layers."""
    lenet = open(os.path.join(ROOT, 'models', 'lenet', 'lenet_train_test.prototxt')).read() \
        .replace('data/mnist/mnist_train_lmdb', os.path.join(tmp, 'mnist_train_lmdb'))
    lenet = re.sub(r'layer \{\n  name: "mnist" type: "Data" top: "data" top: "label"\n  include \{ phase: TEST \}.*?\n\}\n', '', lenet, flags=re.S)
    lenet = re.sub(r'layer \{\n  name: "accuracy".*?\n\}\n', '', lenet, flags=re.S)
    cifar = open(os.path.join(ROOT, 'models', 'cifar10_quick', 'cifar10_quick_train_test.prototxt')).read()
    cifar = cifar.replace('data/cifar10/cifar10_train_lmdb', os.path.join(tmp, 'cifar_synthetic_lmdb'))
    cifar = cifar.replace('transform_param { mean_file: "data/cifar10/mean.binaryproto" }', 'transform_param { scale: 0.00390625 }')
    cifar = re.sub(r'layer \{\n  name: "cifar" type: "Data" top: "data" top: "label"\n  include \{ phase: TEST \}.*?\n\}\n', '', cifar, flags=re.S)
    cifar = re.sub(r'layer \{\n  name: "accuracy".*?\n\}\n', '', cifar, flags=re.S)
    return {'LeNet': lenet, 'CIFAR10-quick': cifar}


def main():
    tmp = tempfile.mkdtemp()
    build_data(tmp)
    nets = train_nets(tmp)
    lenet, cifar = nets['LeNet'], nets['CIFAR10-quick']
    print('CIFAR10-quick reads a synthetic LMDB of random images (no CIFAR data ships here).')
    print('\n== iteration time (global batch = virtual workers x prototxt batch) ==')
    for name, text, iters in (('LeNet', lenet, 60), ('CIFAR10-quick', cifar, 24)):
        for label, flags in (('1 rank, 1 worker', ['--np', '1']),
                             ('1 rank, 2 virtual workers', ['--np', '1', '--virtual-workers', '2']),
                             ('2 ranks, 2 workers', ['--np', '2'])):
            log, _ = run(job(tmp, '%s_%s' % (name, label.replace(' ', '_').replace(',', '')), text, iters, iters // 6), flags)
            print('%-14s %-26s %8.1f ms/iteration' % (name, label, iteration_ms(log)))
    print('\n== Agree and allreduce cost (2 ranks, LeNet-sized float64 buffer) ==')
    from pycaffe_ft.parallel.launcher import mpiexec_command
    cmd = mpiexec_command(2, [], ft=True)[:-3] + [sys.executable, os.path.join(ROOT, 'tools', 'bench_agree.py')]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=dict(os.environ, OPENBLAS_NUM_THREADS='1'))
    print(out.stdout.strip() or out.stderr[-1000:])
    print('\n== detect-to-resume recovery time (SIGKILL of one rank, LeNet) ==')
    for n in (4, 8):
        times = []
        for k in range(5):
            victim = 1 + k % (n - 1)
            stamp = os.path.join(tmp, 'stamp_%d_%d' % (n, k))
            d = job(tmp, 'rec_%d_%d' % (n, k), lenet, 8, 100)
            log, _ = run(d, ['--np', str(n), '--inject-fault', '%d:4:allreduce' % victim],
                         {'PYCAFFE_FT_FAULT_STAMP': stamp})
            killed = float(open(stamp).read().split()[-1])
            lines = [l for l in log.splitlines() if 'Recovered from the failure' in l]
            # glog lines carry wall-clock time of day; the stamp is epoch seconds
            day = time.localtime(killed)
            kill_tod = day.tm_hour * 3600 + day.tm_min * 60 + day.tm_sec + (killed % 1)
            resumed = max(glog_time(l) for l in lines)
            inside = statistics.median(float(re.search(r'total ([\d.]+)s', l).group(1)) for l in lines)
            times.append((resumed - kill_tod, inside))
        print('%d ranks: kill -> all survivors resumed: median %.3f s (runs: %s); recovery inside the '
              'survivors (shrink+agree+orphan recompute): median %.3f s' % (
                  n, statistics.median(t[0] for t in times), ', '.join('%.3f' % t[0] for t in times),
                  statistics.median(t[1] for t in times)))


if __name__ == '__main__':
    main()
