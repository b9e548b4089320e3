"""``pycaffe-ft time``: per-layer forward/backward timing, printed like ``caffe time``."""
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
    fwd = np.zeros(n)
    bwd = np.zeros(n)
    out('*** Benchmark begins ***')
    out('Testing for %d iterations.' % iterations)
    total_start = time.perf_counter()
    fwd_total = bwd_total = 0.0
    for it in range(iterations):
        t_iter = time.perf_counter()
        for i in range(n):
            t0 = time.perf_counter()
            net.layers[i].run_forward(net.bottom_vecs[i], net.top_vecs[i])
            fwd[i] += time.perf_counter() - t0
        t_mid = time.perf_counter()
        fwd_total += t_mid - t_iter
        for i in range(n - 1, -1, -1):
            t0 = time.perf_counter()
            if net.layer_need_backward[i]:
                net.layers[i].backward(net.top_vecs[i], net.bottom_need_backward[i], net.bottom_vecs[i])
            bwd[i] += time.perf_counter() - t0
        bwd_total += time.perf_counter() - t_mid
        out('Iteration: %d forward-backward time: %.3f ms.' % (it + 1, (time.perf_counter() - t_iter) * 1e3))
    total = time.perf_counter() - total_start
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
