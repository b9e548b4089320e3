"""``pycaffe-ft time``: per-layer forward/backward timing, printed like ``caffe time``, then the
throughput of the layers whose cost is known: GFLOP/s of Convolution, Deconvolution and
InnerProduct beside the SGEMM peak measured at start (so a slow layer stands out), and GB/s
of Pooling (memory-bound work) beside a copy's GB/s measured the same way."""
import os
import time

import numpy as np

from .log import logger
from .netspec_io import load_net_param
from .registry import LAYERS
from .synthetic_inputs import DATA_LAYER_TYPES, replace_data_layers

__all__ = ['time_net', 'needs_synthetic_input']


def needs_synthetic_input(lp):
    """A data layer whose type or dataset is not available here."""
    if lp.type not in DATA_LAYER_TYPES:
        return False
    if lp.type not in LAYERS:
        return True
    source = {'Data': lp.data_param.source, 'ImageData': lp.image_data_param.source,
              'HDF5Data': lp.hdf5_data_param.source, 'WindowData': lp.window_data_param.source}
    return lp.type != 'MemoryData' and not os.path.exists(source.get(lp.type, ''))


def time_net(model, iterations=50, phase=0, level=0, stages=(), overrides=None, weights=None,
             out=print):
    from .net import Net
    from .proto import caffe_pb2
    param, source = load_net_param(model)
    synthetic = [lp for lp in param.layer if needs_synthetic_input(lp)]
    if synthetic:
        keep = caffe_pb2.NetParameter()
        keep.CopyFrom(param)
        del keep.layer[:]
        replaced_param, _ = replace_data_layers(param, overrides)
        for lp, new in zip(param.layer, replaced_param.layer):
            keep.layer.add().CopyFrom(new if lp in synthetic else lp)
        param = keep
        out('Note: data layers %s have no dataset here: fed with synthetic (random) input of '
            'the right shape.' % ', '.join(sorted({lp.name for lp in synthetic})))
    net = Net(param, weights=weights, phase=phase, level=level, stages=stages)
    rng = np.random.default_rng(0)
    for name in net.inputs:
        blob = net.blobs[name]
        if name in ('label', 'labels') or blob.num_axes == 1:
            blob.data[...] = rng.integers(0, 10, blob.shape)
        else:
            blob.data[...] = rng.standard_normal(blob.shape)
    logger.info('Performing Forward')
    initial = net.forward_from_to()
    out('Initial loss: %g' % initial)
    logger.info('Performing Backward')
    net.backward_from_to()
    n = len(net.layers)
    fwd_each = np.zeros((iterations, n))  # seconds per iteration and layer
    bwd_each = np.zeros((iterations, n))
    out('*** Benchmark begins ***')
    out('Testing for %d iterations.' % iterations)
    total_start = time.perf_counter()
    fwd_total = bwd_total = 0.0
    for it in range(iterations):
        t_iter = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            net.layers[i].run_forward(net.bottom_vecs[i], net.top_vecs[i])
            fwd_each[it, i] = time.perf_counter() - t0
        t_mid = time.perf_counter()
        fwd_total += t_mid - t_iter
        for i in range(n - 1, -1, -1):
            t0 = time.perf_counter()
            if net.layer_need_backward[i]:
                net.layers[i].backward(net.top_vecs[i], net.bottom_need_backward[i], net.bottom_vecs[i])
            bwd_each[it, i] = time.perf_counter() - t0
        bwd_total += time.perf_counter() - t_mid
        out('Iteration: %d forward-backward time: %.3f ms.' % (it + 1, (time.perf_counter() - t_iter) * 1e3))
    total = time.perf_counter() - total_start
    report_throughput(net, np.median(fwd_each, axis=0), np.median(bwd_each, axis=0), out)
    fwd, bwd = fwd_each.sum(axis=0), bwd_each.sum(axis=0)
    out('Average time per layer: ')
    for i, name in enumerate(net._layer_names):
        out('%10s\tforward: %.4f ms.' % (name, fwd[i] / iterations * 1e3))
        out('%10s\tbackward: %.4f ms.' % (name, bwd[i] / iterations * 1e3))
    out('Average Forward pass: %.4f ms.' % (fwd_total / iterations * 1e3))
    out('Average Backward pass: %.4f ms.' % (bwd_total / iterations * 1e3))
    out('Average Forward-Backward: %.4f ms.' % (total / iterations * 1e3))
    out('Total Time: %.4f ms.' % (total * 1e3))
    out('*** Benchmark ends ***')
    return {'forward_ms': fwd_total / iterations * 1e3, 'backward_ms': bwd_total / iterations * 1e3,
            'total_ms': total / iterations * 1e3, 'layers': list(net._layer_names),
            'layer_forward_ms': list(fwd / iterations * 1e3), 'layer_backward_ms': list(bwd / iterations * 1e3)}


def sgemm_peak():
    """GFLOP/s of a large float32 GEMM run the way layers run theirs (split over the intra-op
    threads, BLAS one thread each): the median of 5 (the layers' rates are medians too: on a
    shared host the best of a few runs would catch a quiet moment the layers do not get)."""
    from .intra_op import matmul
    n = 1536
    a = np.ones((n, n), np.float32)
    c = np.empty((n, n), np.float32)
    matmul(a, a, c)
    return 2.0 * n ** 3 / np.median([_seconds(lambda: matmul(a, a, c)) for _ in range(5)]) / 1e9


def copy_bandwidth(mb=64):
    """GB/s (bytes read + bytes written) of copying an ``mb`` MB float32 array (beyond this
    machine's caches) into another, split over the intra-op threads as pooling splits its
    images: the median of 5. The yardstick for memory-bound layers."""
    from .intra_op import image_chunks, run_chunks
    count = mb << 18
    src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
    chunks = image_chunks(count >> 16, 1 << 16, target=1 << 20)

    def copy():
        run_chunks(lambda lo, hi: np.copyto(dst[lo << 16:hi << 16], src[lo << 16:hi << 16]), chunks)
    copy()
    return 2.0 * src.nbytes / np.median([_seconds(copy) for _ in range(5)]) / 1e9


def _seconds(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def layer_work(net, i):
    """(forward, backward) GFLOP of layer i for GEMM layers, or (forward, backward) GB moved
    for Pooling, or None. Backward counts what the net computes: the weight gradient if the
    weights learn, the bottom gradient if the bottom needs one."""
    layer = net.layers[i]
    bottom, top = net.bottom_vecs[i], net.top_vecs[i]
    needs_bottom = any(net.bottom_need_backward[i])
    needs_weights = bool(layer.param_propagate_down) and layer.param_propagate_down[0]
    if layer.type in ('Convolution', 'Deconvolution'):
        kh, kw = layer.kernel
        per_pass = (2.0 * layer.num * len(bottom) * layer.conv_out_channels * layer.conv_in_channels
                    // layer.group * kh * kw * layer.col_hw[0] * layer.col_hw[1])
    elif layer.type == 'InnerProduct':
        per_pass = 2.0 * layer.m * layer.k * layer.num_output
    elif layer.type == 'Pooling':
        moved = 4.0 * (bottom[0].count + top[0].count * (2 if layer.method != 1 else 1))
        return 'GB/s', moved / 1e9, moved / 1e9 if needs_bottom else 0.0
    else:
        return None
    backward = per_pass * (int(needs_weights) + int(needs_bottom)) if net.layer_need_backward[i] else 0.0
    return 'GFLOP/s', per_pass / 1e9, backward / 1e9


def report_throughput(net, fwd_s, bwd_s, out=print):
    """Print GFLOP/s (and % of the SGEMM peak) or GB/s (and % of a copy's) per layer, forward
    and backward, from the layers' seconds per pass ``fwd_s``/``bwd_s`` (medians)."""
    from .intra_op import num_threads
    rows = [(i, layer_work(net, i)) for i in range(len(net.layers))]
    rows = [(i, w) for i, w in rows if w is not None]
    if not rows:
        return
    peak = sgemm_peak()
    bandwidth = copy_bandwidth() if any(unit == 'GB/s' for _, (unit, _, _) in rows) else None
    out('Throughput per layer, median pass (%d thread(s); SGEMM peak measured now: %.1f GFLOP/s; GFLOP of the '
        'direct convolution, so Winograd can pass the peak%s):'
        % (num_threads(), peak, '; a 64 MB copy: %.1f GB/s' % bandwidth if bandwidth else ''))
    for i, (unit, fwork, bwork) in rows:
        parts = []
        layer = net.layers[i]
        algorithms = layer.algorithms() if hasattr(layer, 'algorithms') else (None, None)
        for label, work, seconds, algorithm in (('forward', fwork, fwd_s[i], algorithms[0]),
                                                 ('backward', bwork, bwd_s[i], algorithms[1])):
            if work <= 0 or seconds <= 0:
                continue
            rate = work / seconds
            share = ' (%.0f%% of peak%s)' % (100.0 * rate / peak, ', ' + algorithm if algorithm else '') \
                if unit == 'GFLOP/s' else ' (%.0f%% of the copy)' % (100.0 * rate / bandwidth)
            parts.append('%s %.1f %s%s' % (label, rate, unit, share))
        if parts:
            out('%10s\t%s' % (net._layer_names[i], ', '.join(parts)))
