"""WorkerOrderReduction in one process (the MPI runs are in test_mpi_training): the sum is the
left-to-right float32 sum in worker order, whatever order the workers were computed in."""
import os

import numpy as np
import pytest

from pycaffe_ft.parallel import node_shared
from pycaffe_ft.parallel.comm import SerialComm
from pycaffe_ft.parallel.node_shared import SharedSlots
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


@pytest.mark.skipif(not node_shared.shared_sum_wanted(), reason='no /dev/shm here')
def test_through_shared_memory_the_sum_has_the_same_bits():
    """The shared-memory path (SharedSlots: made, mapped, names removed) adds the same floats
    in the same order as the MPI exchanges."""
    rng = np.random.default_rng(1)
    grads = {v: (rng.standard_normal(1001) * 10.0 ** rng.integers(-6, 6, 1001)).astype(np.float32) for v in range(3)}
    hosting, extras = {0: [2, 0, 1]}, rng.standard_normal(5)
    by_mpi = WorkerOrderReduction(SerialComm(), hosting, 3, 1001, {}).finish(grads, extras)
    before = set(os.listdir(node_shared.SHM_DIR))
    slots = SharedSlots.build(SerialComm(), 1001, [3])
    assert slots is not None and slots.gradients(0).shape == (3, 1001)
    assert set(os.listdir(node_shared.SHM_DIR)) <= before  # mapped, and the names removed
    shared = WorkerOrderReduction(SerialComm(), hosting, 3, 1001, {}, shared=slots).finish(grads, extras)
    assert shared[0].tobytes() == by_mpi[0].tobytes() and np.array_equal(shared[1], by_mpi[1])


def test_without_room_in_shared_memory_the_sum_goes_by_mpi(monkeypatch):
    def no_room(fd, offset, length):
        raise OSError(28, 'No space left on device')
    monkeypatch.setattr(node_shared.os, 'posix_fallocate', no_room)
    before = set(os.listdir(node_shared.SHM_DIR)) if os.path.isdir(node_shared.SHM_DIR) else set()
    assert SharedSlots.build(SerialComm(), 1001, [1]) is None
    after = set(os.listdir(node_shared.SHM_DIR)) if os.path.isdir(node_shared.SHM_DIR) else set()
    assert after <= before  # the file made before the failed reservation is gone


def test_a_worker_missing_or_not_hosted_is_an_error():
    grads = {v: np.ones(10, np.float32) for v in range(3)}
    with pytest.raises(ValueError, match='this rank hosts'):
        WorkerOrderReduction(SerialComm(), {0: [0, 1, 2]}, 3, 10, {}).finish({0: grads[0]}, np.zeros(1))
    with pytest.raises(ValueError, match=r'expected 0..2 once each'):
        WorkerOrderReduction(SerialComm(), {0: [0, 1]}, 3, 10, {}).finish({0: grads[0], 1: grads[1]}, np.zeros(1))
