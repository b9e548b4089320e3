"""Atomic file writes: temp file in the same directory, fsync, rename.

A crash (or SIGKILL) at any moment leaves either the old file or the complete new one,
never a half-written file under the final name.
"""
import os
import tempfile

__all__ = ['atomic_write_bytes']


def _umask():
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path, data, midway=None):
    """Write ``data`` to ``path`` atomically; raise OSError (e.g. disk full) with no trace left.

    ``midway()``, if given, runs when half of the data is written (fault injection).
    """
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix='.' + os.path.basename(path) + '.', suffix='.tmp',
                               dir=directory)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # as open() would: mkstemp's 0600 ignores the umask
        with os.fdopen(fd, 'wb') as f:
            half = len(data) // 2
            f.write(data[:half])
            if midway is not None:
                f.flush()
                midway()
            f.write(data[half:])
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:
        dir_fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dir_fd)
    except OSError:
        pass
    finally:
        os.close(dir_fd)
