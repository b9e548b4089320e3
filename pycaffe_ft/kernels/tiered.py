"""Tiered compilation: the vector kernels that take Numba a second or more to compile run, the
first time a process needs them, as their reference (a plain kernel with the same bits that
compiles in a fraction of the time) while a worker process compiles them into Numba's on-disk
cache on the other core; once the worker is done, the fast kernels run.

This is what a user waits for on the first run after installing, and whenever a net needs a
kernel not compiled before: a deploy script's first forward, a training run's first iteration.
With the cache warm nothing changes: :func:`ready` loads the fast kernel from the cache on its
first call, as Numba would.

A caller with a tiered kernel runs ``kernel(*args)`` where ``ready(kernel, args)`` and its
reference otherwise. The reference must give the kernel's bits for every input (a pass may run
either), and ``args`` must be exactly what the kernel is called with (its compile is for their
types). :func:`ready` answers, per kernel and argument types:

- True once the kernel is compiled in this process (one set lookup: the common case), or when
  Numba's cache has it (then it is loaded first);
- else False, after handing the compile to the worker, and False while the worker compiles it
  (the net goes on with the reference: waiting would only idle);
- True once the worker has answered: the kernel is loaded from the cache.

Tools that time passes call :func:`finish` after their warm-up, so that they time the fast
kernels. Where the worker is not used the kernels compile in place, as without tiers: with
``PYCAFFE_FT_BACKGROUND_COMPILE=0`` (the test suite sets it, so that every test runs the kernel
it names), in an MPI job (each rank would compile the same kernels), once the worker could not
start or has ended, and for a compile the worker has not answered within ``WAIT_SECONDS``. A
compile the worker could not do (or not cache) is done in place.
"""
import base64
import importlib
import itertools
import os
import pickle
import subprocess
import sys
import threading
import time

from ..parallel.launcher import in_mpi_job

__all__ = ['ready', 'finish', 'ENV']

ENV = 'PYCAFFE_FT_BACKGROUND_COMPILE'
"""Set to 0 to compile every kernel in place, on its first call."""

WAIT_SECONDS = 300.0
"""How long one compile may take in the worker (they take seconds) before the kernel is compiled
in place and the worker is no longer used."""

_ready = set()  # kernels compiled in this process
_jobs = {}  # (kernel, argument types) -> _Job handed to the worker
_lock = threading.Lock()
_worker = [None]  # the _Worker once started; False once it could not start or has ended


def _forget_worker():
    """After fork(): the child shares the parent's pipes to the worker but not its answer
    reader; it starts its own worker if it needs one."""
    global _lock
    _lock = threading.Lock()
    _jobs.clear()
    _worker[0] = None


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_forget_worker)


def finish():
    """Wait for every compile handed to the worker (tools that time passes after a warm-up,
    tests); the next :func:`ready` of each loads it."""
    with _lock:
        jobs = list(_jobs.values())
    for job in jobs:
        job.done.wait(WAIT_SECONDS)


def ready(kernel, args):
    """Whether to run ``kernel(*args)`` now (see the module's docstring); False: run its
    reference."""
    if kernel in _ready:
        return True
    with _lock:
        return _first_calls(kernel, args)


def _first_calls(kernel, args):
    types = tuple(kernel.typeof_pyval(a) for a in args)
    job = _jobs.get((kernel, types))
    if job is None:
        if types in kernel.overloads or not _worker_wanted() or _in_cache(kernel, types):
            return _load(kernel, types)
        worker = _start_worker()
        job = worker.submit(kernel, types) if worker is not None else None
        if job is None:
            return _load(kernel, types)
        _jobs[kernel, types] = job
        return False
    if not job.done.is_set() and _worker[0] is not False:
        if time.monotonic() - job.submitted < WAIT_SECONDS:
            return False
        _worker[0] = False  # a worker this slow is stuck: compile here from now on
    return _load(kernel, types)


def _load(kernel, types):
    """Compile (from Numba's cache where it has the kernel) and mark ready."""
    kernel.compile(types)
    _ready.add(kernel)
    return True


def _worker_wanted():
    return os.environ.get(ENV, '1').strip() != '0' and _worker[0] is not False and not in_mpi_job()


def _in_cache(kernel, types):
    """Whether Numba's on-disk cache holds ``kernel`` for these argument types."""
    cache = getattr(kernel, '_cache', None)
    try:
        return cache is not None and cache.load_overload(types, kernel.targetctx) is not None
    except Exception:  # an unreadable cache entry: Numba will compile it
        return False


def _start_worker():
    if _worker[0] is None:
        try:
            _worker[0] = _Worker()
        except OSError:
            _worker[0] = False
    return _worker[0] or None


class _Job:
    """A compile handed to the worker; ``done`` is set when it has ended (or the worker has)."""

    def __init__(self):
        self.submitted = time.monotonic()
        self.done = threading.Event()


class _Worker:
    """A Python process running :func:`_serve` (from this package, whatever the working
    directory holds): one compile request per line on its stdin, one answer per line on its
    stdout, read by a thread here. When this process ends first, the worker finishes the
    compiles it was given (so that the next run finds them in the cache) and ends; Numba
    writes each cache file whole (a new file renamed into place)."""

    def __init__(self):
        env = dict(os.environ, **{ENV: '0', 'OPENBLAS_NUM_THREADS': '1', 'OMP_NUM_THREADS': '1'})
        package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        serve = 'import sys; sys.path.insert(0, %r); from %s import _serve; _serve(sys.stdin, sys.stdout)' % (
            package_parent, __name__)
        self._process = subprocess.Popen([sys.executable, '-c', serve], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=subprocess.DEVNULL, text=True, env=env)
        self._pending = {}
        self._numbers = itertools.count()
        threading.Thread(target=self._read_answers, name='pycaffe-ft compile answers', daemon=True).start()

    def submit(self, kernel, types):
        """The job compiling ``kernel`` for ``types``; None if it cannot be handed over (the
        worker has ended; argument types that do not pickle)."""
        try:
            request = pickle.dumps((kernel.py_func.__module__, kernel.py_func.__qualname__, types))
        except Exception:  # noqa: BLE001  (any pickling failure: compile in place)
            return None
        number = next(self._numbers)
        job = self._pending[number] = _Job()
        try:
            self._process.stdin.write('%d %s\n' % (number, base64.b64encode(request).decode()))
            self._process.stdin.flush()
        except (OSError, ValueError):  # the worker has ended
            _worker[0] = False
            self._pending.pop(number, None)
            return None
        return job

    def _read_answers(self):
        """Set each answered job done; once the worker has ended (or said something else),
        every job still pending too, and stop using the worker."""
        try:
            for line in self._process.stdout:
                self._pending.pop(int(line), _Job()).done.set()
        except ValueError:
            pass
        finally:
            _worker[0] = False
            for job in list(self._pending.values()):
                job.done.set()


def _serve(requests, answers):
    """The worker: compile each requested (module, qualified name, argument types) into Numba's
    cache and answer the request's number. A compile that fails here is answered all the same:
    the caller then compiles in place and meets the error itself. Once the caller has ended
    (no one reads the answers) the remaining requests are still compiled."""
    for line in requests:
        number, request = line.split()
        try:
            module, qualname, types = pickle.loads(base64.b64decode(request))
            kernel = importlib.import_module(module)
            for name in qualname.split('.'):
                kernel = getattr(kernel, name)
            kernel.compile(types)
        except Exception:  # noqa: BLE001  (reported by the caller's own compile)
            pass
        try:
            answers.write(number + '\n')
            answers.flush()
        except OSError:
            pass

