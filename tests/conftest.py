"""Fixtures shared by the test modules; every kernel compiles in place, on its first call (no
background compiles: each test runs the kernel it names, and tests/kernels/test_tiered.py turns
them on where it tests them)."""
import os

import pytest

from pycaffe_ft import intra_op
from pycaffe_ft.kernels import tiered

os.environ[tiered.ENV] = '0'


@pytest.fixture
def restore_threads():
    """Put the thread policy back as it was after a test that sets the thread count."""
    intra_op.num_threads()
    before = dict(intra_op._state)
    yield
    intra_op.set_num_threads(before['threads'])
    intra_op._state.update({k: before[k] for k in ('threads', 'source', 'watch')})
