"""The fused update kernels, and the NumPy references a first step runs while they compile,
against Caffe's formulas written as separate NumPy float32 passes (SGDSolver::Normalize,
Regularize, ComputeUpdateValue, Update), for every solver type, with iter_size normalisation,
L2 and L1 decay and per-blob lr/decay multipliers."""
import numpy as np
import pytest

from pycaffe_ft.kernels import solver_update as K
from pycaffe_ft.solvers import rules
from pycaffe_ft.solvers.rules import RULES
from pycaffe_ft.proto import caffe_pb2

f32 = np.float32


def reference(kind, p, w, g, history, rate, decay, iter_size, regularization, iteration):
    """Caffe's CPU update, one array pass at a time, in float32."""
    g = g.copy()
    if iter_size > 1:
        g *= f32(1.0 / iter_size)
    if regularization == 'L2':
        g += decay * w
    elif regularization == 'L1':
        g += decay * np.sign(w)
    if kind == 'SGD':
        h = history[0]
        h *= f32(p.momentum)
        h += rate * g
        update = h.copy()
    elif kind == 'Nesterov':
        m, h = f32(p.momentum), history[0]
        previous = h.copy()
        h *= m
        h += rate * g
        update = (f32(1) + m) * h - m * previous
    elif kind == 'AdaGrad':
        h = history[0]
        h += g * g
        update = rate * (g / (np.sqrt(h) + f32(p.delta)))
    elif kind == 'RMSProp':
        d, h = f32(p.rms_decay), history[0]
        h *= d
        h += (f32(1) - d) * (g * g)
        update = rate * (g / (np.sqrt(h) + f32(p.delta)))
    elif kind == 'AdaDelta':
        m, delta = f32(p.momentum), f32(p.delta)
        h, hu = history
        h *= m
        h += (f32(1) - m) * (g * g)
        u = g * np.sqrt((hu + delta) / (h + delta))
        hu *= m
        hu += (f32(1) - m) * (u * u)
        update = rate * u
    else:  # Adam
        b1, b2 = f32(p.momentum), f32(p.momentum2)
        m, v = history
        t = iteration + 1
        correction = f32(np.sqrt(f32(1) - f32(b2 ** t)) / (f32(1) - f32(b1 ** t)))
        m *= b1
        m += (f32(1) - b1) * g
        v *= b2
        v += (f32(1) - b2) * (g * g)
        update = (rate * correction) * (m / (np.sqrt(v) + f32(p.delta)))
    return w - update, update


@pytest.fixture(params=['kernel', 'reference'])
def way(request, monkeypatch):
    """Each rule through its kernel, or through its NumPy reference (as while the kernel
    compiles in the background)."""
    if request.param == 'reference':
        monkeypatch.setattr(rules, 'call', lambda kernel, reference, *args: reference(*args))
    return request.param


@pytest.mark.parametrize('kind', ['SGD', 'Nesterov', 'AdaGrad', 'RMSProp', 'AdaDelta', 'Adam'])
@pytest.mark.parametrize('regularization, iter_size', [('L2', 1), ('L1', 3), (None, 2)])
def test_fused_update_is_caffes_passes_bit_for_bit(kind, regularization, iter_size, way):
    rng = np.random.default_rng(7)
    p = caffe_pb2.SolverParameter(momentum=0.9 if kind not in ('AdaDelta',) else 0.95, momentum2=0.999,
                                  rms_decay=0.98, delta=1e-8 if kind != 'AdaDelta' else 1e-6)
    counts = [30, 1, 257, 12]
    bounds = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    n = bounds[-1]
    lr_mult, decay_mult = np.array([1, 2, 0.5, 0], f32), np.array([1, 0, 2, 1], f32)
    rates, decays = f32(0.01) * lr_mult, f32(0.004) * decay_mult
    rule = RULES.get(kind, KeyError, '')(p)
    w = rng.standard_normal(n).astype(f32)
    history = [np.abs(rng.standard_normal(n)).astype(f32) for _ in range(rule.history_blocks)]
    ref_w, ref_hist = w.copy(), [h.copy() for h in history]
    code = {'L2': K.L2, 'L1': K.L1, None: K.NO_DECAY}[regularization]
    iter_scale = f32(1.0 / iter_size) if iter_size > 1 else f32(1)
    for iteration in range(3):
        g = rng.standard_normal(n).astype(f32)
        ref_w, ref_update = reference(kind, p, ref_w, g, ref_hist, np.repeat(rates, counts),
                                      np.repeat(decays, counts), iter_size, regularization, iteration)
        for lo, hi in ((0, 100), (100, n)):  # two ranges, as two threads would run them
            rule.apply(w, g, history, (lo, hi, bounds, rates, decays, iter_scale, code), iteration)
        assert np.array_equal(g, ref_update), 'the update left in the diff differs'
        assert np.array_equal(w, ref_w), 'the weights differ'
        for ours, theirs in zip(history, ref_hist):
            assert np.array_equal(ours, theirs), 'the history differs'


@pytest.mark.parametrize('kind', ['AdaGrad', 'RMSProp', 'AdaDelta', 'Adam'])
def test_a_zero_denominator_gives_caffes_nan_not_an_error(kind, way):
    """delta 0 with a zero gradient and history: 0 / 0 is NaN in Caffe's arithmetic, and here."""
    p = caffe_pb2.SolverParameter(momentum=0.9, momentum2=0.999, rms_decay=0.98, delta=0.0)
    rule = RULES.get(kind, KeyError, '')(p)
    n = 40
    bounds, rates, decays = np.array([0, n], np.int64), np.array([0.01], f32), np.array([0.0], f32)
    w, g = np.ones(n, f32), np.zeros(n, f32)
    w[:20] = 2.0
    g[:20] = 0.5
    history = [np.zeros(n, f32) for _ in range(rule.history_blocks)]
    with np.errstate(invalid='ignore', divide='ignore'):
        ref_w, ref_update = reference(kind, p, w.copy(), g, [h.copy() for h in history], np.full(n, rates[0]),
                                      np.zeros(n, f32), 1, None, 0)
    rule.apply(w, g, history, (0, n, bounds, rates, decays, f32(1), K.NO_DECAY), 0)
    assert np.isnan(ref_w[20:]).all() and np.isfinite(ref_w[:20]).all()
    assert np.array_equal(w, ref_w, equal_nan=True) and np.array_equal(g, ref_update, equal_nan=True)
