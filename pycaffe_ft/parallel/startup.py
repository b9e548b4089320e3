"""The ranks' MPI start-up, watched by the --np launcher.

Open MPI's start-up has, rarely here, crashed a rank inside ``MPI_Init_thread``. What follows
depends on where the others are: past their own start-up they are told of the failure and go
on without it (``ULFMComm`` shrinks COMM_WORLD); still inside it, they abort too (the whole job
ends with nothing trained: CI saw it once in hundreds of launches); not yet in it, they wait in
``MPI_Init`` for ever (measured: a rank SIGKILLed before its start-up leaves the others there
with ``--with-ft ulfm``). The launcher starts such a job again, which loses nothing, since no
rank has trained; it tells these cases apart by marks the ranks leave beside the job's status
file (``PYCAFFE_FT_STATUS_FILE``, in the job's directory):

- ``STATUS.rankR``: rank R's process has started (its pid, start time and host);
- ``STATUS.upR``: rank R's MPI has started (``mpi4py.MPI`` is imported);
- ``STATUS.errorR``: rank R ended with an error of its own (a bad solver, say): starting the
  job again would give the same error, so the launcher does not.

The rank side is :func:`mark_rank_started`, :func:`start_mpi` and :func:`mark_rank_error`, the
launcher's side :class:`StartupWatch`.
"""
import os
import socket
import time

from .. import faults
from .launcher import process_start_time, process_stat

__all__ = ['mark_rank_started', 'start_mpi', 'mark_rank_error', 'StartupWatch', 'START_GRACE_S', 'START_TIMEOUT_S']

START_GRACE_S = 10.0
"""How long the ranks that are alive get to finish their start-up after a rank died in its own."""

START_TIMEOUT_S = 120.0
"""How long after the first rank started every rank's MPI must have started (ranks of this machine)."""


def _status_file():
    return os.environ.get('PYCAFFE_FT_STATUS_FILE') or None


def _launched_rank():
    return int(os.environ.get('OMPI_COMM_WORLD_RANK', '0') or 0)


def _mark(status, kind, rank):
    """The path of rank ``rank``'s mark of ``kind`` ('rank', 'up' or 'error')."""
    return '%s.%s%d' % (status, kind, rank)


def _touch(path, text=''):
    with open(path, 'w') as f:
        f.write(text)


def mark_rank_started():
    """In a rank that the --np launcher started (a no-op elsewhere): leave its first mark. Call
    once, first thing, before anything that could fail."""
    status = _status_file()
    if status:
        pid = os.getpid()
        _touch(_mark(status, 'rank', _launched_rank()),
               '%d %s %s\n' % (pid, process_start_time(pid), socket.gethostname()))


def mark_rank_error():
    """In a rank that the --np launcher started (a no-op elsewhere): it is ending with an error
    of its own. Call where the rank reports the error."""
    status = _status_file()
    if status:
        _touch(_mark(status, 'error', _launched_rank()))


def start_mpi():
    """``mpi4py.MPI``, imported here, which runs ``MPI_Init_thread``; under the --np launcher the
    rank then leaves its second mark. Fault phase ``mpi-init`` kills the rank just before."""
    faults.set_rank(_launched_rank())
    faults.check('mpi-init', 0)
    from mpi4py import MPI
    status = _status_file()
    if status:
        _touch(_mark(status, 'up', _launched_rank()))
    return MPI


class StartupWatch:
    """The launcher's view of the start-up of ``n`` ranks whose marks go beside ``status``.

    While mpiexec runs, :meth:`failure` (polled) says when the start-up has failed and the job
    must be killed: a rank of this machine died before its MPI started and, ``START_GRACE_S``
    later, the ranks still alive have not all started theirs (they wait in ``MPI_Init``), or some
    rank's MPI has not started ``START_TIMEOUT_S`` after the first rank began. On other hosts a
    rank's process cannot be seen and its marks may be in a directory of its own, so with
    ``local`` false only :meth:`ranks_ran` and :meth:`mpi_started` are told, after the job."""

    def __init__(self, status, n, local=True):
        self.status, self.n, self.local = status, n, local
        self.watching = local
        self.first_mark = self.first_death = self.failed = None

    def _up(self, rank):
        return os.path.exists(_mark(self.status, 'up', rank))

    def _process(self, rank):
        """(pid, start time, host) from rank ``rank``'s first mark; None if it has left none."""
        try:
            with open(_mark(self.status, 'rank', rank)) as f:
                pid, start, host = f.read().split()
            return int(pid), None if start == 'None' else int(start), host
        except (OSError, ValueError):  # no mark yet, or one being written
            return None

    def _dead(self, process):
        pid, start, host = process
        if host != socket.gethostname():
            return False
        fields = process_stat(pid)
        return fields is None or fields[0] in ('Z', 'X') or process_start_time(pid) != start

    def ranks_ran(self):
        """Whether any rank's process started."""
        return any(self._process(r) is not None for r in range(self.n))

    def mpi_started(self):
        """Whether any rank's MPI started."""
        return any(self._up(r) for r in range(self.n))

    def rank_errors(self):
        """Whether any rank ended with an error of its own (:func:`mark_rank_error`)."""
        return any(os.path.exists(_mark(self.status, 'error', r)) for r in range(self.n))

    def failure(self):
        """Why the start-up has failed (a sentence, kept in ``failed`` until :meth:`clear`), or
        None: not failed, or not known yet."""
        if not self.watching:
            return None
        up = [r for r in range(self.n) if self._up(r)]
        processes = {r: self._process(r) for r in range(self.n) if r not in up}
        dead = [r for r, process in processes.items() if process is not None and self._dead(process)]
        waiting = [r for r in range(self.n) if r not in up and r not in dead]
        if not waiting:  # every rank is up, or the ranks that are up go on without the dead
            self.watching = False
            return None
        now = time.monotonic()
        if self.first_mark is None and (up or any(p is not None for p in processes.values())):
            self.first_mark = now
        if dead and self.first_death is None:
            self.first_death = now
        if dead and now - self.first_death >= START_GRACE_S:
            self.failed = '%s killed or ended before its MPI had started; %s still in MPI_Init %.0f s later' % (
                _names(dead), _names(waiting), START_GRACE_S)
        elif self.first_mark is not None and now - self.first_mark >= START_TIMEOUT_S:
            self.failed = '%s still without MPI %.0f s after the first rank began' % (_names(waiting), START_TIMEOUT_S)
        return self.failed

    def clear(self):
        """Remove the marks (before the job is started again, and at the end)."""
        for r in range(self.n):
            for kind in ('rank', 'up', 'error'):
                try:
                    os.unlink(_mark(self.status, kind, r))
                except FileNotFoundError:
                    pass
        self.watching = self.local
        self.first_mark = self.first_death = self.failed = None


def _names(ranks):
    """'rank 1 was' / 'ranks 0 and 2 were' (the sentences' subjects)."""
    if len(ranks) == 1:
        return 'rank %d was' % ranks[0]
    return 'ranks %s and %d were' % (', '.join(map(str, ranks[:-1])), ranks[-1])
