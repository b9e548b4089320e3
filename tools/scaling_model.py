"""A scaling model of data-parallel training, fed with what this machine measures.

Measured here: each net's solver step at the per-rank batch (one thread: forward, backward,
update and the loop's own Python), its per-layer backward times (when each bucket is ready),
how much slower the slower of two processes computing at once runs than one alone (the
contention factor: the shared memory system, and cores of a shared host that do not run at one
speed, since ranks in step go at the slower one's pace), the Data layer's synchronous read time
(LeNet, CIFAR), and the float32 allreduce cost between two ranks (latency alpha and bandwidth
beta fitted to t = 2 alpha + S / beta over message sizes; loopback TCP here).

Predicted per iteration, for P ranks:
  compute  = solver step x contention (P > 1) + data read (P > 1: ranks read synchronously; one
             rank prefetches on a spare core); with overlap the step is timed as the trainer
             runs a net that reduces in buckets (5x5 convolutions without Winograd)
  flat     = ring allreduce over P ranks: 2 (P - 1) alpha + 2 (P - 1) / P x S / beta
  two-level= node: 2 (ceil(log2 R) alpha_node + S / beta_node) (reduce to the leader, broadcast
             back), plus a ring over the N = P / R leaders with the inter-node alpha and beta
  overlap  = buckets (as the trainer cuts them) start when backward has passed their last layer
             and go one after another; only what runs past the end of backward is exposed.
  oversubscribed (P ranks on C < P cores, as 4 ranks on this 2-core machine): compute and
             read x the factor measured with P processes stepping at once (the slowest of
             them against one alone: about P / C, plus what sharing a core's caches and the
             switches add), and the ring with alpha and beta fitted to a P-rank allreduce
             here (a rank's partner may be waiting for a core when its message comes);
             overlap hides nothing there (no idle core to move the buckets).
Efficiency = compute at one rank / iteration time; speedup = P x efficiency.

Cluster figures are assumptions given on the command line (defaults: 32 ranks per node,
inter-node 25 Gb/s with 5 us latency; intra-node as measured here over loopback TCP unless
--node-gbps/--node-latency-us say otherwise: a shared-memory transport beats loopback TCP, so
the default node level is pessimistic). A contention factor measured below 1 (noise: two
processes cannot compute faster than one) counts as 1.

Usage: python tools/scaling_model.py [--measured bench_scaling.json] [--out docs/scaling-model.png]
  --measured: the JSON of tools/bench_scaling.py --json, to print predicted against measured.
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
sys.path.insert(0, ROOT)

NETS = {'LeNet': ('lenet', 64), 'CIFAR10-quick': ('cifar10_quick', 100), 'AlexNet': ('alexnet', 16),
        'GoogLeNet': ('googlenet', 16)}
SIZES = [1 << k for k in (10, 13, 16, 18, 20, 22)]  # float32 elements


def mpi_probe():
    """Under mpiexec -n P: time float32 Allreduce for SIZES; rank 0 prints JSON."""
    from mpi4py import MPI
    comm = MPI.COMM_WORLD
    out = {}
    for n in SIZES:
        buf, res = np.ones(n, np.float32), np.empty(n, np.float32)
        reps = max(5, min(200, (1 << 24) // n))
        comm.Barrier()
        times = []
        for _ in range(reps):
            t0 = time.perf_counter()
            comm.Allreduce(buf, res, op=MPI.SUM)
            times.append(time.perf_counter() - t0)
        out[n] = statistics.median(times)
    if comm.Get_rank() == 0:
        print(json.dumps(out))


def measure_allreduce(ranks=2):
    """(alpha seconds, beta bytes/s, {size: seconds}) from a run of ``ranks`` ranks on this
    machine, fitted to the ring, t = 2 (P - 1) alpha + 2 (P - 1) / P x S / beta (at P = 2:
    2 alpha + S / beta). With more ranks than cores the fit takes in what time-sharing adds
    (a rank's partner may wait for a core before it answers)."""
    from pycaffe_ft.parallel.launcher import mpiexec_command
    cmd = mpiexec_command(ranks, [], ft=True)[:-3] + [sys.executable, os.path.abspath(__file__), '--mpi-probe']
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, OPENBLAS_NUM_THREADS='1'))
    line = [l for l in proc.stdout.splitlines() if l.startswith('{')]
    if not line:
        raise SystemExit('allreduce probe failed: %s' % proc.stderr[-2000:])
    times = {int(k): v for k, v in json.loads(line[-1]).items()}
    small, large = min(times), max(times)
    steps = 2 * (ranks - 1)
    alpha = times[small] / steps  # a 4 KB message costs its latency
    beta = steps / ranks * large * 4 / max(times[large] - steps * alpha, 1e-9)
    return alpha, beta, times


def _small(key, batch):
    """Whether a pass of this net is short enough to time many (LeNet, CIFAR10-quick below ~4M inputs)."""
    return batch * 3 * 32 * 32 < 4e6 and key in ('lenet', 'cifar10_quick')


def measure_step(key, batch, buckets=False):
    """Median solver step seconds at one thread (forward, backward, update, the loop's Python);
    with ``buckets``, of the net as the trainer sets it up when it reduces in buckets."""
    import bench_train
    import pycaffe_ft as caffe
    from pycaffe_ft.layers.convolution import ConvolutionLayer
    caffe.set_num_threads(1)
    ConvolutionLayer.keep_5x5_rounding = buckets  # what the trainer sets on each layer in that mode
    try:
        return bench_train.child_pycaffe(key, batch, 30 if _small(key, batch) else 3, False)['ms'] / 1e3
    finally:
        ConvolutionLayer.keep_5x5_rounding = False


def measure_compute(key, batch):
    """(solver step seconds, the same in buckets, gradient floats, [(bytes, backward seconds left
    when the bucket is ready)], backward seconds) at one thread."""
    import bench_nets
    import pycaffe_ft as caffe
    from pycaffe_ft.bench import time_net
    from pycaffe_ft.parallel.buckets import bucket_elements, plan_buckets
    caffe.set_num_threads(1)
    proto, _ = bench_nets.build(key, batch)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, 'net.prototxt')
        with open(path, 'w') as f:
            f.write(str(proto))
        times = time_net(path, iterations=20 if _small(key, batch) else 3, out=lambda *a: None, streams=False)
        net = caffe.Net(path, caffe.TRAIN)
    backward = np.array(times['layer_backward_ms']) / 1e3
    buckets = [((hi - lo) * 4, float(backward[:ready].sum())) for lo, hi, ready in plan_buckets(net, bucket_elements(net.param_diff.size))]
    return (measure_step(key, batch), measure_step(key, batch, buckets=True), net.param_diff.size, buckets,
            times['backward_ms'] / 1e3)


def measure_contention(key, batch, rounds=3, procs=2):
    """Solver step time of the slowest of ``procs`` processes stepping at once / one alone
    (this machine): the median over ``rounds`` of (alone, together) pairs, so that drift of a
    shared machine cancels. The processes time only the step (nothing else of
    :func:`measure_compute` that one of them could still be running while the others step).
    With more processes than cores this is the time-shared factor itself (about procs / cores,
    and what sharing a core's caches and the switches between processes add)."""
    code = ('import sys; sys.path.insert(0, %r); sys.path.insert(0, %r); import scaling_model as m; '
            'print(m.measure_step(%r, %d))' % (HERE, ROOT, key, batch))
    env = dict(os.environ, PYCAFFE_FT_NUM_THREADS='1', OPENBLAS_NUM_THREADS='1')
    ratios = []
    for _ in range(rounds):
        alone = float(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=env).stdout)
        running = [subprocess.Popen([sys.executable, '-c', code], stdout=subprocess.PIPE, text=True, env=env)
                   for _ in range(procs)]
        ratios.append(max(float(p.communicate()[0]) for p in running) / alone)
    return statistics.median(ratios)


def measure_data_read(name, batch):
    """Seconds to read one batch synchronously from the Data layer (LeNet, CIFAR) or 0."""
    if name not in ('LeNet', 'CIFAR10-quick'):
        return 0.0
    import bench_parallel
    import pycaffe_ft as caffe
    tmp = tempfile.mkdtemp()
    bench_parallel.build_data(tmp)
    source = os.path.join(tmp, 'mnist_train_lmdb' if name == 'LeNet' else 'cifar_synthetic_lmdb')
    net = caffe.Net('layer { name: "d" type: "Data" top: "data" top: "label" transform_param { scale: 0.004 } '
                    'data_param { source: "%s" batch_size: %d backend: LMDB } }' % (source, batch), caffe.TRAIN)
    net.layers[0].synchronous = True
    net.forward()
    t0 = time.perf_counter()
    for _ in range(20):
        net.forward()
    return (time.perf_counter() - t0) / 20


def ring(p, size, alpha, beta):
    return 0.0 if p <= 1 else 2 * (p - 1) * alpha + 2 * (p - 1) / p * size / beta


def reduction_time(p, size, a):
    """Seconds to reduce ``size`` bytes over p ranks: flat ring, or two levels (a['R'] per node)."""
    if a['hierarchy'] == 'flat' or p <= a['R']:
        if p <= a['R']:
            return ring(p, size, a['alpha_node'], a['beta_node'])
        return ring(p, size, a['alpha_net'], a['beta_net'])
    nodes = p / a['R']
    node_level = 2 * (math.ceil(math.log2(a['R'])) * a['alpha_node'] + size / a['beta_node'])
    return node_level + ring(nodes, size, a['alpha_net'], a['beta_net'])


def exposed(p, net, a, overlap):
    if p <= 1:
        return 0.0
    if not overlap:
        return sum(reduction_time(p, b, a) for b, _ in net['buckets'])
    clock = 0.0
    for size, left in net['buckets']:  # left: backward seconds still to run when it is ready
        clock = max(clock, net['backward'] - left) + reduction_time(p, size, a)
    return max(0.0, clock - net['backward'])


def iteration(p, net, a, overlap, cores=None):
    """Predicted seconds per iteration at p ranks. On ``cores`` < p cores (oversubscribed),
    compute and read are slowed by the factor measured with p processes stepping at once
    (net['shared'][p]), ``a`` should hold the allreduce fitted at p ranks here, and overlap
    hides nothing: moving a bucket (TCP copies, MPI progress) takes CPU time that every core is
    already busy with, so the whole reduction counts."""
    step = net['compute_buckets' if overlap and p > 1 else 'compute']
    read = net['data'] if p > 1 else 0.0
    if cores and p > cores:  # no idle core to move a bucket while the others compute
        return (step + read) * net['shared'][p] + exposed(p, net, a, False)
    compute = step * (net['contention'] if p > 1 else 1.0) + read
    return compute + exposed(p, net, a, overlap)


def main():
    if '--mpi-probe' in sys.argv:
        return mpi_probe()
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--nets', default=','.join(NETS))
    ap.add_argument('--ranks-per-node', type=int, default=32)
    ap.add_argument('--net-gbps', type=float, default=25.0, help='inter-node bandwidth, Gb/s (assumed)')
    ap.add_argument('--net-latency-us', type=float, default=5.0, help='inter-node latency, us (assumed)')
    ap.add_argument('--node-gbps', type=float, default=None,
                    help='intra-node bandwidth, Gb/s (default: measured here over loopback TCP)')
    ap.add_argument('--node-latency-us', type=float, default=None, help='intra-node latency, us (default: measured)')
    ap.add_argument('--measured', help='tools/bench_scaling.py --json output, to validate against')
    ap.add_argument('--out', default=os.path.join(ROOT, 'docs', 'scaling-model.png'))
    args = ap.parse_args()
    alpha, beta, probe = measure_allreduce()
    print('allreduce here (2 ranks, loopback TCP): alpha %.1f us, beta %.2f GB/s (sizes %s floats)'
          % (alpha * 1e6, beta / 1e9, ', '.join(str(k) for k in sorted(probe))))
    a = dict(alpha_node=alpha if args.node_latency_us is None else args.node_latency_us * 1e-6,
             beta_node=beta if args.node_gbps is None else args.node_gbps * 1e9 / 8,
             alpha_net=args.net_latency_us * 1e-6, beta_net=args.net_gbps * 1e9 / 8, R=args.ranks_per_node)
    measured = json.load(open(args.measured)) if args.measured else {}
    # more ranks than this machine's 2 cores, as measured: their time-shared compute and
    # allreduce are measured here at that count too
    over = sorted({4 for rows in measured.values() for label in rows if label.startswith('4 ranks')})
    fitted = {p: measure_allreduce(p)[:2] for p in over}
    for p, (alpha_p, beta_p) in fitted.items():
        print('allreduce here (%d ranks on 2 cores, oversubscribed): alpha %.1f us, beta %.2f GB/s' % (p, alpha_p * 1e6, beta_p / 1e9))
    nets = {}
    for name in args.nets.split(','):
        key, batch = NETS[name]
        compute, compute_buckets, floats, buckets, backward = measure_compute(key, batch)
        # two processes cannot compute faster than one: a measured factor below 1 is noise
        nets[name] = dict(compute=compute, compute_buckets=compute_buckets, size=floats * 4, buckets=buckets, backward=backward,
                          contention=max(1.0, measure_contention(key, batch)), data=measure_data_read(name, batch),
                          shared={p: measure_contention(key, batch, procs=p) for p in over})
        n = nets[name]
        print('%-14s b%-3d compute %.1f ms (in buckets %.1f; backward %.1f), gradients %.2f MB in %d buckets, contention x%.2f, '
              'data read %.1f ms' % (name, batch, compute * 1e3, compute_buckets * 1e3, backward * 1e3, n['size'] / 1e6, len(buckets),
                                     n['contention'], n['data'] * 1e3) +
              ''.join(', %d processes at once x%.2f' % kv for kv in n['shared'].items()), flush=True)
    here = dict(a, R=2, hierarchy='flat', alpha_net=alpha, beta_net=beta)
    if measured:
        print('\n### Predicted against measured on this machine (2 cores)\n')
        print('| net | configuration | predicted ms/iter | measured ms/iter | error |')
        print('|---|---|---|---|---|')
        for name, rows in measured.items():
            if name not in nets:
                continue
            # the sum in worker order (reduce-scatter + all-gather after backward) is modelled as
            # the blocking ring it moves as much as
            for label, p, overlap in (('1 rank, 1 thread', 1, True), ('2 ranks, overlapped buckets', 2, True),
                                      ('2 ranks, worker order (default)', 2, False),
                                      ('4 ranks (oversubscribed), overlapped buckets', 4, True),
                                      ('4 ranks (oversubscribed), worker order (default)', 4, False)):
                if label not in rows:  # not measured (bench_scaling.py --only ...)
                    continue
                got = statistics.median(r[0] for r in rows[label])
                fit = dict(here, alpha_node=fitted[p][0], beta_node=fitted[p][1], alpha_net=fitted[p][0],
                           beta_net=fitted[p][1]) if p in fitted else here
                want = iteration(p, nets[name], fit, overlap, cores=2) * 1e3
                print('| %s | %s | %.1f | %.1f | %+.0f%% |' % (name, label, want, got, 100 * (want - got) / got))
    print('\n### Predicted for a cluster (%d ranks per node, inter-node %.0f Gb/s, %.0f us; intra-node %.1f Gb/s, '
          '%.0f us)\n' % (args.ranks_per_node, args.net_gbps, args.net_latency_us, a['beta_node'] * 8 / 1e9,
                          a['alpha_node'] * 1e6))
    ranks = [8, 16, 32, 64, 128, 256, 512, 1024]
    modes = [('flat', False), ('flat', True), ('two-level', False), ('two-level', True)]
    print('| net | reduction | ' + ' | '.join('P=%d' % p for p in ranks) + ' |')
    print('|---|---|' + '---|' * len(ranks))
    curves = {}
    for name, n in nets.items():
        for hierarchy, overlap in modes:
            cfg = dict(a, hierarchy=hierarchy)
            eff = [n['compute'] / iteration(p, n, cfg, overlap) for p in ranks]
            curves[(name, hierarchy, overlap)] = [p * e for p, e in zip(ranks, eff)]
            print('| %s | %s%s | ' % (name, hierarchy, ', overlap' if overlap else '') +
                  ' | '.join('%.0f%%' % (100 * e) for e in eff) + ' |')
    print('\n(efficiency = one rank\'s compute time / predicted iteration time; speedup = P x efficiency)')
    print('The issue cites HSGD as reporting ~20x faster training at scale from two-level reduction '
          'with contiguous I/O and LARS; the model\'s two-level/flat speedup ratios at P=1024: ' +
          ', '.join('%s %.1fx' % (name, curves[(name, 'two-level', True)][-1] / curves[(name, 'flat', True)][-1])
                    for name in nets))
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('matplotlib missing: no chart')
        return
    fig, axes = plt.subplots(1, len(nets), figsize=(4 * len(nets), 3.6), squeeze=False)
    for ax, name in zip(axes[0], nets):
        for hierarchy, overlap in modes:
            ax.plot(ranks, curves[(name, hierarchy, overlap)], marker='o', markersize=3,
                    label='%s%s' % (hierarchy, ' + overlap' if overlap else ''))
        ax.plot(ranks, ranks, color='grey', linestyle=':', label='ideal')
        ax.set_xscale('log', base=2)
        ax.set_yscale('log', base=2)
        ax.set_title(name)
        ax.set_xlabel('ranks')
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel('predicted speedup over one rank')
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=110)
    print('wrote', args.out)


if __name__ == '__main__':
    main()
