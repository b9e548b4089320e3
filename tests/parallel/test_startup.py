"""The --np launcher's watch over the ranks' MPI start-up (pycaffe_ft.parallel.startup), from
the marks the ranks leave: a rank dead before its MPI started, with the others waiting in
MPI_Init, fails the start-up after START_GRACE_S; ranks without MPI after START_TIMEOUT_S too;
ranks that are up go on without a dead one. The real thing (a rank SIGKILLed before MPI_Init,
the job started again) is in test_mpi_training.py."""
import os
import subprocess
import sys

import pytest

from pycaffe_ft.parallel import startup
from pycaffe_ft.parallel.startup import StartupWatch


@pytest.fixture
def marks(tmp_path, monkeypatch):
    """``marks(rank, pid, up=False)`` leaves rank ``rank``'s marks as the rank would
    (``mark_rank_started`` run with its pid and rank); returns the status path."""
    status = str(tmp_path / '.pycaffe-ft-job-1.status')
    monkeypatch.setenv('PYCAFFE_FT_STATUS_FILE', status)

    def mark(rank, pid, up=False):
        monkeypatch.setenv('OMPI_COMM_WORLD_RANK', str(rank))
        with monkeypatch.context() as m:
            m.setattr(os, 'getpid', lambda: pid)
            startup.mark_rank_started()
        if up:
            open('%s.up%d' % (status, rank), 'w').close()
        return status
    return mark


def dead_pid():
    proc = subprocess.Popen([sys.executable, '-c', 'pass'])
    proc.wait()  # reaped: no such process any more
    return proc.pid


def test_a_rank_dead_before_its_mpi_started_fails_the_start_up_after_the_grace(marks, monkeypatch):
    status = marks(0, os.getpid(), up=True)
    marks(1, dead_pid())
    marks(2, os.getpid())
    watch = StartupWatch(status, 3)
    assert watch.ranks_ran() and watch.mpi_started()
    assert watch.failure() is None  # within the grace: the others may still come up
    monkeypatch.setattr(startup, 'START_GRACE_S', 0.0)
    reason = watch.failure()
    assert 'rank 1 was killed or ended before its MPI had started' in reason and 'rank 2 was still in MPI_Init' in reason


def test_ranks_that_are_up_go_on_without_a_dead_one(marks, monkeypatch):
    monkeypatch.setattr(startup, 'START_GRACE_S', 0.0)
    status = marks(0, os.getpid(), up=True)
    marks(1, dead_pid())
    marks(2, os.getpid(), up=True)
    watch = StartupWatch(status, 3)
    assert watch.failure() is None and not watch.watching  # they shrink COMM_WORLD (comm.ULFMComm)


def test_every_rank_up_ends_the_watch(marks):
    status = marks(0, os.getpid(), up=True)
    marks(1, os.getpid(), up=True)
    watch = StartupWatch(status, 2)
    assert watch.failure() is None and not watch.watching


def test_ranks_still_without_mpi_after_the_timeout_fail_the_start_up(marks, monkeypatch):
    status = marks(0, os.getpid(), up=True)  # rank 1 never marked (ended before its first mark)
    watch = StartupWatch(status, 3)
    marks(2, os.getpid())
    assert watch.failure() is None
    monkeypatch.setattr(startup, 'START_TIMEOUT_S', 0.0)
    assert watch.failure() == 'ranks 1 and 2 were still without MPI 0 s after the first rank began'


def test_other_hosts_are_not_watched_and_the_marks_are_cleared(marks, monkeypatch):
    monkeypatch.setattr(startup, 'START_GRACE_S', 0.0)
    monkeypatch.setattr(startup, 'START_TIMEOUT_S', 0.0)
    status = marks(0, dead_pid())
    watch = StartupWatch(status, 2, local=False)
    assert watch.failure() is None and watch.ranks_ran() and not watch.mpi_started()
    marks(1, os.getpid(), up=True)
    assert not watch.rank_errors()
    startup.mark_rank_error()  # (rank 1's, from the environment)
    assert watch.rank_errors()
    watch.clear()
    assert not watch.ranks_ran() and not watch.mpi_started() and not watch.rank_errors()
    assert not [f for f in os.listdir(os.path.dirname(status)) if f.startswith('.pycaffe-ft-job')]


def test_no_marks_outside_the_launcher(tmp_path, monkeypatch):
    monkeypatch.delenv('PYCAFFE_FT_STATUS_FILE', raising=False)
    monkeypatch.chdir(tmp_path)
    startup.mark_rank_started()
    startup.mark_rank_error()
    assert os.listdir(tmp_path) == []
