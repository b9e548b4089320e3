"""Fused solver updates over the flat parameter buffer: one pass per iteration does Caffe's
Normalize (iter_size), Regularize (L2/L1), ComputeUpdateValue (per rule) and Update.

Every kernel works on the element range [lo, hi) of the flat buffers ``w`` (weights), ``g``
(gradient in, update out: Caffe leaves the update in the diff) and the rule's histories.
Per-blob rates (lr * lr_mult) and decays (weight_decay * decay_mult) come per segment:
blob ``s`` owns [bounds[s], bounds[s + 1]). All scalars are float32 and the arithmetic is
float32 in the order Caffe's CPU code uses, so the result is the same as Caffe's separate
passes (no fused multiply-add: Numba does not contract without fastmath).
"""
import numpy as np
from numba import njit

NO_DECAY, L2, L1 = 0, 1, 2


@njit(cache=True, nogil=True)
def _gradient(g, w, iter_scale, decay, regularization):
    """Normalize by iter_size (iter_scale = 1/iter_size, 1 leaves g as is), then regularize."""
    if iter_scale != 1:
        g = g * iter_scale
    if regularization == 1:
        g = g + decay * w
    elif regularization == 2:
        g = g + decay * np.sign(w)
    return g


@njit(cache=True, nogil=True)
def sgd(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, momentum):
    """h = momentum h + rate g; w -= h."""
    for s in range(rates.size):
        a, b = max(bounds[s], lo), min(bounds[s + 1], hi)
        rate, decay = rates[s], decays[s]
        for i in range(a, b):
            k = np.uint64(i)
            v = h[k] * momentum + rate * _gradient(g[k], w[k], iter_scale, decay, regularization)
            h[k] = v
            g[k] = v
            w[k] = w[k] - v


@njit(cache=True, nogil=True)
def nesterov(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, momentum,
             one_plus_momentum):
    """h' = momentum h + rate g; update = (1 + momentum) h' - momentum h."""
    for s in range(rates.size):
        a, b = max(bounds[s], lo), min(bounds[s + 1], hi)
        rate, decay = rates[s], decays[s]
        for i in range(a, b):
            k = np.uint64(i)
            previous = h[k]
            v = previous * momentum + rate * _gradient(g[k], w[k], iter_scale, decay, regularization)
            h[k] = v
            u = one_plus_momentum * v - momentum * previous
            g[k] = u
            w[k] = w[k] - u


@njit(cache=True, nogil=True, error_model='numpy')
def adagrad(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, delta):
    """h += g^2; update = rate g / (sqrt(h) + delta)."""
    for s in range(rates.size):
        a, b = max(bounds[s], lo), min(bounds[s + 1], hi)
        rate, decay = rates[s], decays[s]
        for i in range(a, b):
            k = np.uint64(i)
            gi = _gradient(g[k], w[k], iter_scale, decay, regularization)
            v = h[k] + gi * gi
            h[k] = v
            u = rate * (gi / (np.sqrt(v) + delta))
            g[k] = u
            w[k] = w[k] - u


@njit(cache=True, nogil=True, error_model='numpy')
def rmsprop(w, g, h, lo, hi, bounds, rates, decays, iter_scale, regularization, rms_decay,
            one_minus_decay, delta):
    """h = decay h + (1 - decay) g^2; update = rate g / (sqrt(h) + delta)."""
    for s in range(rates.size):
        a, b = max(bounds[s], lo), min(bounds[s + 1], hi)
        rate, decay = rates[s], decays[s]
        for i in range(a, b):
            k = np.uint64(i)
            gi = _gradient(g[k], w[k], iter_scale, decay, regularization)
            v = h[k] * rms_decay + one_minus_decay * (gi * gi)
            h[k] = v
            u = rate * (gi / (np.sqrt(v) + delta))
            g[k] = u
            w[k] = w[k] - u


@njit(cache=True, nogil=True, error_model='numpy')
def adadelta(w, g, h, h_update, lo, hi, bounds, rates, decays, iter_scale, regularization,
             momentum, one_minus_momentum, delta):
    """h = m h + (1-m) g^2; u = g sqrt((h_update + delta) / (h + delta));
    h_update = m h_update + (1-m) u^2; update = rate u."""
    for s in range(rates.size):
        a, b = max(bounds[s], lo), min(bounds[s + 1], hi)
        rate, decay = rates[s], decays[s]
        for i in range(a, b):
            k = np.uint64(i)
            gi = _gradient(g[k], w[k], iter_scale, decay, regularization)
            v = h[k] * momentum + one_minus_momentum * (gi * gi)
            h[k] = v
            u = gi * np.sqrt((h_update[k] + delta) / (v + delta))
            h_update[k] = h_update[k] * momentum + one_minus_momentum * (u * u)
            step = rate * u
            g[k] = step
            w[k] = w[k] - step


@njit(cache=True, nogil=True, error_model='numpy')
def adam(w, g, m, v, lo, hi, bounds, rates, decays, iter_scale, regularization, beta1,
         one_minus_beta1, beta2, one_minus_beta2, correction, delta):
    """m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2; update = rate correction m / (sqrt(v) + delta)."""
    for s in range(rates.size):
        a, b = max(bounds[s], lo), min(bounds[s + 1], hi)
        rate, decay = rates[s] * correction, decays[s]
        for i in range(a, b):
            k = np.uint64(i)
            gi = _gradient(g[k], w[k], iter_scale, decay, regularization)
            mk = m[k] * beta1 + one_minus_beta1 * gi
            vk = v[k] * beta2 + one_minus_beta2 * (gi * gi)
            m[k] = mk
            v[k] = vk
            u = rate * (mk / (np.sqrt(vk) + delta))
            g[k] = u
            w[k] = w[k] - u
