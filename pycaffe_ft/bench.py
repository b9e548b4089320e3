"""``pycaffe-ft time``: per-layer forward/backward timing, printed like ``caffe time``, then the
throughput of the layers whose cost is known: GFLOP/s of Convolution, Deconvolution and
InnerProduct beside a GEMM's (so a slow layer stands out), and GB/s of Pooling (memory-bound
work) beside a copy's, both yardsticks measured again before every pass."""
import os
import time

import numpy as np

from .kernels import tiered
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


STREAM_PASSES = 10
"""Passes run after the timed ones with each Pooling layer's pass replaced by a stream of its
bytes (:func:`pooling_stand_ins`)."""


def time_net(model, iterations=50, phase=0, level=0, stages=(), overrides=None, weights=None,
             out=print, streams=True):
    """Caffe's ``time``: the net's layers timed pass by pass over ``iterations`` forward and
    backward passes (synthetic input where a data layer has no dataset here), with throughput
    per layer (:func:`report_throughput`); ``streams``: also time pooling's stand-ins in
    :data:`STREAM_PASSES` more passes."""
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
    tiered.finish()  # the kernels compiled in the background meanwhile: time them, not their references
    n = len(net.layers)
    # The timed passes run the layers one by one, so no ReLU is fused into a backward as in the
    # net's passes: their kernels (other argument types) load now, not in the first timed pass.
    _timed_pass(net, np.zeros(n), np.zeros(n))
    fwd_each = np.zeros((iterations, n))  # seconds per iteration and layer
    bwd_each = np.zeros((iterations, n))
    work = [(i, w) for i, w in ((i, layer_work(net, i)) for i in range(n)) if w is not None]
    yardsticks = Yardsticks({unit for _, (unit, _, _) in work}, iterations)
    out('*** Benchmark begins ***')
    out('Testing for %d iterations.' % iterations)
    fwd_total = bwd_total = 0.0
    for it in range(iterations):
        yardsticks.measure(it)
        t_iter = time.perf_counter()
        forward, backward = _timed_pass(net, fwd_each[it], bwd_each[it])
        fwd_total += forward
        bwd_total += backward
        out('Iteration: %d forward-backward time: %.3f ms.' % (it + 1, (time.perf_counter() - t_iter) * 1e3))
    total = fwd_total + bwd_total
    streamed = _streamed_passes(net, min(iterations, STREAM_PASSES), yardsticks.run) if streams else None
    report_throughput(net, work, fwd_each, bwd_each, yardsticks, out, streamed)
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


def _timed_pass(net, forward_seconds, backward_seconds, stand_ins=None):
    """One forward and backward pass layer by layer, each layer's seconds into the two rows;
    a layer in ``stand_ins`` (index -> (forward, backward) callables) runs those instead.
    Returns the seconds of the whole forward and of the whole backward."""
    stand_ins = stand_ins or {}
    start = time.perf_counter()
    for i, layer in enumerate(net.layers):
        t0 = time.perf_counter()
        if i in stand_ins:
            stand_ins[i][0]()
        else:
            layer.run_forward(net.bottom_vecs[i], net.top_vecs[i])
        forward_seconds[i] = time.perf_counter() - t0
    middle = time.perf_counter()
    for i in range(len(net.layers) - 1, -1, -1):
        t0 = time.perf_counter()
        if net.layer_need_backward[i]:
            if i in stand_ins:
                stand_ins[i][1]()
            else:
                net.layers[i].backward(net.top_vecs[i], net.bottom_need_backward[i], net.bottom_vecs[i])
        backward_seconds[i] = time.perf_counter() - t0
    return middle - start, time.perf_counter() - middle


def pooling_stand_ins(net, i):
    """(forward, backward) callables that move the bytes Pooling layer i moves (those
    :func:`layer_work` counts: its bottom and top, and the argmax mask of MAX and STOCHASTIC
    pooling) over the same image ranges on the same threads, with :func:`~.kernels.stream.stream`
    and no arithmetic. Timed in the layer's place, they show what memory gives the layer at
    that point of a pass; they overwrite its top data and bottom diff."""
    from .intra_op import for_images
    from .kernels.stream import stream
    from .layers.pooling import SERIAL_BELOW
    from .proto import caffe_pb2
    layer, bottom, top = net.layers[i], net.bottom_vecs[i], net.top_vecs[i]
    x, dx, y, dy = bottom[0].data, bottom[0].diff, top[0].data, top[0].diff
    mask = None if layer.method == caffe_pb2.PoolingParameter.AVE else top[1].data if len(top) > 1 else layer._mask
    nothing = np.empty(0, np.float32)

    def flat(array, lo, hi):
        return nothing if array is None else array[lo:hi].reshape(-1)

    def forward():
        for_images(lambda lo, hi: stream(flat(x, lo, hi), nothing, flat(y, lo, hi), flat(mask, lo, hi)),
                   x.shape[0], x[0].size, SERIAL_BELOW)

    def backward():
        for_images(lambda lo, hi: stream(flat(dy, lo, hi), flat(mask, lo, hi), flat(dx, lo, hi), nothing),
                   x.shape[0], x[0].size, SERIAL_BELOW)
    return forward, backward


def _streamed_passes(net, passes, before_each):
    """Seconds (passes x layers, forward and backward) of the Pooling layers' stand-ins
    (:func:`pooling_stand_ins`), each timed in its layer's place in ``passes`` more passes (NaN
    for the other layers), or None if the net has no Pooling layer. ``before_each()`` runs
    before every pass, as the yardsticks run before every timed pass (their 64 MB copy evicts
    the pass before's data from the caches: without it, a net that fits there, such as LeNet,
    streamed from the caches against layers that read from memory)."""
    stand_ins = {i: pooling_stand_ins(net, i) for i, layer in enumerate(net.layers)
                 if layer.type == 'Pooling' and layer_work(net, i) is not None}
    if not stand_ins or passes < 1:
        return None
    n = len(net.layers)
    forward, backward = np.zeros((passes + 1, n)), np.zeros((passes + 1, n))
    for it in range(passes + 1):
        before_each()
        _timed_pass(net, forward[it], backward[it], stand_ins)
    forward, backward = forward[1:], backward[1:]  # the first pass warms the stand-ins
    others = [i for i in range(n) if i not in stand_ins]
    forward[:, others] = backward[:, others] = np.nan
    return forward, backward


class Yardsticks:
    """What a layer's rate is set beside, measured again before every timed pass (so that
    both see the same moment of a shared host and the same core): one float32 GEMM of
    1024 x 1024 x 1024 run the way layers run theirs (split over the intra-op threads, BLAS
    one thread each), in GFLOP/s, and one copy of a 64 MB array (beyond this machine's caches)
    into another split as pooling splits its images, in GB/s (bytes read + bytes written).
    Each is measured only if ``units`` (those of :func:`layer_work`) has a layer to set beside
    it; neither counts in the passes' times."""

    GEMM_SIZE = 1024
    COPY_MB = 64

    def __init__(self, units, iterations):
        self.peak = np.full(iterations, np.nan) if 'GFLOP/s' in units else None
        self.bandwidth = np.full(iterations, np.nan) if 'GB/s' in units else None
        self._gemm = self._gemm_run(self.GEMM_SIZE) if self.peak is not None else None
        self._copy = self._copy_run(self.COPY_MB << 18) if self.bandwidth is not None else None

    @staticmethod
    def _gemm_run(n):
        from .intra_op import matmul
        a, c = np.ones((n, n), np.float32), np.empty((n, n), np.float32)
        matmul(a, a, c)  # warm: BLAS threads, pages
        return lambda: matmul(a, a, c)

    @staticmethod
    def _copy_run(count):
        from .intra_op import image_chunks, run_chunks
        src, dst = np.ones(count, np.float32), np.empty(count, np.float32)
        chunks = image_chunks(count >> 16, 1 << 16, target=1 << 20)
        np.copyto(dst, src)  # warm: pages
        return lambda: run_chunks(lambda lo, hi: np.copyto(dst[lo << 16:hi << 16], src[lo << 16:hi << 16]), chunks)

    def run(self):
        """Run both yardsticks, unrecorded (what a timed pass follows)."""
        for run in (self._gemm, self._copy):
            if run is not None:
                run()

    def measure(self, it):
        """Sample both yardsticks for pass ``it``."""
        if self._gemm is not None:
            self.peak[it] = 2.0 * self.GEMM_SIZE ** 3 / _seconds(self._gemm) / 1e9
        if self._copy is not None:
            self.bandwidth[it] = 2.0 * 4 * (self.COPY_MB << 18) / _seconds(self._copy) / 1e9


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


def report_throughput(net, rows, fwd_s, bwd_s, yardsticks, out=print, streamed=None):
    """Print GFLOP/s (and % of the GEMM peak) or GB/s (and % of the copy's) per layer, forward
    and backward, for ``rows`` ((layer index, :func:`layer_work`) of the layers it counts),
    from the layers' seconds ``fwd_s``/``bwd_s`` (passes x layers) and the :class:`Yardsticks`
    sampled before each pass: a rate is the median over the passes, a share the median of each
    pass's rate over that pass's yardstick. With ``streamed`` (forward and backward seconds of
    :func:`pooling_stand_ins` timed in the layers' places, as from :func:`_streamed_passes`),
    a Pooling layer's rate is also set beside its stand-in's (median against median)."""
    from .intra_op import num_threads
    if not rows:
        return
    measured = []
    if yardsticks.peak is not None:
        measured.append('GEMM peak %.1f GFLOP/s (GFLOP of the direct convolution, so Winograd can pass it)'
                        % np.median(yardsticks.peak))
    if yardsticks.bandwidth is not None:
        measured.append('a 64 MB copy %.1f GB/s' % np.median(yardsticks.bandwidth))
    out('Throughput per layer, median of %d passes (%d thread(s); measured before each pass: %s%s):'
        % (len(fwd_s), num_threads(), '; '.join(measured),
           '; pooling also beside a stream of its bytes run in its place, %d more passes' % len(streamed[0])
           if streamed is not None else ''))
    for i, (unit, fwork, bwork) in rows:
        parts = []
        layer = net.layers[i]
        algorithms = layer.algorithms() if hasattr(layer, 'algorithms') else (None, None)
        yardstick = yardsticks.peak if unit == 'GFLOP/s' else yardsticks.bandwidth
        for label, work, seconds, algorithm in (('forward', fwork, fwd_s[:, i], algorithms[0]),
                                                 ('backward', bwork, bwd_s[:, i], algorithms[1])):
            if work <= 0 or not (seconds > 0).all():
                continue
            rates = work / seconds
            share = 100.0 * np.median(rates / yardstick)
            if unit == 'GFLOP/s':
                share = ' (%.0f%% of peak%s)' % (share, ', ' + algorithm if algorithm else '')
            elif streamed is not None and not np.isnan(streamed[label == 'backward'][:, i]).any():
                share = ' (%.0f%% of the copy, %.0f%% of its bytes streamed in its place)' % (
                    share, 100.0 * np.median(streamed[label == 'backward'][:, i]) / np.median(seconds))
            else:
                share = ' (%.0f%% of the copy)' % share
            parts.append('%s %.1f %s%s' % (label, np.median(rates), unit, share))
        if parts:
            out('%10s\t%s' % (net._layer_names[i], ', '.join(parts)))
