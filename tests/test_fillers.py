"""Caffe's fillers: values follow each filler's definition."""
import numpy as np
import pytest

from pycaffe_ft.errors import LayerSetupError
from pycaffe_ft.fillers import fill
from pycaffe_ft.proto import caffe_pb2


def run(shape=(1000, 3, 2, 2), **kw):
    a = np.zeros(shape, np.float32)
    return fill(caffe_pb2.FillerParameter(**kw), a, np.random.default_rng(5))


def test_constant_and_uniform():
    assert np.all(run(type='constant', value=1.5) == 1.5)
    u = run(type='uniform', min=-2, max=3)
    assert u.min() >= -2 and u.max() <= 3 and abs(u.mean() - 0.5) < 0.05


def test_gaussian_and_sparse():
    g = run(type='gaussian', mean=1, std=2)
    assert abs(g.mean() - 1) < 0.05 and abs(g.std() - 2) < 0.05
    s = run(shape=(10, 2000), type='gaussian', std=1, sparse=3)
    assert abs(np.mean(s != 0) - 0.3) < 0.02


@pytest.mark.parametrize('norm,n', [(0, 12), (1, 4000), (2, 2006)])
def test_xavier_and_msra_variance_norm(norm, n):
    x = run(type='xavier', variance_norm=norm)
    bound = np.sqrt(3.0 / n)
    assert np.abs(x).max() <= bound and abs(x.std() - bound / np.sqrt(3)) < 0.02 * bound
    m = run(type='msra', variance_norm=norm)
    assert abs(m.std() - np.sqrt(2.0 / n)) < 0.02 * np.sqrt(2.0 / n)


def test_positive_unitball_rows_sum_to_one():
    p = run(shape=(20, 3, 4), type='positive_unitball')
    assert np.all(p >= 0) and np.allclose(p.reshape(20, -1).sum(1), 1, atol=1e-5)


def test_bilinear_is_the_upsampling_kernel():
    b = run(shape=(2, 1, 4, 4), type='bilinear')
    row = np.array([0.25, 0.75, 0.75, 0.25])
    assert np.allclose(b[0, 0], np.outer(row, row)) and np.array_equal(b[0], b[1])
    with pytest.raises(LayerSetupError):
        run(shape=(2, 1, 4, 3), type='bilinear')


def test_unknown_filler_lists_known():
    with pytest.raises(LayerSetupError, match='xavier'):
        run(type='xavier2')
