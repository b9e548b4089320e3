"""LARS (``lars_eta``, a pycaffe-ft solver field): the weight trajectory of a small net against
a NumPy float64 reference of the formula, and the settings it refuses."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import SolverError

NET = '''name: "lars" force_backward: true
layer { name: "data" type: "DummyData" top: "data" top: "label"
        dummy_data_param { shape { dim: 8 dim: 6 } shape { dim: 8 }
                           data_filler { type: "gaussian" std: 1 } data_filler { type: "constant" value: 1 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1" param { lr_mult: 1 decay_mult: 1 }
        param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "relu" type: "ReLU" bottom: "ip1" top: "ip1" }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" param { lr_mult: 1 decay_mult: 2 }
        param { lr_mult: 2 decay_mult: 0 }
        inner_product_param { num_output: 3 weight_filler { type: "gaussian" std: 0.5 }
                              bias_filler { type: "constant" value: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip2" bottom: "label" top: "loss" }
'''
SOLVER = '''net: "%(net)s"
type: "%(type)s"
base_lr: 0.5
momentum: 0.9
weight_decay: 0.01
lr_policy: "fixed"
max_iter: 100
random_seed: 7
lars_eta: %(eta)s
iter_size: 2
'''


def make_solver(tmp_path, eta, kind='SGD'):
    (tmp_path / 'net.prototxt').write_text(NET)
    (tmp_path / 'solver.prototxt').write_text(SOLVER % {'net': tmp_path / 'net.prototxt', 'type': kind, 'eta': eta})
    return caffe.get_solver(str(tmp_path / 'solver.prototxt'))


def reference_update(kind, w, g, history, rate, lr_mult, decay, eta, momentum, iter_size):
    """One LARS step in float64: g normalised by iter_size; ratio eta*|w|/(|g| + decay*|w|)
    (1 where a norm is 0); then Caffe's SGD / Nesterov with the blob's rate times the ratio."""
    g = g / iter_size
    w_norm, g_norm = np.linalg.norm(w), np.linalg.norm(g)
    ratio = eta * w_norm / (g_norm + decay * w_norm) if w_norm > 0 and g_norm > 0 else 1.0
    step = rate * lr_mult * ratio * (g + decay * w)
    previous = history.copy()
    history[...] = momentum * history + step
    update = history if kind == 'SGD' else (1 + momentum) * history - momentum * previous
    return w - update


@pytest.mark.parametrize('kind', ['SGD', 'Nesterov'])
def test_trajectory_matches_the_formula(tmp_path, kind):
    solver = make_solver(tmp_path, 0.02, kind)
    net = solver.net
    mults = [(1, 0.01), (2, 0.0), (1, 0.02), (2, 0.0)]  # (lr_mult, weight_decay * decay_mult) per blob
    blobs = [b for name in ('ip1', 'ip2') for b in net.params[name]]
    expected = [b.data.astype(np.float64) for b in blobs]
    history = [np.zeros_like(e) for e in expected]
    norms_seen = set()
    for _ in range(6):
        captured = []
        solver.add_callback(None, lambda: captured.append([b.diff.astype(np.float64) for b in blobs]))
        solver.step(1)
        solver.callbacks.clear()
        (grads,) = captured
        for i, (lr_mult, decay) in enumerate(mults):
            w = blobs[i].data.astype(np.float64)
            # the gradient at the solver's current weights (the reference follows its trajectory)
            start = expected[i]
            expected[i] = reference_update(kind, start, grads[i], history[i], 0.5, lr_mult, decay, 0.02, 0.9, 2)
            assert np.abs(w - expected[i]).max() <= 1e-6 * max(1.0, np.abs(w).max()), (i, kind)
            norms_seen.add(round(float(np.linalg.norm(start)), 3))
    assert len(norms_seen) > 4  # the weights moved: the comparison was not of constants


def test_zero_biases_keep_the_plain_rate(tmp_path):
    """ip1's bias starts at 0: its LARS ratio is 1, so its first step is plain SGD's."""
    solver = make_solver(tmp_path, 0.02)
    bias = solver.net.params['ip1'][1]
    assert not bias.data.any()
    captured = []
    solver.add_callback(None, lambda: captured.append(bias.diff.astype(np.float64)))
    solver.step(1)
    np.testing.assert_allclose(bias.data, -0.5 * 2 * captured[0] / 2, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize('eta, kind, message', [('-0.1', 'SGD', 'positive'), ('nan', 'SGD', 'lars_eta: nan'),
                                                 ('0.01', 'Adam', 'SGD and Nesterov')])
def test_refused_settings(tmp_path, eta, kind, message):
    with pytest.raises(SolverError, match=message):
        make_solver(tmp_path, eta, kind)
