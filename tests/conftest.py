"""Fixtures shared by the test modules."""
import pytest

from pycaffe_ft import intra_op


@pytest.fixture
def restore_threads():
    """Put the thread policy back as it was after a test that sets the thread count."""
    intra_op.num_threads()
    before = dict(intra_op._state)
    yield
    intra_op.set_num_threads(before['threads'])
    intra_op._state.update({k: before[k] for k in ('threads', 'source', 'watch')})
