"""Training (and deploy) speed of pycaffe-ft beside PyTorch on the CPU, measured side by side.

    .venv/bin/pip install -e '.[bench]'          # PyTorch + matplotlib: benchmark only
    .venv/bin/python tools/bench_train.py [--nets lenet,cifar10_quick,alexnet] [--threads 1,2]
        [--rounds 3] [--deploy] [--chart bench.png]

Both engines run the same net (``tools/bench_nets.py``; PyTorch's model is translated from the
very prototxt and starts from pycaffe-ft's initial weights), the same batch, SGD with momentum and
Caffe's per-blob lr/decay multipliers, synthetic data through Input layers, T threads each, every
run in a fresh process. Runs are interleaved (ours, torch NCHW, torch channels_last, ours, ...)
so machine drift cancels in the per-round ratio; the table gives medians over rounds, images/s,
the ratio ours / torch's faster layout (below 1: pycaffe-ft is faster) and each process's peak
RSS. ``--deploy`` times forward passes (TEST phase) at batch 1 and 16 instead.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
TRAIN_BATCH = {'lenet': 64, 'cifar10_quick': 100, 'alexnet': 16, 'caffenet': 16, 'googlenet': 16,
               'resnet18': 16, 'resnet50': 8}
ITERATIONS = {'lenet': 40, 'cifar10_quick': 15, 'alexnet': 4, 'caffenet': 4, 'googlenet': 4,
              'resnet18': 4, 'resnet50': 3}
DEPLOY_NETS = 'lenet,caffenet,googlenet,resnet50'


def thread_env(threads):
    n = str(threads)
    return dict(os.environ, OMP_NUM_THREADS=n, OPENBLAS_NUM_THREADS=n, MKL_NUM_THREADS=n,
                NUMBA_NUM_THREADS=n, PYCAFFE_FT_NUM_THREADS=n)


# -- the child processes ----------------------------------------------------------------------
def _build(name, batch, deploy):
    sys.path.insert(0, HERE)
    import numpy as np
    import bench_nets
    import pycaffe_ft as caffe
    proto, solver = bench_nets.build(name, batch, deploy)
    rng = np.random.RandomState(0)
    data = rng.uniform(-1, 1, (batch,) + tuple(bench_nets.NETS[name][1])).astype(np.float32)
    label = rng.randint(0, solver['classes'], batch).astype(np.float32)
    return caffe, proto, solver, data, label


def median_ms(step, iterations, warmup=3):
    """Median ms of ``step()`` over ``iterations`` calls after ``warmup`` (and after the kernels
    compiling in the background meanwhile, if pycaffe_ft is loaded: their references are not
    what is timed)."""
    import time
    for _ in range(warmup):
        step()
    if 'pycaffe_ft' in sys.modules:
        from pycaffe_ft.kernels import tiered
        tiered.finish()
    times = []
    for _ in range(iterations):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return 1e3 * statistics.median(times)


def _peak_rss_mb():
    """This process's peak resident set (Linux VmHWM: ru_maxrss would include the parent's
    peak, which survives fork and exec)."""
    try:
        with open('/proc/self/status') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    import resource
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def sgd_solver(caffe, proto, solver):
    """An SGDSolver training ``proto`` with the benchmark's settings ``solver`` (fixed rate, no
    display, no snapshot), as :func:`_build` returns them."""
    sp = caffe.proto.caffe_pb2.SolverParameter(
        base_lr=solver['base_lr'], momentum=solver['momentum'], weight_decay=solver['weight_decay'],
        lr_policy='fixed', max_iter=10 ** 6, display=0, snapshot_after_train=False, random_seed=1)
    sp.net_param.CopyFrom(proto)
    return caffe.SGDSolver(sp)


def child_pycaffe(name, batch, iterations, deploy):
    caffe, proto, solver, data, label = _build(name, batch, deploy)
    if deploy:
        net = caffe.Net(proto, caffe.TEST)
        net.blobs['data'].data[...] = data
        ms = median_ms(net.forward, iterations)
    else:
        s = sgd_solver(caffe, proto, solver)
        s.net.blobs['data'].data[...] = data
        s.net.blobs['label'].data[...] = label
        ms = median_ms(lambda: s.step(1), iterations)
    return {'ms': ms, 'rss_mb': _peak_rss_mb()}


def export_graph(name, batch, deploy, path):
    """Write net ``name`` as a graph PyTorch can run without pycaffe-ft: ``path``.json (layers
    with their attributes, learnable blobs with lr/decay multipliers) and ``path``.npz (the
    initial weights), so the PyTorch process imports nothing of ours and its RSS is its own."""
    import numpy as np
    caffe, proto, solver, data, label = _build(name, batch, deploy)
    net = caffe.Net(proto, caffe.TEST if deploy else caffe.TRAIN)
    owner = {id(b): (ln, i) for ln, layer in zip(net._layer_names, net.layers) for i, b in enumerate(layer.blobs)}
    layers, weights = [], {}
    for ln, layer in zip(net._layer_names, net.layers):
        lp, attrs = layer.layer_param, {}
        if lp.type in ('Convolution', 'Pooling'):
            attrs.update(stride=list(layer.stride), pad=list(layer.pad))
        if lp.type == 'Convolution':
            attrs.update(dilation=list(layer.dilation), group=layer.group)
        elif lp.type == 'Pooling':
            p = lp.pooling_param
            attrs.update(max=p.pool == 0, global_pool=p.global_pooling,
                         kernel=list(layer.kernel) if not p.global_pooling else None)
        elif lp.type == 'ReLU':
            attrs['slope'] = lp.relu_param.negative_slope
        elif lp.type == 'LRN':
            p = lp.lrn_param
            attrs.update(size=p.local_size, alpha=p.alpha, beta=p.beta, k=p.k)
        elif lp.type == 'Dropout':
            attrs['ratio'] = lp.dropout_param.dropout_ratio
        elif lp.type == 'Concat':
            attrs['axis'] = lp.concat_param.axis
        elif lp.type == 'BatchNorm':
            attrs.update(eps=lp.batch_norm_param.eps, channels=layer.blobs[0].count,
                         momentum=1 - lp.batch_norm_param.moving_average_fraction)
        for i, blob in enumerate(layer.blobs):
            weights['%s/%d' % (ln, i)] = blob.data
        layers.append(dict(name=ln, type=lp.type, bottoms=net.bottom_names[ln], tops=net.top_names[ln],
                           blobs=len(layer.blobs), attrs=attrs))
    learnable = [dict(key='%s/%d' % owner[id(b)], lr_mult=lr, decay_mult=dm)
                 for b, lr, dm in zip(net.learnable_params, net.params_lr, net.params_weight_decay)]
    spec = dict(layers=layers, learnable=learnable, solver=solver, loss=net.outputs[0])
    with open(path + '.json', 'w') as f:
        json.dump(spec, f)
    np.savez(path + '.npz', data=data, label=label, **weights)


class TorchNet:
    """The exported graph as PyTorch operations (same layers, same initial weights)."""

    def __init__(self, spec, arrays, torch, learnable):
        self.torch, self.F, self.training = torch, torch.nn.functional, True
        self.params = {}
        for layer in spec['layers']:
            for i in range(layer['blobs']):
                key = '%s/%d' % (layer['name'], i)
                self.params[key] = torch.tensor(arrays[key], requires_grad=key in learnable)
        self.ops = [(self._op(layer), layer['bottoms'], layer['tops']) for layer in spec['layers']]

    def _op(self, layer):
        F, torch, kind, a = self.F, self.torch, layer['type'], layer['attrs']
        p = [self.params.get('%s/%d' % (layer['name'], i)) for i in range(layer['blobs'])]
        if kind in ('Input', 'Silence', 'Accuracy'):
            return None
        if kind == 'Split':
            return lambda xs: [xs[0]] * len(layer['tops'])
        if kind == 'Convolution':
            bias = p[1] if len(p) > 1 else None
            return lambda xs: [F.conv2d(xs[0], p[0], bias, a['stride'], a['pad'], a['dilation'], a['group'])]
        if kind == 'InnerProduct':
            bias = p[1] if len(p) > 1 else None
            return lambda xs: [F.linear(xs[0].flatten(1), p[0], bias)]
        if kind == 'Pooling':
            if a['global_pool']:
                return lambda xs: [F.adaptive_max_pool2d(xs[0], 1) if a['max'] else F.adaptive_avg_pool2d(xs[0], 1)]
            if a['max']:
                return lambda xs: [F.max_pool2d(xs[0], a['kernel'], a['stride'], a['pad'], ceil_mode=True)]
            return lambda xs: [F.avg_pool2d(xs[0], a['kernel'], a['stride'], a['pad'], ceil_mode=True,
                                            count_include_pad=True)]
        if kind == 'ReLU':
            return lambda xs: [F.relu(xs[0]) if a['slope'] == 0 else F.leaky_relu(xs[0], a['slope'])]
        if kind == 'LRN':
            return lambda xs: [F.local_response_norm(xs[0], a['size'], a['alpha'], a['beta'], a['k'])]
        if kind == 'Dropout':
            return lambda xs: [F.dropout(xs[0], a['ratio'], training=self.training)]
        if kind == 'Concat':
            return lambda xs: [torch.cat(xs, a['axis'])]
        if kind == 'Eltwise':
            return lambda xs: [sum(xs[1:], xs[0])]
        if kind == 'BatchNorm':
            mean, var = torch.zeros(a['channels']), torch.ones(a['channels'])
            return lambda xs: [F.batch_norm(xs[0], mean, var, None, None, self.training, a['momentum'], a['eps'])]
        if kind == 'Scale':
            bias = p[1] if len(p) > 1 else None
            return lambda xs: [xs[0] * p[0].view(1, -1, 1, 1) + (bias.view(1, -1, 1, 1) if bias is not None else 0)]
        if kind == 'SoftmaxWithLoss':
            return lambda xs: [F.cross_entropy(xs[0], xs[1].long())]
        if kind == 'Softmax':
            return lambda xs: [F.softmax(xs[0], 1)]
        raise ValueError('no PyTorch translation for layer type %s' % kind)

    def __call__(self, inputs):
        blobs = dict(inputs)
        for op, bottoms, tops in self.ops:
            if op is not None:
                for name, value in zip(tops, op([blobs[b] for b in bottoms])):
                    blobs[name] = value
        return blobs


def child_torch(graph, iterations, deploy, layout, threads):
    import numpy as np
    import torch
    torch.set_num_threads(threads)
    with open(graph + '.json') as f:
        spec = json.load(f)
    arrays = np.load(graph + '.npz')
    learnable = {entry['key'] for entry in spec['learnable']}
    model = TorchNet(spec, arrays, torch, learnable if not deploy else set())
    x = torch.from_numpy(arrays['data'])
    if layout == 'channels_last':
        x = x.contiguous(memory_format=torch.channels_last)
        for key, p in model.params.items():
            if p.dim() == 4:
                with torch.no_grad():
                    p.set_(p.detach().contiguous(memory_format=torch.channels_last))
    if deploy:
        model.training = False

        def step():
            with torch.no_grad():
                model({'data': x})
    else:
        y = torch.from_numpy(arrays['label'])
        s = spec['solver']
        groups = [dict(params=[model.params[e['key']]], lr=s['base_lr'] * e['lr_mult'],
                       weight_decay=s['weight_decay'] * e['decay_mult']) for e in spec['learnable']]
        opt = torch.optim.SGD(groups, lr=s['base_lr'], momentum=s['momentum'])

        def step():
            opt.zero_grad(set_to_none=True)
            model({'data': x, 'label': y})[spec['loss']].backward()
            opt.step()
    return {'ms': median_ms(step, iterations), 'rss_mb': _peak_rss_mb()}


# -- the parent ---------------------------------------------------------------------------------
def run_child(args, threads):
    cmd = [sys.executable, os.path.abspath(__file__), '--child'] + args
    out = subprocess.run(cmd, capture_output=True, text=True, env=thread_env(threads), timeout=3600)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith('{')]
    if out.returncode or not lines:
        raise RuntimeError('%s: %s' % (' '.join(args), (out.stderr or out.stdout).strip()[-800:]))
    return json.loads(lines[-1])


def sgemm_peak(threads):
    """Single-process SGEMM GFLOP/s at ``threads`` (NumPy's BLAS, 2048^3)."""
    code = ('import numpy as np, time; a=np.ones((2048,2048),np.float32); c=a@a; t=[]\n'
            'for _ in range(5):\n t0=time.perf_counter(); a@a; t.append(time.perf_counter()-t0)\n'
            'print(2*2048**3/min(t)/1e9)')
    out = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, env=thread_env(threads))
    return float(out.stdout.strip() or 'nan')


def measure(nets, threads_list, rounds, deploy, workdir):
    rows = []
    for threads in threads_list:
        for name in nets:
            batches = (1, 16) if deploy else (TRAIN_BATCH[name],)
            for batch in batches:
                iters = max(5, 2 * ITERATIONS[name]) if deploy else ITERATIONS[name]
                mode = 'deploy' if deploy else 'train'
                graph = os.path.join(workdir, '%s_b%d_%s' % (name, batch, mode))
                if not os.path.exists(graph + '.json'):
                    export_graph(name, batch, deploy, graph)
                ours, torch_runs, ratios = [], {'nchw': [], 'channels_last': []}, []
                for _ in range(rounds):  # interleaved: drift cancels in each round's ratio
                    a = run_child(['pycaffe', name, str(batch), str(iters), mode], threads)
                    b = {fmt: run_child(['torch', graph, str(iters), mode, fmt, str(threads)], threads)
                         for fmt in ('nchw', 'channels_last')}
                    ours.append(a)
                    for fmt in b:
                        torch_runs[fmt].append(b[fmt])
                    ratios.append(a['ms'] / min(r['ms'] for r in b.values()))
                fast = min(torch_runs, key=lambda f: statistics.median(r['ms'] for r in torch_runs[f]))
                row = dict(net=name, batch=batch, threads=threads,
                           ours_ms=statistics.median(r['ms'] for r in ours),
                           torch_ms=statistics.median(r['ms'] for r in torch_runs[fast]), torch_layout=fast,
                           ratio=statistics.median(ratios),
                           ours_rss=max(r['rss_mb'] for r in ours),
                           torch_rss=max(r['rss_mb'] for r in torch_runs[fast]))
                rows.append(row)
                print(_row_text(row), flush=True)
    return rows


HEADER = ('| net | batch | threads | pycaffe-ft ms | img/s | PyTorch ms (layout) | img/s | ratio | '
          'peak RSS MB (ours / torch) |\n|---|---|---|---|---|---|---|---|---|')


def _row_text(r):
    return ('| %s | %d | %d | %.1f | %.1f | %.1f (%s) | %.1f | %.2f | %.0f / %.0f |'
            % (r['net'], r['batch'], r['threads'], r['ours_ms'], 1e3 * r['batch'] / r['ours_ms'],
               r['torch_ms'], r['torch_layout'], 1e3 * r['batch'] / r['torch_ms'], r['ratio'],
               r['ours_rss'], r['torch_rss']))


def chart(rows, path, title):
    try:
        import matplotlib
        matplotlib.use('Agg')
        import matplotlib.pyplot as plt
    except ImportError:
        print('(no chart: matplotlib is not installed; pip install -e .[bench])')
        return
    labels = ['%s b%d\n%d thr' % (r['net'], r['batch'], r['threads']) for r in rows]
    xs = range(len(rows))
    fig, ax = plt.subplots(figsize=(max(6, 1.3 * len(rows)), 4.5))
    ax.bar([x - 0.2 for x in xs], [1e3 * r['batch'] / r['ours_ms'] for r in rows], 0.4, label='pycaffe-ft')
    ax.bar([x + 0.2 for x in xs], [1e3 * r['batch'] / r['torch_ms'] for r in rows], 0.4,
           label='PyTorch (faster layout)')
    for x, r in zip(xs, rows):
        ax.annotate('%.2fx' % (1 / r['ratio']), (x - 0.2, 1e3 * r['batch'] / r['ours_ms']),
                    ha='center', va='bottom', fontsize=8)
    ax.set_xticks(list(xs))
    ax.set_xticklabels(labels, fontsize=8)
    ax.set_ylabel('images / s (higher is better)')
    ax.set_yscale('log')
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print('chart: %s' % path)


def main(argv=None):
    if argv is None and len(sys.argv) > 1 and sys.argv[1] == '--child':
        if sys.argv[2] == 'pycaffe':
            name, batch, iters, mode = sys.argv[3:7]
            result = child_pycaffe(name, int(batch), int(iters), mode == 'deploy')
        else:
            graph, iters, mode, layout, threads = sys.argv[3:8]
            result = child_torch(graph, int(iters), mode == 'deploy', layout, int(threads))
        print(json.dumps(result))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--nets', default=None, help='comma-separated, from tools/bench_nets.py')
    ap.add_argument('--threads', default='1,2')
    ap.add_argument('--rounds', type=int, default=3)
    ap.add_argument('--deploy', action='store_true', help='forward-only at batch 1 and 16')
    ap.add_argument('--chart', default=None, help='PNG bar chart path')
    ap.add_argument('--json', default=None, help='write the rows as JSON too')
    args = ap.parse_args(argv)
    try:
        import torch  # noqa: F401
    except ImportError:
        print('PyTorch is not installed: pip install -e .[bench]')
        return 2
    nets = (args.nets or (DEPLOY_NETS if args.deploy else 'lenet,cifar10_quick,alexnet')).split(',')
    threads_list = [int(t) for t in args.threads.split(',')]
    print('SGEMM peak (NumPy BLAS): %s GFLOP/s' % ', '.join(
        '%.0f at %d thread(s)' % (sgemm_peak(t), t) for t in threads_list))
    print(HEADER)
    with tempfile.TemporaryDirectory() as workdir:
        rows = measure(nets, threads_list, args.rounds, args.deploy, workdir)
    print('\n' + HEADER)
    for r in rows:
        print(_row_text(r))
    if args.json:
        with open(args.json, 'w') as f:
            json.dump(rows, f, indent=1)
    if args.chart:
        chart(rows, args.chart, 'forward (deploy)' if args.deploy else 'training, SGD momentum')
    return 0


if __name__ == '__main__':
    sys.exit(main())
