"""What a rank failure costs: pycaffe-ft's shrink-and-continue against checkpoint-restart.

The same LeNet job (--np 4) loses rank 2 at iteration K. pycaffe-ft: the survivors recover in
place; the cost is the recovery time its log reports (detect + shrink + recompute the orphaned
micro-batches), and with ``--regrow`` also the time training waited for the replacement. Checkpoint-restart (what MaTEx's SNAPSHOT_RESTART and TorchElastic do): the
whole job is stopped and started again from its last snapshot, here by this launcher's
``--resume auto --max-restarts 1`` with every rank killed at K; the cost is the time from the
kill until the restarted job is back at iteration K (start-up, plus the iterations since the
snapshot, computed again), for snapshot intervals of 100 and 1,000 iterations.

    python tools/bench_recovery.py [--kill-at 250] [--chart docs/recovery-vs-restart.png]
"""
import argparse
import datetime
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kill_campaign  # noqa: E402  (the LeNet job and MNIST databases)

STAMP = re.compile(r'^[IWEF](\d{4}) (\d\d:\d\d:\d\d\.\d+)')


def _when(line):
    m = STAMP.match(line)
    if not m:
        return None
    clock = datetime.datetime.strptime(m.group(2), '%H:%M:%S.%f')
    return clock.hour * 3600 + clock.minute * 60 + clock.second + clock.microsecond / 1e6


def _job(work, mnist, name, iterations, snapshot):
    job = kill_campaign.make_job(os.path.join(work, name), mnist, iterations)
    path = os.path.join(job, 'solver.prototxt')
    text = open(path).read().replace('snapshot: 10', 'snapshot: %d' % snapshot).replace('test_interval: 10',
                                                                                         'test_interval: 1000')
    open(path, 'w').write(text.replace('display: 5', 'display: 10'))
    return job


def _run(job, flags, stamp):
    env = dict(os.environ, GLOG_minloglevel='0', PYCAFFE_FT_FAULT_STAMP=stamp)
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt',
                           '--np', '4'] + flags, cwd=job, env=env, capture_output=True, text=True, timeout=1800)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    with open(stamp) as f:
        killed = float(f.read().split()[3])
    return proc.stderr, killed


def shrink_cost(work, mnist, kill_at, iterations, regrow=False):
    """The recovery time the log reports; with ``regrow``, plus the time training waited for
    the replacement (spawn, then state and commit)."""
    job = _job(work, mnist, 'regrow' if regrow else 'shrink', iterations, 100)
    log, _ = _run(job, ['--inject-fault', '2:%d:allreduce' % kill_at] + (['--regrow'] if regrow else []),
                  os.path.join(job, 'stamp'))
    waited = [float(x) for x in re.findall(r'Re-grew to \d+ ranks .*?training waited ([0-9.]+)s', log)]
    if regrow and not waited:
        raise RuntimeError('no re-grow in the log:\n' + log[-3000:])
    return max(float(x) for x in re.findall(r'total recovery time ([0-9.]+)s', log)) + sum(waited)


def restart_cost(work, mnist, kill_at, iterations, snapshot):
    """Seconds from the kill until the restarted job logs iteration ``kill_at`` again."""
    job = _job(work, mnist, 'restart%d' % snapshot, iterations, snapshot)
    flags = ['--resume', 'auto', '--max-restarts', '1']
    for rank in range(4):
        flags += ['--inject-fault', '%d:%d:allreduce' % (rank, kill_at)]
    log, killed = _run(job, flags, os.path.join(job, 'stamp'))
    lines = log.splitlines()
    restart = next(i for i, line in enumerate(lines) if 'the job died as a whole' in line)
    back = next(line for line in lines[restart:] if re.search(r'\] Iteration %d \(' % kill_at, line))
    day = datetime.datetime.fromtimestamp(killed)
    killed_s = day.hour * 3600 + day.minute * 60 + day.second + day.microsecond / 1e6
    return _when(back) - killed_s


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--kill-at', type=int, default=250)
    ap.add_argument('--iterations', type=int, default=300)
    ap.add_argument('--chart', help='write a bar chart here (needs matplotlib)')
    args = ap.parse_args(argv)
    work = tempfile.mkdtemp(prefix='bench-recovery-')
    mnist = kill_campaign.prepare_mnist(os.path.join(work, 'mnist'))
    rows = [('pycaffe-ft: shrink and continue', shrink_cost(work, mnist, args.kill_at, args.iterations)),
            ('pycaffe-ft: shrink, then re-grow to 4', shrink_cost(work, mnist, args.kill_at, args.iterations, True))]
    for snapshot in (100, 1000):
        rows.append(('checkpoint-restart, snapshot every %d' % snapshot,
                     restart_cost(work, mnist, args.kill_at, args.iterations, snapshot)))
    print('LeNet, --np 4 on this machine, rank(s) lost at iteration %d\n' % args.kill_at)
    print('| approach | seconds lost (kill -> training back at iteration %d) |' % args.kill_at)
    print('|---|---|')
    for label, seconds in rows:
        print('| %s | %.2f |' % (label, seconds))
    if args.chart:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(8, 3))
        ax.barh([r[0] for r in rows][::-1], [r[1] for r in rows][::-1], color=['tab:orange', 'tab:orange', 'tab:blue', 'tab:blue'])
        for k, (_, seconds) in enumerate(rows[::-1]):
            ax.text(seconds, k, ' %.2f s' % seconds, va='center')
        ax.set_xlabel('seconds lost to one failure at iteration %d (LeNet, 4 ranks)' % args.kill_at)
        fig.tight_layout()
        fig.savefig(args.chart)
        print('\nWrote %s' % args.chart)
    return 0


if __name__ == '__main__':
    sys.exit(main())
