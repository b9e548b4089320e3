"""WorkerOrderReduction in one process (the MPI runs are in test_mpi_training): the sum is the
left-to-right float32 sum in worker order, whatever order the workers were computed in."""
import numpy as np
import pytest

from pycaffe_ft.parallel.comm import SerialComm
from pycaffe_ft.parallel.ordered import WorkerOrderReduction


def test_the_sum_is_the_float32_sum_in_worker_order():
    rng = np.random.default_rng(0)
    grads = {v: (rng.standard_normal(1001) * 10.0 ** rng.integers(-6, 6, 1001)).astype(np.float32) for v in range(4)}
    expected = grads[0].copy()
    for v in (1, 2, 3):
        expected += grads[v]
    extras = rng.standard_normal(7)
    buffers = {}
    for hosted in ([3, 1, 0, 2], [0, 1, 2, 3]):  # the order a rank computed them in does not matter
        reduction = WorkerOrderReduction(SerialComm(), {0: hosted}, 4, 1001, buffers)
        total, extras_sum = reduction.finish({v: grads[v] for v in hosted}, extras)
        assert total.tobytes() == expected.tobytes()
        assert np.array_equal(extras_sum, extras)


def test_a_worker_missing_or_not_hosted_is_an_error():
    grads = {v: np.ones(10, np.float32) for v in range(3)}
    with pytest.raises(ValueError, match='this rank hosts'):
        WorkerOrderReduction(SerialComm(), {0: [0, 1, 2]}, 3, 10, {}).finish({0: grads[0]}, np.zeros(1))
    with pytest.raises(ValueError, match=r'expected 0..2 once each'):
        WorkerOrderReduction(SerialComm(), {0: [0, 1]}, 3, 10, {}).finish({0: grads[0], 1: grads[1]}, np.zeros(1))
