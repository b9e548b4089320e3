"""A kill campaign: seeded random failure schedules against a LeNet job, compared with the
failure-free run.

Each schedule kills 1 to N-1 ranks (any rank, the root included) at random iterations and
phases (forward, backward, allreduce, allgather (between the two exchanges of the sum in
worker order), the Agree after a collective, test, snapshot write, the weight broadcast), or
kills every rank at once and lets the launcher restart the job from its newest snapshot
(``--resume auto --max-restarts 1``). The default reduction (the sum in worker order) and
``--deterministic`` must both give a deviation of 0; ``--regrow`` trains with re-grow and also
kills while replacements are spawned or join (phase regrow) and replacements after they joined. A run *finishes* when
``pycaffe-ft train`` exits 0 and the final snapshot is there. Prints a table: schedules,
finished, the largest weight deviation from the failure-free run (relative to max|w|), ledgers
equal, recovery time (median, worst), re-grows and how long training waited for them.

    python tools/kill_campaign.py [--runs 30] [--np 4] [--seed 0] [--iterations 30] [--regrow]
"""
import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SOLVER = '''net: "net.prototxt"
test_iter: 4
test_interval: 10
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "inv"
gamma: 0.0001
power: 0.75
display: 5
max_iter: %d
snapshot: 10
snapshot_prefix: "lenet"
random_seed: 3
'''


def make_job(path, mnist, iterations):
    os.makedirs(path, exist_ok=True)
    net = open(os.path.join(ROOT, 'models', 'lenet', 'lenet_train_test.prototxt')).read()
    net = net.replace('data/mnist/mnist_train_lmdb', os.path.join(mnist, 'train_lmdb')) \
             .replace('data/mnist/mnist_test_lmdb', os.path.join(mnist, 'test_lmdb'))
    open(os.path.join(path, 'net.prototxt'), 'w').write(net)
    open(os.path.join(path, 'solver.prototxt'), 'w').write(SOLVER % iterations)
    return path


def prepare_mnist(directory):
    from pycaffe_ft.data.convert import convert_mnist
    os.makedirs(directory, exist_ok=True)
    src = os.path.join(ROOT, 'data', 'mnist')
    convert_mnist(os.path.join(src, 'train-images-idx3-ubyte'), os.path.join(src, 'train-labels-idx1-ubyte'),
                  os.path.join(directory, 'train_lmdb'))
    convert_mnist(os.path.join(src, 't10k-images-idx3-ubyte'), os.path.join(src, 't10k-labels-idx1-ubyte'),
                  os.path.join(directory, 'test_lmdb'))
    return directory


def schedule(rng, ranks, iterations, regrow=False):
    """(description, extra command-line flags) of one random failure schedule; with ``regrow``,
    kills while replacements are spawned or join (phase regrow) and of replacements themselves
    (ranks from ``ranks`` on) too."""
    if regrow:
        flags, parts = ['--regrow'], []
        for rank in rng.sample(range(ranks), rng.randint(1, ranks - 1)):
            phase = rng.choice(['forward', 'backward', 'allreduce', 'allgather', 'agree', 'regrow'])
            parts.append('%d:%d:%s' % (rank, rng.randrange(1, iterations // 2), phase))
        if rng.random() < 0.5:  # the first replacement, once it has joined
            parts.append('%d:%d:%s' % (ranks, rng.randrange(iterations // 2, iterations), rng.choice(['forward', 'allreduce'])))
        return ' '.join(parts), flags + [arg for spec in parts for arg in ('--inject-fault', spec)]
    if rng.random() < 0.15:  # the whole job dies: every rank at the same point
        at = rng.randrange(11, iterations)
        flags = ['--resume', 'auto', '--max-restarts', '1']
        for rank in range(ranks):
            flags += ['--inject-fault', '%d:%d' % (rank, at)]
        return 'all %d ranks at %d, restarted' % (ranks, at), flags
    victims = rng.sample(range(ranks), rng.randint(1, ranks - 1))
    flags, parts = [], []
    for rank in victims:
        phase = rng.choice(['forward', 'backward', 'allreduce', 'allgather', 'agree', 'test', 'snapshot', 'broadcast'])
        if phase == 'broadcast':
            at = 0
        elif phase in ('test', 'snapshot'):
            at = rng.choice([k for k in range(10, iterations, 10)])
        else:
            at = rng.randrange(1, iterations)
        spec = '%d:%d:%s' % (rank, at, phase)
        flags += ['--inject-fault', spec]
        parts.append(spec)
    return ' '.join(parts), flags


def run(job, ranks, flags, timeout=600):
    env = dict(os.environ, GLOG_minloglevel='0')
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt', '--np',
                           str(ranks), '--ledger', 'ledger.jsonl'] + flags, cwd=job, env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stderr


def weights(job, iterations):
    import pycaffe_ft as caffe
    net = caffe.Net(os.path.join(job, 'net.prototxt'), os.path.join(job, 'lenet_iter_%d.caffemodel' % iterations),
                    caffe.TEST)
    return {(name, i): b.data.copy() for name, blobs in net.params.items() for i, b in enumerate(blobs)}


def ledger(job):
    """Each iteration's records, once (a restarted job recomputes the iterations after its snapshot)."""
    entries = {}
    with open(os.path.join(job, 'ledger.jsonl')) as f:
        for line in f:
            entry = json.loads(line)
            entries[(entry['iter'], entry['worker'])] = entry['records']
    return entries


def campaign(runs, ranks, seed, iterations, log=print, deterministic=False, regrow=False):
    work = tempfile.mkdtemp(prefix='kill-campaign-')
    mnist = prepare_mnist(os.path.join(work, 'mnist'))
    ok = make_job(os.path.join(work, 'ok'), mnist, iterations)
    mode = ['--deterministic'] if deterministic else []
    code, err = run(ok, ranks, mode)
    if code != 0:
        raise RuntimeError('the failure-free run failed:\n' + err[-3000:])
    reference, reference_ledger = weights(ok, iterations), ledger(ok)
    scale = max(float(np.abs(w).max()) for w in reference.values())
    rng = random.Random(seed)
    rows = []
    for k in range(runs):
        what, flags = schedule(rng, ranks, iterations, regrow)
        job = make_job(os.path.join(work, 'run%d' % k), mnist, iterations)
        code, err = run(job, ranks, flags + mode)
        final = os.path.exists(os.path.join(job, 'lenet_iter_%d.solverstate' % iterations))
        finished = code == 0 and final
        deviation = max(float(np.abs(weights(job, iterations)[key] - w).max()) for key, w in reference.items()) \
            / scale if finished else float('nan')
        recovery = [float(x) for x in re.findall(r'total recovery time ([0-9.]+)s', err)]
        waits = [float(x) for x in re.findall(r'Re-grew to \d+ ranks .*?training waited ([0-9.]+)s', err)]
        rows.append({'schedule': what, 'finished': finished, 'deviation': deviation,
                     'ledger_equal': finished and ledger(job) == reference_ledger,
                     'recovery_s': max(recovery) if recovery else 0.0, 'exit': code, 'regrow_s': waits})
        log('%-60s finished=%s deviation=%.2e ledger=%s recovery=%.3fs re-grows=%s' % (
            what[:60], finished, deviation, rows[-1]['ledger_equal'], rows[-1]['recovery_s'],
            ' '.join('%.3fs' % w for w in waits) or '-'))
        if not finished:
            log(err[-2000:])
    return rows


def table(rows, ranks, deterministic=False):
    finished = [r for r in rows if r['finished']]
    recoveries = [r['recovery_s'] for r in finished if r['recovery_s'] > 0]
    waits = [w for r in finished for w in r.get('regrow_s', [])]
    return '\n'.join([
        '| mode | ranks | schedules | finished | max weight deviation / max\\|w\\| | ledgers equal | recovery median / worst '
        '| re-grows: count, wait median / worst |',
        '|---|---|---|---|---|---|---|---|',
        '| %s | %d | %d | %d | %.2e | %d of %d | %.3f s / %.3f s | %d, %.3f s / %.3f s |' % (
            'deterministic' if deterministic else 'default', ranks, len(rows), len(finished), max([r['deviation'] for r in finished] or [float('nan')]),
            sum(r['ledger_equal'] for r in finished), len(finished),
            statistics.median(recoveries) if recoveries else 0.0, max(recoveries or [0.0]), len(waits),
            statistics.median(waits) if waits else 0.0, max(waits or [0.0]))])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--runs', type=int, default=30)
    ap.add_argument('--np', type=int, default=4)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--iterations', type=int, default=30)
    ap.add_argument('--deterministic', action='store_true', help='train with --deterministic (expect 0 deviation)')
    ap.add_argument('--regrow', action='store_true', help='train with --regrow: schedules kill members and '
                                                          'replacements while they are spawned, join and train')
    args = ap.parse_args(argv)
    rows = campaign(args.runs, args.np, args.seed, args.iterations, deterministic=args.deterministic,
                    regrow=args.regrow)
    print(table(rows, args.np, args.deterministic))
    limit = 0.0 if args.deterministic else 1e-5
    bad = [r for r in rows if not r['finished'] or r['deviation'] > limit or not r['ledger_equal']]
    return 1 if bad else 0


if __name__ == '__main__':
    sys.exit(main())
