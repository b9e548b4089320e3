"""Files in shared memory through which the ranks of one node add their gradients in worker order.

Over loopback TCP (the transport ULFM is run with, see DESIGN.md) the worker-order sum's two
exchanges move each rank's gradient through the kernel twice: ~1 ms of LeNet's 13 ms iteration
at two ranks. Ranks that share a node can instead read one another's gradients from memory
and keep MPI for two small synchronisations, which is also where ULFM reports a failure
(:class:`~pycaffe_ft.parallel.ordered.WorkerOrderReduction` says what goes where).

Each rank owns one file in ``/dev/shm``: a result area (the gradient's length; the rank writes
its own segment of the sum there) and a gradient area (one row per worker it hosts). Every rank
maps every file; the files are unlinked as soon as all are mapped, so a process that dies leaves
nothing behind, and the mapping lasts while anyone still uses it. Space is reserved
(``posix_fallocate``) when a file is made: too little room fails there, on every rank alike (the
sum then goes through MPI), never later as SIGBUS on a write.
"""
import mmap
import os
import secrets

import numpy as np

__all__ = ['SharedSlots', 'shared_sum_wanted']

SHM_DIR = '/dev/shm'


def shared_sum_wanted():
    """Whether to try shared memory at all (``PYCAFFE_FT_SHARED_SUM=0`` turns it off, e.g.
    to compare with the MPI exchanges)."""
    return os.environ.get('PYCAFFE_FT_SHARED_SUM', '1') != '0' and os.path.isdir(SHM_DIR)


class SharedSlots:
    """The mapped files of one membership (``comm.members``) and hosting (``rows[r]``
    workers at comm rank r), each ``size`` float32 long. Build with :meth:`build`
    (collective); :meth:`result` and :meth:`gradients` are views of rank r's areas."""

    def __init__(self, maps, size, rows):
        self._maps, self.size = maps, size
        self._arrays = [np.frombuffer(m, np.float32, count=(1 + n) * size) for m, n in zip(maps, rows)]

    def result(self, r):
        """Rank r's result area (it writes its segment of the sum there)."""
        return self._arrays[r][:self.size]

    def gradients(self, r):
        """Rank r's gradient rows, one per worker it hosts, in worker order."""
        return self._arrays[r][self.size:].reshape(-1, self.size)

    @classmethod
    def build(cls, comm, size, rows):
        """Collective over ``comm``: every rank makes its file, maps everyone's, then unlinks its
        own. Returns the slots, or None on every rank if any rank could not (no room, no
        /dev/shm, ranks on different nodes). A ProcessFailure from the communicator propagates
        (the caller's retry loop handles it), with this rank's file removed."""
        node = comm.split_shared()
        try:
            together = node.size == comm.size
        finally:
            node.free()
        token = comm.bcast(np.array([secrets.randbits(62)], np.int64), 0)[0]
        paths = [os.path.join(SHM_DIR, 'pycaffe-ft-%x-%d' % (token, r)) for r in range(comm.size)]
        mine, maps = paths[comm.rank], []
        made = False
        try:
            ok = together
            if ok:
                try:
                    fd = os.open(mine, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
                    made = True
                    try:
                        os.posix_fallocate(fd, 0, (1 + rows[comm.rank]) * size * 4)
                    finally:
                        os.close(fd)
                except OSError:
                    ok = False
            if not _all(comm, ok):
                return None
            try:
                for r, path in enumerate(paths):
                    fd = os.open(path, os.O_RDWR)
                    try:
                        maps.append(mmap.mmap(fd, (1 + rows[r]) * size * 4))
                    finally:
                        os.close(fd)
            except (OSError, ValueError):
                ok = False
            if not _all(comm, ok):  # everyone has mapped (or given up): the names can go
                return None
            return cls(maps, size, rows)
        finally:
            if made:
                try:
                    os.unlink(mine)
                except OSError:
                    pass


def _all(comm, ok):
    """Whether ``ok`` holds at every rank (one small allreduce)."""
    return comm.allreduce_sum(np.array([0.0 if ok else 1.0]))[0] == 0
