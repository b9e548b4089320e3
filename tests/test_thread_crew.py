"""The worker crew behind run_chunks: every chunk computed once, errors handed to the caller,
sleeping and spinning workers alike, two callers at once."""
import itertools
import threading
import time

import pytest

from pycaffe_ft import intra_op
from pycaffe_ft.thread_crew import ThreadCrew, spins_for


def _claiming_task(count, seen, pause=0.0):
    """A run_chunks-style task: calls claim items 0 .. count-1 from a shared counter."""
    claims = itertools.count()

    def task():
        for i in iter(claims.__next__, None):
            if i >= count:
                return
            if pause:
                time.sleep(pause)
            seen.append((i, threading.current_thread().name))
    return task


@pytest.mark.parametrize('spin_seconds', [0.0, 0.002])  # workers that sleep at once, or spin first
def test_every_item_runs_once_whoever_runs_it(spin_seconds):
    crew = ThreadCrew(2, spin_seconds)
    try:
        names = set()
        for round_ in range(50):
            seen = []
            crew.run(_claiming_task(7, seen, pause=1e-4), helpers=2)
            assert sorted(i for i, _ in seen) == list(range(7))
            names.update(name for _, name in seen)
            if round_ % 10 == 0:
                time.sleep(0.01)  # past the spinning: the workers sleep, the next task wakes them
        assert any(name.startswith('pycaffe-ft-op-') for name in names)  # the workers took part
    finally:
        crew.close()


def test_a_workers_error_reaches_the_caller_and_the_crew_goes_on():
    crew = ThreadCrew(1, 0.002)
    try:
        started = threading.Event()

        def task():
            if threading.current_thread().name.startswith('pycaffe-ft-op'):
                started.set()
                raise KeyError('worker failed')
            started.wait(5)  # the caller waits until the worker has run
        with pytest.raises(KeyError, match='worker failed'):
            crew.run(task, helpers=1)
        seen = []
        crew.run(_claiming_task(5, seen), helpers=1)
        assert sorted(i for i, _ in seen) == list(range(5))
    finally:
        crew.close()


def test_a_second_caller_meanwhile_runs_its_task_alone():
    crew = ThreadCrew(1, 0.002)
    try:
        inside, release = threading.Event(), threading.Event()
        first_seen, second_seen = [], []

        def first():
            if threading.current_thread().name == 'first-caller':
                inside.set()
                release.wait(5)
            _claiming_task(3, first_seen)()
        caller = threading.Thread(target=crew.run, args=(first, 1), name='first-caller')
        caller.start()
        assert inside.wait(5)
        crew.run(_claiming_task(4, second_seen), helpers=1)  # the crew is busy: runs here
        assert sorted(i for i, _ in second_seen) == list(range(4))
        assert {name for _, name in second_seen} == {threading.current_thread().name}
        release.set()
        caller.join(5)
        assert not caller.is_alive()
    finally:
        crew.close()


def test_closing_ends_the_workers():
    crew = ThreadCrew(2, 0.002)
    crew.close()
    for thread in crew.threads:
        thread.join(5)
    assert not any(thread.is_alive() for thread in crew.threads)


def test_spins_scale_with_the_time_asked_for():
    assert spins_for(0) == 0
    assert spins_for(0.004) > spins_for(0.001) > 0


def test_the_crew_does_not_spin_where_threads_outnumber_the_cores(restore_threads, monkeypatch):
    monkeypatch.setattr(intra_op, 'usable_cores', lambda: 2)
    monkeypatch.setattr(intra_op, 'ranks_on_this_node', lambda: 2)
    intra_op.set_num_threads(2)
    assert intra_op._spins_now() == 0.0
    monkeypatch.setattr(intra_op, 'ranks_on_this_node', lambda: 1)
    assert intra_op._spins_now() == intra_op.SPIN_SECONDS
