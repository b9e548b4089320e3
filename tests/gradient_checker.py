"""The one numerical gradient checker for all layers (Caffe's GradientChecker rules).

Central differences with ``stepsize`` (1e-2); a computed and an estimated derivative agree if
``|computed - estimated| <= threshold * max(|computed|, |estimated|, 1)`` (threshold 1e-3);
elements within ``kink_range`` of ``kink`` are not checked (non-differentiable points).
The objective is sum_t <R_t, top_t> with fixed random R_t for ordinary tops and the loss
weight for loss tops, so every top element's gradient path is exercised.
"""
import numpy as np
from google.protobuf import text_format

from pycaffe_ft.blob import Blob
from pycaffe_ft.proto import caffe_pb2
from pycaffe_ft.registry import LAYERS

__all__ = ['make_layer', 'check_gradient', 'LayerTestCase', 'make_bottom']


def make_layer(prototxt, num_bottom, phase=caffe_pb2.TRAIN):
    """(layer, bottom blobs, top blobs) for a LayerParameter in text form (bottoms unnamed)."""
    lp = text_format.Parse(prototxt, caffe_pb2.LayerParameter())
    if not lp.name:
        lp.name = lp.type.lower()
    while len(lp.bottom) < num_bottom:
        lp.bottom.append('b%d' % len(lp.bottom))
    if not len(lp.top):
        lp.top.append('t0')
    layer = LAYERS.get(lp.type)(lp, phase)
    return layer, [Blob() for _ in range(num_bottom)], [Blob() for _ in lp.top]


def make_bottom(spec, rng):
    """Bottom values from a spec: (shape, kind) with kind gaussian | positive | labels:C |
    away:D (gaussian with |x| >= D) | distinct[:offset] | uniform:lo:hi."""
    shape, kind = spec if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[1], str) \
        else (spec, 'gaussian')
    if kind == 'gaussian':
        return rng.standard_normal(shape)
    if kind == 'positive':
        return rng.uniform(0.5, 2.0, shape)
    if kind.startswith('labels:'):
        return rng.integers(0, int(kind.split(':')[1]), shape).astype(np.float64)
    if kind.startswith('away:'):
        gap = float(kind.split(':')[1])
        x = rng.standard_normal(shape)
        return np.where(x >= 0, x + gap, x - gap)
    if kind.startswith('distinct'):  # values 0.05 apart (+ an offset): no ties (max, sort)
        n = int(np.prod(shape))
        offset = float(kind.split(':')[1]) if ':' in kind else 0.0
        return (rng.permutation(n) * 0.05 - n * 0.025 + offset).reshape(shape)
    if kind.startswith('uniform:'):
        _, lo, hi = kind.split(':')
        return rng.uniform(float(lo), float(hi), shape)
    raise ValueError(kind)


def _objective(layer, bottom, top, weights, before_forward=None):
    if before_forward:
        before_forward(layer)
    layer.run_forward(bottom, top)
    total = 0.0
    for t, w in zip(top, weights):
        total += float(np.sum(t.data.astype(np.float64) * w))
    return total


def check_gradient(layer, bottom, top, check_bottom=None, stepsize=1e-2, threshold=1e-3,
                   kink=0.0, kink_range=-1.0, seed=1701, check_params=True, before_forward=None,
                   check_tops=None):
    """Assert analytic == numeric gradients for the bottoms in ``check_bottom`` (default:
    all) and all param blobs. ``layer`` must be set up already (bottom data filled).
    ``before_forward(layer)`` runs before every forward (e.g. to fix a random mask).
    ``check_tops``: the tops whose diffs the layer propagates (default: all); the others get
    weight 0 in the objective (Caffe's exposed recurrent states, for one, propagate none)."""
    rng = np.random.default_rng(seed)
    check_bottom = range(len(bottom)) if check_bottom is None else check_bottom
    for b in list(bottom) + list(layer.blobs):
        b.diff[...] = 0
    if before_forward:
        before_forward(layer)
    layer.run_forward(bottom, top)  # may leave state in bottom diffs (HingeLoss, as in Caffe)
    weights = []
    for i, t in enumerate(top):
        if layer.loss(i):
            weights.append(np.full(t.shape, layer.loss(i), np.float32))
        else:
            weights.append(rng.standard_normal(t.shape).astype(np.float32))
    for t, w in zip(top, weights):
        t.diff[...] = w
    for i, w in enumerate(weights):
        if check_tops is not None and i not in check_tops:
            w[...] = 0  # its diff (set above, nonzero) must not reach the bottoms or params
    propagate = [i in check_bottom for i in range(len(bottom))]
    layer.backward(top, propagate, bottom)
    targets = [('bottom %d' % i, bottom[i], bottom[i].diff.copy()) for i in check_bottom]
    if check_params:
        targets += [('param %d' % i, b, b.diff.copy()) for i, b in enumerate(layer.blobs)
                    if layer.param_propagate_down[i]]
    failures = []
    for what, blob, computed in targets:
        data = blob.data.reshape(-1)
        comp = computed.reshape(-1)
        for j in range(data.size):
            feature = float(data[j])
            data[j] = feature + stepsize
            plus = _objective(layer, bottom, top, weights, before_forward)
            data[j] = feature - stepsize
            minus = _objective(layer, bottom, top, weights, before_forward)
            data[j] = feature
            estimated = (plus - minus) / (2 * stepsize)
            if kink_range >= 0 and abs(feature - kink) <= kink_range:
                continue
            scale = max(abs(float(comp[j])), abs(estimated), 1.0)
            if abs(float(comp[j]) - estimated) > threshold * scale:
                failures.append('%s[%d]: computed %.6g, estimated %.6g (x = %.4g)'
                                % (what, j, comp[j], estimated, feature))
    layer.run_forward(bottom, top)
    assert not failures, '%s "%s": %d gradient mismatches, e.g.\n%s' % (
        layer.layer_param.type, layer.name, len(failures), '\n'.join(failures[:10]))


class LayerTestCase:
    """Base of every differentiable layer's gradient test.

    A subclass sets ``layer_type`` and ``configs``: a list of dicts with ``param`` (the
    LayerParameter text, without bottoms/tops unless needed), ``bottoms`` (specs for
    :func:`make_bottom`), and optionally ``check_bottom``, ``check_params``,
    ``kink``/``kink_range``, ``phase``, ``stepsize``, ``threshold``, ``fixed_rng`` (reseed the
    layer's generator before every forward: Dropout masks), ``check_tops`` (tops that propagate). Each config is gradient-checked.
    """
    layer_type = None
    configs = ()

    def test_gradient(self):
        assert self.configs, '%s has no configurations' % type(self).__name__
        for k, cfg in enumerate(self.configs):
            rng = np.random.default_rng(1000 + k)
            layer, bottom, top = make_layer(cfg['param'], len(cfg['bottoms']),
                                            cfg.get('phase', caffe_pb2.TRAIN))
            assert layer.layer_param.type == self.layer_type
            for blob, spec in zip(bottom, cfg['bottoms']):
                value = make_bottom(spec, rng)
                blob.reshape(value.shape)
                blob.data[...] = value
            layer.setup(bottom, top)
            for b in layer.blobs:
                if not np.any(b.data) and layer.layer_param.type != 'BatchNorm':
                    b.data[...] = rng.standard_normal(b.shape)
            reseed = (lambda l: setattr(l, 'rng', np.random.default_rng(7))) if cfg.get('fixed_rng') else None
            check_gradient(layer, bottom, top, cfg.get('check_bottom'),
                           stepsize=cfg.get('stepsize', 1e-2), threshold=cfg.get('threshold', 1e-3),
                           kink=cfg.get('kink', 0.0), kink_range=cfg.get('kink_range', -1.0),
                           check_params=cfg.get('check_params', True), before_forward=reseed,
                           check_tops=cfg.get('check_tops'))
