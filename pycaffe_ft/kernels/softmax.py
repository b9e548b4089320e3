"""Softmax, its backward, softmax + multinomial logistic loss, and top-k accuracy.

Arrays are viewed as (outer, channels, inner): the softmax runs over ``channels``.
"""
import numpy as np
from numba import njit

from . import numpy_references
from .tiered import call

FLT_MIN = np.float32(1.17549435e-38)


@njit(cache=True, error_model='numpy')
def softmax_forward(x, y):
    outer, channels, inner = x.shape
    for o in range(outer):
        for i in range(inner):
            m = x[o, 0, i]
            for c in range(1, channels):
                if x[o, c, i] > m:
                    m = x[o, c, i]
            s = 0.0
            for c in range(channels):
                e = np.exp(x[o, c, i] - m)
                y[o, c, i] = e
                s += e
            for c in range(channels):
                y[o, c, i] = y[o, c, i] / s


@njit(cache=True)
def softmax_backward(y, dy, dx):
    outer, channels, inner = y.shape
    for o in range(outer):
        for i in range(inner):
            dot = 0.0
            for c in range(channels):
                dot += dy[o, c, i] * y[o, c, i]
            for c in range(channels):
                dx[o, c, i] = (dy[o, c, i] - dot) * y[o, c, i]


@njit(cache=True)
def softmax_loss_forward(prob, label, has_ignore, ignore_label):
    """(sum of -log p[label] over counted positions, count, first bad label or -1 sentinel).

    ``label`` is (outer, inner). Returns bad_index >= 0 for a label outside [0, channels).
    """
    outer, channels, inner = prob.shape
    loss = 0.0
    count = 0
    for o in range(outer):
        for i in range(inner):
            lv = int(label[o, i])
            if has_ignore and lv == ignore_label:
                continue
            if lv < 0 or lv >= channels:
                return loss, count, o * inner + i
            p = prob[o, lv, i]
            if p < FLT_MIN:
                p = FLT_MIN
            loss -= np.log(p)
            count += 1
    return loss, count, -1


def softmax_loss_backward(prob, label, has_ignore, ignore_label, scale, dx):
    """dx = the softmax loss's gradient, ``scale`` (the top's diff over the normaliser) times
    (prob - one-hot label), 0 at ignored positions: :func:`softmax_loss_backward_kernel`, or
    its NumPy reference while the kernel compiles (:mod:`.tiered`)."""
    call(softmax_loss_backward_kernel, numpy_references.softmax_loss_backward, prob, label, has_ignore, ignore_label,
         scale, dx)


@njit(cache=True)
def softmax_loss_backward_kernel(prob, label, has_ignore, ignore_label, scale, dx):
    outer, channels, inner = prob.shape
    for o in range(outer):
        for i in range(inner):
            lv = int(label[o, i])
            if has_ignore and lv == ignore_label:
                for c in range(channels):
                    dx[o, c, i] = 0.0
            else:
                for c in range(channels):
                    dx[o, c, i] = prob[o, c, i] * scale
                dx[o, lv, i] -= scale


@njit(cache=True)
def accuracy(x, label, top_k, has_ignore, ignore_label, per_class_hits, per_class_count):
    """(hits, counted, bad flat index or -1); per-class arrays accumulate hits and counts."""
    outer, channels, inner = x.shape
    hits = 0
    counted = 0
    for o in range(outer):
        for i in range(inner):
            lv = int(label[o, i])
            if has_ignore and lv == ignore_label:
                continue
            if lv < 0 or lv >= channels:
                return hits, counted, o * inner + i
            per_class_count[lv] += 1
            true_score = x[o, lv, i]
            better = -1
            k = 0
            while k < channels and better < top_k:
                if x[o, k, i] >= true_score:
                    better += 1
                k += 1
            if better < top_k:
                hits += 1
                per_class_hits[lv] += 1
            counted += 1
    return hits, counted, -1
