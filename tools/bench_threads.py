"""LeNet training speed on a quiet and on a shared machine (issue 15's thread-policy check).

Runs the README's LeNet solver for a few hundred iterations in fresh processes, in interleaved
rounds, under four conditions: quiet or with one busy process beside it (a pure-Python spin
loop, one core), and with the default thread policy or one thread
(``PYCAFFE_FT_NUM_THREADS=1``). Prints iter/s per condition (median of the rounds) and the
ratio of "busy, default" to "quiet, one thread", which the thread policy must keep >= 0.9.

    python tools/bench_threads.py [--iterations 400] [--rounds 3]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

CHILD = r'''
import json, sys, time
import pycaffe_ft as caffe
from pycaffe_ft.netspec_io import load_solver_param
from pycaffe_ft.intra_op import thread_policy
param = load_solver_param('models/lenet/lenet_solver.prototxt')
param.test_interval = 0
param.ClearField('test_iter')
param.snapshot = 0
param.display = 0
param.max_iter = int(sys.argv[1]) + 50
solver = caffe.SGDSolver(param)
solver.step(50)  # warm-up: compile, fill the prefetch queue
start = time.perf_counter()
solver.step(int(sys.argv[1]))
elapsed = time.perf_counter() - start
print(json.dumps({'iter_s': int(sys.argv[1]) / elapsed, 'policy': thread_policy()}))
'''


def run(iterations, one_thread):
    env = dict(os.environ, GLOG_minloglevel='2')
    for var in ('PYCAFFE_FT_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS',
                'NUMBA_NUM_THREADS'):
        env.pop(var, None)
    if one_thread:
        env['PYCAFFE_FT_NUM_THREADS'] = '1'
    out = subprocess.run([sys.executable, '-c', CHILD, str(iterations)], cwd=ROOT, env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--iterations', type=int, default=400)
    ap.add_argument('--rounds', type=int, default=3)
    args = ap.parse_args(argv)
    conditions = [('quiet', True), ('quiet', False), ('busy', False), ('busy', True)]
    results = {c: [] for c in conditions}
    policies = {}
    for _ in range(args.rounds):
        for busy, one in conditions:
            spinner = subprocess.Popen([sys.executable, '-c', 'while True: pass']) if busy == 'busy' else None
            try:
                if spinner:
                    time.sleep(0.5)
                r = run(args.iterations, one)
            finally:
                if spinner:
                    spinner.kill()
                    spinner.wait()
            results[(busy, one)].append(r['iter_s'])
            policies[(busy, one)] = r['policy']
    print('| machine | threads | iter/s (median of %d) | each round | policy at the end |' % args.rounds)
    print('|---|---|---|---|---|')
    med = {}
    for (busy, one), values in results.items():
        med[(busy, one)] = statistics.median(values)
        print('| %s | %s | %.1f | %s | %s |' % (busy, '1 (PYCAFFE_FT_NUM_THREADS=1)' if one else 'default',
                                                med[(busy, one)], ', '.join('%.1f' % v for v in values),
                                                policies[(busy, one)]))
    ratio = med[('busy', False)] / med[('quiet', True)]
    print('\nbusy machine, default policy / quiet machine, one thread: %.2f (target >= 0.90)' % ratio)
    return 0


if __name__ == '__main__':
    sys.exit(main())
