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
  (the net goes on with the reference: waiting would only idle). Meanwhile a call for other
  argument types gets False too, untyped (typing a call's arguments took LeNet ~5 ms a step),
  and is handed over once that compile is done;
- True once the worker has answered: the kernel is loaded from the cache.

Kernels without a reference that a later pass will surely call (a training net's backward:
the convolutions' weight-gradient reference, the im2col backward's chunk kernel and C
functions) are handed to the worker :func:`ahead`, when the net is built: they compile on the
other core while the first forward passes compile theirs here, and the backward, after
:func:`await_ahead`, loads them from the cache (while it waits for one, it compiles here the
last one the worker has not started). C functions (:mod:`.c_functions`) are tiered
as kernels are (:func:`c_function_ready`).

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

from numba.core.caching import FunctionCache
from numba.core.registry import cpu_target
from numba.core.types import Type

from ..parallel.launcher import in_mpi_job
from .c_functions import c_function, c_function_made

__all__ = ['ready', 'call', 'c_function_ready', 'ahead', 'await_ahead', 'busy', 'finish', 'ENV']

ENV = 'PYCAFFE_FT_BACKGROUND_COMPILE'
"""Set to 0 to compile every kernel in place, on its first call."""

WAIT_SECONDS = 300.0
"""How long one compile may take in the worker (they take seconds) before the kernel is compiled
in place and the worker is no longer used."""

_ready = set()  # kernels compiled in this process
_jobs = {}  # (kernel, argument types) -> _Job handed to the worker
_ahead = {}  # kernel -> its _Jobs handed ahead of a first call (ahead), until awaited
_latest = {}  # kernel -> its latest _Job handed to the worker
_lock = threading.Lock()
_worker = [None]  # the _Worker once started; False once it could not start or has ended


def _forget_worker():
    """After fork(): the child shares the parent's pipes to the worker but not its answer
    reader; it starts its own worker if it needs one."""
    global _lock
    _lock = threading.Lock()
    _jobs.clear()
    _ahead.clear()
    _latest.clear()
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


def busy():
    """Whether the worker is compiling for this process (compiles handed to it and not done):
    work that would spread over both cores keeps to one meanwhile (the worker has the other)."""
    return bool(_worker[0]) and not all(job.done.is_set() for job in list(_jobs.values()))


def ready(kernel, args):
    """Whether to run ``kernel(*args)`` now (see the module's docstring); False: run its
    reference."""
    if kernel in _ready:
        return True
    job = _latest.get(kernel)
    if job is not None and _running(job):
        return False  # the worker compiles it: no typing of the arguments on every call meanwhile
    with _lock:
        return _tier(kernel, tuple(kernel.typeof_pyval(a) for a in args))


def call(kernel, reference, *args):
    """``kernel(*args)`` where :func:`ready`, else ``reference(*args)``."""
    return (kernel if ready(kernel, args) else reference)(*args)


def c_function_ready(function, signature):
    """:func:`ready` for a C function (:func:`.c_functions.c_function`): whether to pass
    ``c_function(function, signature)`` now; False: pass its reference's."""
    if function in _ready:
        return True
    with _lock:
        return _tier(function, signature)


def ahead(kernel, args):
    """Hand a compile to the worker now, ahead of its first call: ``kernel`` a dispatcher and
    ``args`` values of its call's types (or Numba types), or ``kernel`` a Python function made a
    C function (:func:`.c_functions.c_function`) and ``args`` its signature. For what a later
    pass will call for sure (a training net's backward, known once the net is built): it then
    compiles on the other core during the passes before (see :func:`await_ahead`). Nothing
    happens where the worker is not used or the kernel is compiled or cached already."""
    with _lock:
        if hasattr(kernel, 'py_func'):
            args = tuple(a if isinstance(a, Type) else kernel.typeof_pyval(a) for a in args)
        if (kernel, args) in _jobs or kernel in _ready or not _worker_wanted():
            return
        _after_other_runs()
        job = None if _compiled(kernel, args) else _hand_over(kernel, args)
        if job is not None:
            _ahead.setdefault(kernel, []).append(job)


def await_ahead(kernel):
    """Before calling ``kernel`` (or making it a C function): wait for the compiles of it handed
    :func:`ahead` that the worker has not finished, so that Numba loads them from its cache
    rather than repeating them here. Meanwhile this process compiles the ahead compiles handed
    after them, last first (:func:`_take_over_last`). Once they are done this is a dict
    lookup."""
    jobs = _ahead.get(kernel)
    if jobs:
        for job in jobs:
            while _running(job) and _take_over_last(job):
                pass
            job.done.wait(WAIT_SECONDS)
        _ahead.pop(kernel, None)


def _take_over_last(awaited):
    """While this process waits for the job ``awaited``: compile here the last ahead compile
    handed to the worker after it, if there is one the worker has not started (it takes its jobs
    in order and has not finished ``awaited``; it will load this one from the cache). The pass
    waiting here needs those compiles next (a training net's backward, last layer first), so
    the two cores share them instead of this one idling (LeNet's first step from an empty
    cache, alternated with the code before, four pairs: 3.7-5.0 -> 3.4-4.0 s; it compiles the
    weight gradient's reference while the worker compiles the products' C function). Whether
    one was compiled."""
    with _lock:
        later = [job for jobs in _ahead.values() for job in jobs
                 if job.number > awaited.number and not job.taken and not job.done.is_set()]
        if not later:
            return False
        job = max(later, key=lambda job: job.number)
        job.taken = True
    _load(job.kernel, job.types)
    job.done.set()
    return True


def _tier(kernel, types):
    """:func:`ready` for ``kernel`` (a dispatcher, or a Python function made a C function) and
    ``types`` (argument types, or the C function's signature)."""
    job = _jobs.get((kernel, types))
    if job is None:
        if not _worker_wanted():
            return _load(kernel, types)
        _after_other_runs()
        if _compiled(kernel, types) or _hand_over(kernel, types) is None:
            return _load(kernel, types)
        return False
    if _running(job):
        return False
    if not job.done.is_set():
        _worker[0] = False  # a worker this slow is stuck: compile here from now on
    return _load(kernel, types)


def _running(job):
    """Whether the worker is still on ``job``, handed over less than WAIT_SECONDS ago."""
    return not job.done.is_set() and _worker[0] is not False and time.monotonic() - job.submitted < WAIT_SECONDS


def _load(kernel, types):
    """Compile (from Numba's cache where it has the kernel) and mark ready."""
    _compile(kernel, types)
    _ready.add(kernel)
    return True


def _compile(kernel, types):
    """Compile ``kernel`` for ``types`` (a dispatcher for argument types, or a Python function
    made a C function of that signature), loading it from Numba's cache where it has it."""
    if hasattr(kernel, 'py_func'):
        kernel.compile(types)
    else:
        c_function(kernel, types)


def _compiled(kernel, types):
    """Whether this process or Numba's cache has ``kernel`` for ``types`` (as :func:`_compile`)."""
    if hasattr(kernel, 'py_func'):
        return types in kernel.overloads or _in_cache(kernel, types)
    return c_function_made(kernel) or c_function_cached(kernel, types)


def _hand_over(kernel, types):
    """The worker's job compiling ``kernel`` for ``types``, recorded; None where the worker
    cannot take it (it could not start, has ended, or the types do not pickle)."""
    worker = _start_worker()
    job = worker.submit(kernel, types) if worker is not None else None
    if job is not None:
        _jobs[kernel, types] = job
        _latest[kernel] = job
    return job


def _worker_wanted():
    return os.environ.get(ENV, '1').strip() != '0' and _worker[0] is not False and not in_mpi_job()


def _in_cache(kernel, types):
    """Whether Numba's on-disk cache holds ``kernel`` for these argument types (its index lists
    them; nothing is loaded)."""
    return _indexed(getattr(kernel, '_cache', None), types, kernel.targetctx)


def c_function_cached(function, signature):
    """Whether Numba's on-disk cache holds ``function`` as a C function of ``signature`` (what
    ``cfunc(signature, cache=True)`` would load; nothing is loaded)."""
    return _indexed(FunctionCache(function), signature, cpu_target.target_context)


def _indexed(cache, key, target_context):
    try:
        return cache is not None and cache._index_key(key, target_context.codegen()) in cache._cache_file._load_index()
    except Exception:  # noqa: BLE001  (an unreadable cache index: Numba will compile)
        return False


def _after_other_runs():
    """Once a process, on its first tiered kernel: if the worker of another run (one that
    started just before, from the same empty cache) is still compiling into this cache, wait
    for it to end (up to WAIT_SECONDS) and say so (True): what it compiles is then in the cache,
    and this run neither compiles it a second time nor runs beside it (runs 5 s apart, at two
    threads: a LeNet step of the second took 12-15 ms instead of 7-8)."""
    if _other_runs_checked:
        return False
    _other_runs_checked.append(True)
    lock = _compile_lock(blocking=False)
    if lock is not None:  # no other run's worker compiles now (or locks are not available)
        if lock:
            lock.close()
        return False
    lock = _compile_lock(blocking=True, timeout=WAIT_SECONDS)
    if lock:
        lock.close()
    return True


_other_runs_checked = []


def _start_worker():
    if _worker[0] is None:
        try:
            _worker[0] = _Worker()
        except OSError:
            _worker[0] = False
    return _worker[0] or None


class _Job:
    """The worker's ``number``-th compile, of ``kernel`` for ``types``; ``done`` is set when it
    has ended (or the worker has, or this process compiled it: ``taken``)."""

    def __init__(self, kernel=None, types=None, number=-1):
        self.kernel, self.types, self.number = kernel, types, number
        self.taken = False
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
        """The job compiling ``kernel`` (a dispatcher, or a Python function to make a C
        function) for ``types`` (argument types, or the C function's signature); None if it
        cannot be handed over (the worker has ended; types that do not pickle)."""
        function = getattr(kernel, 'py_func', kernel)
        try:
            request = pickle.dumps((function.__module__, function.__qualname__, types))
        except Exception:  # noqa: BLE001  (any pickling failure: compile in place)
            return None
        number = next(self._numbers)
        job = self._pending[number] = _Job(kernel, types, number)
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
    """The worker: compile each requested (module, qualified name, types) into Numba's cache (a
    dispatcher for argument types, or a Python function as a C function of that signature: see
    :func:`_compile`) and answer the request's number. A compile that fails here is answered all the same:
    the caller then compiles in place and meets the error itself. Once the caller has ended
    (no one reads the answers) the remaining requests are still compiled. One worker compiles
    into a cache at a time (:func:`_compile_lock`; see :func:`_after_other_runs`)."""
    lock = _compile_lock()
    for line in requests:
        number, request = line.split()
        try:
            module, qualname, types = pickle.loads(base64.b64decode(request))
            kernel = importlib.import_module(module)
            for name in qualname.split('.'):
                kernel = getattr(kernel, name)
            _compile(kernel, types)
        except Exception:  # noqa: BLE001  (reported by the caller's own compile)
            pass
        _answer(answers, number)
    del lock


def _answer(answers, text):
    """One line to the caller (gone, if it has ended)."""
    try:
        answers.write(text + '\n')
        answers.flush()
    except OSError:
        pass


def _compile_lock(blocking=True, timeout=None):
    """The exclusive lock a worker holds while it runs (on a file named after the package and
    Numba's cache directory): the open file holding it; None if another process holds it
    (without ``blocking``, or after ``timeout`` seconds); False where locks are not available."""
    try:
        import fcntl
        import hashlib
        import tempfile
        from numba.core import config
        where = '%s|%s' % (os.path.dirname(os.path.abspath(__file__)), config.CACHE_DIR)
        path = os.path.join(tempfile.gettempdir(), 'pycaffe-ft-compile-%s.lock'
                            % hashlib.sha1(where.encode()).hexdigest()[:16])
        lock = open(path, 'a')
    except (ImportError, OSError):
        return False
    deadline = time.monotonic() + (timeout if blocking and timeout is not None else 0.0)
    while True:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return lock
        except OSError:
            if blocking and (timeout is None or time.monotonic() < deadline):
                time.sleep(0.05)
                continue
            lock.close()
            return None
