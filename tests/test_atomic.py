"""Atomic writes: the written file's mode follows the umask, as open() would (snapshots stay
readable by others on a shared cluster when the umask says so)."""
import os

import pytest

from pycaffe_ft.atomic import atomic_write_bytes


@pytest.mark.parametrize('umask, mode', [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_mode_follows_the_umask(tmp_path, umask, mode):
    before = os.umask(umask)
    try:
        path = tmp_path / 'snap.caffemodel'
        atomic_write_bytes(str(path), b'weights')
    finally:
        os.umask(before)
    assert path.read_bytes() == b'weights'
    assert os.stat(path).st_mode & 0o777 == mode
    assert [p.name for p in tmp_path.iterdir()] == ['snap.caffemodel']  # no temp file left
