"""Data-parallel throughput on this machine: one rank at one thread against 2 ranks (one thread
each; the default sum in worker order and overlapped buckets), one rank at two threads, and 4
ranks (oversubscribed on 2 cores: worker order, overlapped and two-level buckets), for LeNet
(shipped MNIST) and CIFAR10-quick (a synthetic LMDB).

Configurations run interleaved (A B C ... A B C ...) for --rounds rounds so that machine drift
cancels; each run's ms/iteration is the mean over its display intervals after the first (start
up and JIT excluded); the table gives medians, images/s (global batch = ranks x prototxt batch),
the speedup over one rank at one thread, the communication exposed per iteration (from the last
rank's end of backward to the agreed gradient sum) and the time a rank waited after its own
backward (which adds the other ranks' lateness), both from the run's summary line.

One rank at one thread also runs pinned to each CPU (``os.sched_setaffinity``): a shared host's
cores need not run at one speed, and two ranks in step go at the pace of the slower core, so the
speedup two ranks can reach here before any communication is 2 x (1 rank, 1 thread) / (the
slower pinned run); the table prints that ceiling beside the measured speedup.

Usage: python tools/bench_scaling.py [--rounds 3] [--nets LeNet,CIFAR10-quick] [--json out.json]
"""
import argparse
import json
import os
import re
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_parallel  # noqa: E402  (the LMDBs, the train nets and one run)

ITERS = {'LeNet': 300, 'CIFAR10-quick': 60}
BATCH = {'LeNet': 64, 'CIFAR10-quick': 100}
ONE = {'PYCAFFE_FT_NUM_THREADS': '1'}
CONFIGS = [  # label, ranks (global batch multiple), flags, environment
    ('1 rank, 1 thread', 1, ['--np', '1'], ONE),
    ('1 rank, 1 thread, on CPU 0', 1, ['--np', '1'], ONE),
    ('1 rank, 1 thread, on CPU 1', 1, ['--np', '1'], ONE),
    ('1 rank, 2 threads', 1, ['--np', '1'], {'PYCAFFE_FT_NUM_THREADS': '2'}),
    ('2 ranks, worker order (default)', 2, ['--np', '2'], ONE),
    ('2 ranks, overlapped buckets', 2, ['--np', '2', '--overlap', 'on'], ONE),
    ('4 ranks (oversubscribed), worker order (default)', 4, ['--np', '4'], ONE),
    ('4 ranks (oversubscribed), overlapped buckets', 4, ['--np', '4', '--overlap', 'on'], ONE),
    ('4 ranks (oversubscribed), two levels K=2', 4, ['--np', '4', '--ranks-per-node', '2'], ONE),
]


def pinned_cpu(label):
    """The CPU a configuration is pinned to, or None."""
    m = re.search(r'on CPU (\d+)$', label)
    return int(m.group(1)) if m else None


def exposed_ms(log):
    """(exposed: last rank's end of backward -> agreed sum, waited after backward incl. the
    other ranks' lateness) ms per iteration, from the run's summary line."""
    m = re.search(r'([\d.]+) ms per iteration exposed .*?; ([\d.]+) ms per iteration spent waiting', log)
    return (float(m.group(1)), float(m.group(2))) if m else (float('nan'), float('nan'))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--nets', default='LeNet,CIFAR10-quick')
    ap.add_argument('--json', help='also write the raw measurements here')
    ap.add_argument('--only', action='append', help='a configuration label to run (repeatable; default: all)')
    args = ap.parse_args()
    tmp = tempfile.mkdtemp()
    bench_parallel.build_data(tmp)
    nets = bench_parallel.train_nets(tmp)
    raw = {}
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    for name in args.nets.split(','):
        for r in range(args.rounds):
            for label, ranks, flags, env in configs:
                d = bench_parallel.job(tmp, '%s_%d' % (name, CONFIGS.index((label, ranks, flags, env))), nets[name],
                                       ITERS[name], ITERS[name] // 6)
                cpu = pinned_cpu(label)
                if cpu is not None and cpu not in os.sched_getaffinity(0):
                    continue
                log, _ = bench_parallel.run(d, flags, env, None if cpu is None else {cpu})
                raw.setdefault(name, {}).setdefault(label, []).append(
                    (bench_parallel.iteration_ms(log),) + exposed_ms(log))
                print('round %d %-14s %-42s %7.1f ms/iter' % (r + 1, name, label, raw[name][label][-1][0]), flush=True)
    for name, rows in raw.items():
        base = statistics.median(r[0] for r in rows['1 rank, 1 thread']) if '1 rank, 1 thread' in rows else None
        print('\n### %s (batch %d per rank), median of %d interleaved rounds\n' % (name, BATCH[name], args.rounds))
        print('| configuration | ms/iter | images/s | speedup vs 1 rank 1 thread | exposed communication, '
              'ms/iter | waited after backward (incl. imbalance), ms/iter |')
        print('|---|---|---|---|---|---|')
        for label, ranks, _, _ in configs:
            if label not in rows:
                continue
            ms, exposed, wait = (statistics.median(r[k] for r in rows[label]) for k in range(3))
            speed = ranks * BATCH[name] / ms * 1e3
            print('| %s | %.1f | %.0f | %s | %s | %s |' % (
                label, ms, speed, '%.2fx' % (ranks * base / ms) if base else '-', '-' if exposed != exposed else '%.2f' % exposed,
                '-' if wait != wait else '%.2f' % wait))
        pinned = [statistics.median(r[0] for r in rows[label]) for label in rows if pinned_cpu(label) is not None]
        if base and len(pinned) >= 2:
            print('\nThe cores: 1 rank, 1 thread pinned to each CPU %s ms/iter; two ranks in step can reach '
                  'at most 2 x %.1f / %.1f = %.2fx here before any communication.'
                  % (' and '.join('%.1f' % t for t in pinned), base, max(pinned), 2 * base / max(pinned)))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(raw, f, indent=1)


if __name__ == '__main__':
    main()
