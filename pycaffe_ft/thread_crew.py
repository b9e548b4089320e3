"""The worker threads :func:`pycaffe_ft.intra_op.run_chunks` hands its tasks to.

A task goes to workers that are awake: between tasks a worker spins on a flag (without the
GIL, :mod:`pycaffe_ft.kernels.spin`) for up to ``spin_seconds`` before it sleeps, and the
calling thread waits for the workers the same way. A thread pool whose workers sleep between
tasks paid, on this project's 2-vCPU virtual machine, ~40 us to hand a task over (the futex wake
and an interrupt to the halted virtual CPU), ~60 us before the worker ran and ~50 us to wake the
caller at the end: ~0.12 ms a call, against layers of 0.1-1 ms (LeNet at batch 64 makes eleven
such calls a step). Spinning costs a core for up to ``spin_seconds`` after each task, so the
crew spins only where every thread has a core of its own (see ``intra_op``).
"""
import functools
import threading
import time

import numpy as np

from .kernels.spin import await_other, await_value, publish, publish_then_await_other
from .kernels.tiered import busy, ready

__all__ = ['ThreadCrew', 'spins_for', 'kernels_ready']

_LINE = 8  # int64 flags a 64-byte cache line: each flag on a line of its own
_TASK = 0  # the flag holding the number of the latest task
_CALIBRATION_SPINS = 1 << 14

LINGER_SECONDS = 25e-6
"""How long a spinning worker waits, once it sees a task, before it asks for the GIL: the
caller holds the GIL from publishing the task until its first chunk's kernel releases it, and a
worker that asks meanwhile sleeps on the GIL until woken (an interrupt to its halted virtual
CPU). LeNet at two threads, 8 alternated rounds: 6.47 -> 6.24 ms a step."""


@functools.lru_cache(maxsize=None)
def _spins_per_second():
    """Spins of :func:`~pycaffe_ft.kernels.spin.await_other` a second on this CPU (timed once a
    process)."""
    flags = np.zeros(1, np.int64)
    await_other(flags, 0, 0, 1)  # load (or compile) the kernel before timing it
    start = time.perf_counter()
    await_other(flags, 0, 0, _CALIBRATION_SPINS)
    return _CALIBRATION_SPINS / max(time.perf_counter() - start, 1e-9)


def kernels_ready():
    """Whether the crew's spin kernels are compiled (or in Numba's cache) and the background
    worker (:mod:`pycaffe_ft.kernels.tiered`, passes from an empty cache) is not compiling.
    Until then callers run their tasks alone: the same results, without 0.3 s of compiling
    first, and without spinning threads sharing the worker's core (a LeNet step at two
    threads took 32-41 ms so, against 15-19 ms on one thread running the references)."""
    if not _KERNELS_READY:
        flags = np.zeros(1, np.int64)
        if all([ready(await_other, (flags, 0, 0, 1)), ready(await_value, (flags, 0, 0, 1)),
                ready(publish, (flags, 0, 0)), ready(publish_then_await_other, (flags, 0, 0, 0, 0, 1, 1))]):
            _KERNELS_READY.append(True)
    return bool(_KERNELS_READY) and not busy()


_KERNELS_READY = []


def spins_for(seconds):
    """How many spins of :func:`~pycaffe_ft.kernels.spin.await_other` take about ``seconds``
    on this CPU."""
    return max(1, int(seconds * _spins_per_second())) if seconds > 0 else 0


class ThreadCrew:
    """``workers`` daemon threads that call a task beside the calling thread (:meth:`run`).

    Threads are named ``pycaffe-ft-op-<i>``. A crew runs one task at a time; a second thread
    calling :meth:`run` meanwhile runs its task alone."""

    def __init__(self, workers, spin_seconds):
        self.workers, self.spin_seconds = workers, spin_seconds
        self.spins = spins_for(spin_seconds)
        self.linger = spins_for(LINGER_SECONDS) if spin_seconds > 0 else 0
        self.flags = np.zeros(_LINE * (workers + 1), np.int64)  # the task number, then each worker's last done
        self._job = (0, None, 0)  # (task number, task, helpers): replaced whole, read whole
        self._errors = [None] * workers
        self._wake = threading.Condition()
        self._sleeping = 0
        self._closed = False
        self._busy = threading.Lock()
        self.threads = [threading.Thread(target=self._serve, args=(w,), name='pycaffe-ft-op-%d' % w, daemon=True)
                        for w in range(workers)]
        for thread in self.threads:
            thread.start()

    def run(self, task, helpers):
        """``task()`` here and on ``helpers`` (at most ``workers``) workers at once; returns
        once every call has returned, raising the first error a worker's call raised.

        ``task`` must be safe to call from several threads at once and must finish the whole
        job whichever threads call it (``run_chunks`` has each call claim chunks from a shared
        counter until none is left): a worker may start late, or, while another thread's run
        holds the crew, not at all."""
        if not self._busy.acquire(blocking=False):
            task()
            return
        try:
            number = self._job[0] + 1
            self._job = (number, task, helpers)
            publish(self.flags, _TASK, number)
            if self._sleeping:
                with self._wake:
                    self._wake.notify_all()
            try:
                task()
            finally:
                self._await_helpers(number, helpers)
                self._job = (number, None, 0)
            errors = [e for e in self._errors[:helpers] if e is not None]
            self._errors[:helpers] = [None] * helpers
            if errors:
                raise errors[0]
        finally:
            self._busy.release()

    def _await_helpers(self, number, helpers):
        """Spin until each helper has finished task ``number``, then poll (the helper is
        late: another process has its core)."""
        for w in range(helpers):
            pause = 5e-5
            while not await_value(self.flags, _LINE * (w + 1), number, self.spins):
                time.sleep(pause)
                pause = min(2 * pause, 1e-3)

    def close(self):
        """Let the workers end (they are daemons: nothing waits for them)."""
        self._closed = True
        number = self._job[0] + 1
        self._job = (number, None, 0)
        publish(self.flags, _TASK, number)
        with self._wake:
            self._wake.notify_all()

    def _serve(self, w):
        done = _LINE * (w + 1)
        seen = 0
        latest = await_other(self.flags, _TASK, seen, self.spins)
        while not self._closed:
            if latest == seen:  # spun out: sleep until the next task
                with self._wake:
                    self._sleeping += 1
                    while self.flags[_TASK] == seen and not self._closed:
                        self._wake.wait()
                    self._sleeping -= 1
                if self._closed:
                    return
            number, task, helpers = self._job  # published before the flag: at least as new
            if w < helpers:
                try:
                    task()
                except BaseException as e:  # handed to the caller, which raises it
                    self._errors[w] = e
            seen = number
            latest = publish_then_await_other(self.flags, done, number, _TASK, seen, self.spins, self.linger)
