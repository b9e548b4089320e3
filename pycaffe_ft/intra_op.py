"""Intra-op parallelism: the threads one process uses inside a layer.

Layers split their work into *chunks* (ranges of images) whose boundaries depend only on the
problem's shape, never on the thread count, and combine per-chunk partial results (weight and
bias gradients) in chunk order. So a net computes the same bits with 1 thread or 8, and the
ranks of a data-parallel job stay identical whatever their thread counts.

The BLAS library is pinned to one thread per call once the thread count is known (the count is
ours, whatever the BLAS variables say): each chunk's GEMM runs in the thread that owns the chunk, and large
single GEMMs (InnerProduct) are split into column blocks by :func:`matmul`. (A multi-threaded
OpenBLAS keeps its idle threads spinning after each call; mixing its threads with ours would
leave both fighting for the cores.)

The thread count: :func:`set_num_threads` (``--threads``), else the environment
(``PYCAFFE_FT_NUM_THREADS``, ``OMP_NUM_THREADS``, ``OPENBLAS_NUM_THREADS``, ``MKL_NUM_THREADS``,
``NUMBA_NUM_THREADS``), else automatic: the cores this process may run on, minus the cores other
processes keep busy (:func:`adapt_threads`, called by the solver between iterations, watches
``/proc/stat``), so a shared machine slows training down by its load and no more. An explicit
count is never changed. The thread count never changes the bits computed. Worker threads wait
for the next task spinning, without the GIL, for up to SPIN_SECONDS, then sleep
(:mod:`pycaffe_ft.thread_crew`); they do not spin where the threads of this process and the other
ranks on the node outnumber the usable cores.
"""
import ctypes
import glob
import itertools
import os
import threading
import time

import numpy as np

from .aligned import aligned_empty
from .thread_crew import ThreadCrew, kernels_ready

__all__ = ['num_threads', 'set_num_threads', 'thread_policy', 'adapt_threads', 'run_chunks', 'sum_in_chunk_order',
           'for_images', 'image_chunks', 'gemm', 'matmul', 'scratch', 'blas_library']

_ENV_VARS = ('PYCAFFE_FT_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS',
             'NUMBA_NUM_THREADS')
_state = {'threads': None, 'source': None, 'crew': None, 'blas': False, 'watch': None}
_local = threading.local()


def _usable_core_set():
    try:
        return os.sched_getaffinity(0)
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def usable_cores():
    """The cores this process may run on."""
    return max(1, len(_usable_core_set()))


def ranks_on_this_node():
    """The MPI ranks Open MPI started on this node (1 outside an MPI job)."""
    ranks_here = os.environ.get('OMPI_COMM_WORLD_LOCAL_SIZE', '').strip()
    return max(1, int(ranks_here) if ranks_here.isdigit() else 1)


def _automatic_threads():
    """The usable cores shared among the MPI ranks on this node (one share per rank)."""
    return max(1, usable_cores() // ranks_on_this_node())


def _default_threads():
    """(count, where it came from): the first thread variable the user set, else automatic.
    Variables the ``--np`` launcher set for the BLAS of its ranks (listed in
    ``PYCAFFE_FT_LAUNCHER_SET``) are not the user's choice."""
    launcher_set = os.environ.get('PYCAFFE_FT_LAUNCHER_SET', '').split(',')
    for var in _ENV_VARS:
        value = os.environ.get(var, '').strip()
        if value.isdigit() and int(value) > 0 and var not in launcher_set:
            return int(value), var
    return _automatic_threads(), 'automatic'


def num_threads():
    """Threads a layer may use (at least 1)."""
    if _state['threads'] is None:
        _state['threads'], _state['source'] = _default_threads()
        _pin_blas()
    return _state['threads']


def thread_policy():
    """One line saying how many threads run and why (``pycaffe-ft info`` prints it)."""
    n = num_threads()
    if _state['source'] == 'automatic':
        return ('%d thread%s (automatic: at most %d, the usable cores (%d) per rank on this node, minus '
                'the cores other processes keep busy, rechecked during training)'
                % (n, '' if n == 1 else 's', _automatic_threads(), usable_cores()))
    how = 'set_num_threads / --threads' if _state['source'] == 'explicit' else _state['source']
    return '%d thread%s (from %s; never changed)' % (n, '' if n == 1 else 's', how)


class _LoadWatch:
    """CPU time other processes used on our cores, from ``/proc/stat`` minus our own."""

    def __init__(self, cores, cap=None):
        self.cores = cores
        self.cap = len(cores) if cap is None else cap  # the most threads the automatic policy may use
        self.last = self._sample() if self.cap > 1 else None

    def _sample(self):
        busy = 0
        try:
            with open('/proc/stat') as f:
                for line in f:
                    name = line.split(' ', 1)[0]
                    if name.startswith('cpu') and name[3:].isdigit() and int(name[3:]) in self.cores:
                        v = [int(x) for x in line.split()[1:]]
                        busy += sum(v[:8]) - v[3] - v[4]  # all but idle and iowait
        except (OSError, ValueError, IndexError):
            return None
        t = os.times()
        return time.monotonic(), busy / os.sysconf('SC_CLK_TCK'), t.user + t.system

    def others(self, min_interval):
        """Cores' worth of CPU others used since the last reading, or None if too soon (then
        ``/proc/stat`` is not read at all: this runs between every two iterations)."""
        if self.last is not None and time.monotonic() - self.last[0] < min_interval:
            return None
        now = self._sample()
        if now is None or self.last is None:
            self.last = now
            return None
        (t0, busy0, own0), (t1, busy1, own1) = self.last, now
        self.last = now
        return max(0.0, (busy1 - busy0) - (own1 - own0)) / (t1 - t0)


def adapt_threads(min_interval=1.0):
    """Under the automatic policy, fit the thread count to the cores other processes leave
    free (at most once per ``min_interval`` seconds; call it between iterations, never from a
    worker thread). Returns the thread count. Does nothing to an explicit count."""
    n = num_threads()
    if _state['source'] != 'automatic':
        return n
    watch = _state['watch']
    if watch is None:  # the first call starts watching
        watch = _state['watch'] = _LoadWatch(_usable_core_set(), _automatic_threads())
        return n
    if watch.cap == 1:
        return n
    others = watch.others(min_interval)
    if others is not None:
        # a core counts as taken once others use 70% of it
        _state['threads'] = max(1, min(watch.cap, int(usable_cores() - others + 0.3)))
    return _state['threads']


def _pin_blas():
    """One BLAS thread per call: the thread count is ours (PYCAFFE_FT_NUM_THREADS=1 must not
    leave OpenBLAS running its own threads beside it)."""
    blas = blas_library()
    if blas is not None:
        blas.set_threads(1)


def set_num_threads(n):
    """Use ``n`` threads from now on (``caffe.set_num_threads``); BLAS follows."""
    n = int(n)
    if n < 1:
        raise ValueError('the thread count must be at least 1, got %d' % n)
    _state['threads'], _state['source'] = n, 'explicit'
    crew = _state['crew']
    if crew is not None and (crew.workers < n - 1 or crew.spin_seconds != _spins_now()):
        crew.close()
        _state['crew'] = None
    _pin_blas()


class _Blas:
    """The thread switch of the OpenBLAS that NumPy links (found through its exported names)."""

    def __init__(self, lib, prefix, suffix):
        self.name = prefix + suffix
        self._set = getattr(lib, '%sset_num_threads%s' % (prefix, suffix))
        self._get = getattr(lib, '%sget_num_threads%s' % (prefix, suffix))
        self._set.argtypes = [ctypes.c_int]
        self._get.restype = ctypes.c_int
        self._corename = getattr(lib, '%sget_corename%s' % (prefix, suffix), None)
        if self._corename is not None:
            self._corename.restype = ctypes.c_char_p
        self._sgemm = None
        name = {'scipy_openblas_': 'scipy_cblas_sgemm%s', 'openblas_': 'cblas_sgemm%s'}[prefix] % suffix
        if hasattr(lib, name):
            integer = ctypes.c_int64 if suffix else ctypes.c_int
            self._sgemm = getattr(lib, name)
            self._sgemm.restype = None
            self._sgemm.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int, integer, integer, integer,
                                    ctypes.c_float, ctypes.c_void_p, integer, ctypes.c_void_p, integer,
                                    ctypes.c_float, ctypes.c_void_p, integer]

    def threads(self):
        return self._get()

    def set_threads(self, n):
        self._set(int(n))

    def corename(self):
        return self._corename().decode() if self._corename is not None else 'unknown'

    def sgemm(self, a, b, c, beta):
        """c = a @ b + beta c through cblas_sgemm, reading transposed views in place.
        Returns False (nothing done) where the strides do not suit BLAS."""
        if self._sgemm is None or c.strides[1] != 4 or \
                not (a.dtype == b.dtype == c.dtype == np.float32):
            return False
        m, n = c.shape
        k = a.shape[1]
        ops = []
        for x in (a, b):
            if x.strides[1] == 4 and x.strides[0] >= 4 * max(x.shape[1], 1):
                ops.append((111, x.strides[0] // 4))  # CblasNoTrans, row-major
            elif x.strides[0] == 4 and x.strides[1] >= 4 * max(x.shape[0], 1):
                ops.append((112, x.strides[1] // 4))  # CblasTrans of a row-major array
            else:
                return False
        if c.strides[0] < 4 * max(n, 1) or m == 0 or n == 0:
            return False
        self._sgemm(101, ops[0][0], ops[1][0], m, n, k, 1.0, a.ctypes.data, ops[0][1],
                    b.ctypes.data, ops[1][1], beta, c.ctypes.data, c.strides[0] // 4)
        return True


def blas_library():
    """The NumPy OpenBLAS thread switch, or None where NumPy links another BLAS."""
    if _state['blas'] is False:
        _state['blas'] = None
        roots = [os.path.dirname(np.__file__) + '.libs', os.path.join(os.path.dirname(np.__file__), '.dylibs')]
        for path in sorted(p for r in roots for p in glob.glob(os.path.join(r, '*openblas*'))):
            try:
                lib = ctypes.CDLL(path)
            except OSError:
                continue
            for prefix in ('scipy_openblas_', 'openblas_'):
                for suffix in ('64_', ''):
                    if hasattr(lib, '%sset_num_threads%s' % (prefix, suffix)):
                        _state['blas'] = _Blas(lib, prefix, suffix)
                        return _state['blas']
    return _state['blas']


def image_chunks(num, per_image, target=1 << 20, min_chunks=4):
    """Split ``num`` images into ranges of about ``target`` scratch elements each
    (``per_image`` per image), at least ``min(num, min_chunks)`` of them and an even number
    where there are images enough, their sizes within one image of each other, so that two
    threads get equal shares: 16 images go in six chunks of 2 or 3, not five of 3 and one of 1,
    which gave two threads 9 and 7 images of AlexNet's 3 x 3 convolutions (backward 170 ->
    155-159 ms at two threads, alternated); 100 images in 16 chunks of 6 or 7, not 14 of 7
    and one of 2. Depends only on the shape, so partial sums combine the same way for any
    thread count."""
    step = max(1, min(num, target // max(per_image, 1)))
    step = min(step, max(1, -(-num // min_chunks)))
    count = -(-num // step)
    if count % 2 and 1 < count < num:
        count += 1
    return [(num * i // count, num * (i + 1) // count) for i in range(count)]


def _forget_crew():
    """After fork(): the parent's worker threads do not exist in the child."""
    _state['crew'] = None
    _local.__dict__.clear()


if hasattr(os, 'register_at_fork'):
    os.register_at_fork(after_in_child=_forget_crew)


SPIN_SECONDS = 0.002
"""How long an idle worker thread (and a caller waiting for one) spins before it sleeps: LeNet
at batch 64 starts a task every 0.2-1 ms. Two threads, LeNet's training step with a pool of
sleeping threads against this crew, alternated: 7.3-7.4 -> 6.5-6.7 ms."""


def _spins_now():
    """Whether the crew may spin: only while every thread has a core (no other rank's
    threads share them)."""
    crowded = num_threads() * ranks_on_this_node() > usable_cores()
    return 0.0 if crowded else SPIN_SECONDS


def _crew():
    if _state['crew'] is None:
        _pin_blas()
        workers = _automatic_threads() if _state['source'] == 'automatic' else num_threads()
        _state['crew'] = ThreadCrew(max(1, workers - 1, num_threads() - 1), _spins_now())
    return _state['crew']


def run_chunks(fn, chunks):
    """``[fn(*chunk) for chunk in chunks]`` (a chunk is most often an image or row range
    ``(lo, hi)``), the calls spread over the threads.

    ``fn`` must write only what belongs to its chunk (its images of a top or bottom, its own
    partial-result array) and may call NumPy and nogil Numba kernels; results come back in
    chunk order. The threads (the calling one included) claim the next chunk as they finish
    one, so a core slowed by another process just takes fewer chunks; the results do not
    depend on who computed what. With one thread (or one chunk), or while the crew's kernels
    compile in the background (see :func:`~pycaffe_ft.thread_crew.kernels_ready`), the calls
    run here, in order.
    """
    threads = min(num_threads(), len(chunks))
    if threads <= 1 or threading.current_thread().name.startswith('pycaffe-ft-op') or not kernels_ready():
        return [fn(*chunk) for chunk in chunks]
    results = [None] * len(chunks)
    claims = itertools.count()  # next() is atomic under the GIL

    def work():
        for i in iter(claims.__next__, None):
            if i >= len(chunks):
                return
            results[i] = fn(*chunks[i])
    _crew().run(work, threads - 1)
    return results


_SUM_BLOCK = 1 << 15  # elements: a block of the total and one of a part fill a quarter of a 512 KB L2


def sum_in_chunk_order(parts):
    """parts[0] + parts[1] + ... in chunk order (into parts[0], contiguous arrays of one
    shape), e.g. :func:`run_chunks`' per-chunk partial gradients: the same bits for any thread
    count. Large sums go block by block (each block of parts[0] stays in cache while every part
    is added to it), the blocks spread over the threads."""
    total = parts[0]
    if total.size < _SUM_BLOCK or not all(part.flags.c_contiguous for part in parts):
        for part in parts[1:]:
            total += part
        return total
    flat = [part.reshape(-1) for part in parts]

    def block(lo, hi):
        into = flat[0][lo:hi]
        for part in flat[1:]:
            np.add(into, part[lo:hi], out=into)
    run_chunks(block, image_chunks(total.size, 1, target=_SUM_BLOCK))
    return total


def scratch(name, size, dtype=np.float32):
    """A per-thread work array of at least ``size`` elements (grown on demand, kept)."""
    buffers = getattr(_local, 'buffers', None)
    if buffers is None:
        buffers = _local.buffers = {}
    buf = buffers.get(name)
    if buf is None or buf.size < size or buf.dtype != dtype:
        buf = buffers[name] = aligned_empty(max(size, 1), dtype)
    return buf[:size]


def planes(array):
    """``array`` (C-contiguous) as rows: one per (image, channel) of an array of two or more
    axes, so that elementwise work splits over the threads at any batch; one per value of a
    1-D array."""
    rows = int(np.prod(array.shape[:2])) if array.ndim else 1
    return array.reshape(rows, array.size // rows if rows else 0)


def image_ranges(num, per_image, least=1 << 16):
    """The image ranges :func:`for_images` splits ``num`` images into: one range below
    ``least`` values (handing work to a thread costs more than it saves: LeNet's ReLU on 64 x
    500 values took 0.08 ms in one call, 0.16 ms in four chunks on two threads), else
    :func:`image_chunks` of about 256K values each; none for no images."""
    if num * per_image < least:
        return [(0, num)] if num else []
    return image_chunks(num, per_image, target=1 << 18)


def for_images(fn, num, per_image, least=1 << 16):
    """``fn(lo, hi)`` over image ranges on the threads (:func:`image_ranges`): for work whose
    images are independent (elementwise layers, pooling, normalisation across channels)."""
    return run_chunks(fn, image_ranges(num, per_image, least))


def gemm(a, b, out, accumulate=False):
    """``out = a @ b`` or, with ``accumulate``, ``out += a @ b`` (2-D float32; transposed
    views are read in place). Accumulating goes straight into ``out`` through BLAS's beta, with
    no temporary the size of ``out``."""
    if not accumulate and 1 in out.shape:  # one row or column (batch 1): a GEMV streams once
        if out.shape[0] == 1:
            np.matmul(b.T, a[0], out=out[0])
        else:
            np.matmul(a, b[:, 0], out=out[:, 0])
        return out
    blas = blas_library()
    if blas is not None and blas.sgemm(a, b, out, 1.0 if accumulate else 0.0):
        return out
    if accumulate:
        out += a @ b
    else:
        np.matmul(a, b, out=out)
    return out


def matmul(a, b, out, accumulate=False):
    """:func:`gemm`, split into column (or row) blocks over the threads. The blocks depend
    only on the shape, and one thread makes the same block calls in order: OpenBLAS's bits
    depend on a call's shape (on AVX2 kernels a column block is not bitwise the same columns
    of one whole call), so the split must not depend on the thread count."""
    m, n = out.shape
    if m * n * a.shape[1] < (1 << 23):  # CIFAR10-quick's ip1 backward, 6.6M multiply-adds a
        return gemm(a, b, out, accumulate)  # product: 0.14-0.18 ms in one call, 0.22 ms split
    if n >= m:
        run_chunks(lambda lo, hi: gemm(a, b[:, lo:hi], out[:, lo:hi], accumulate), _blocks(n))
    else:
        run_chunks(lambda lo, hi: gemm(a[lo:hi], b, out[lo:hi], accumulate), _blocks(m))
    return out


def _blocks(size, most=8, least=192):
    """A power of two of equal blocks (rounded up to 16 columns), at most ``most``, none under
    ``least`` columns (but two of at least 64 where ``size`` allows): even work on 2, 4 or 8
    threads, and few calls (each packs the other operand again). LeNet's ip1 (64 x 800 x 500)
    on two threads, forward, weight and bottom gradient: 0.44, 0.42, 0.43 ms in 64-column
    blocks; 0.37, 0.36, 0.37 in these."""
    parts, least = 1, max(64, min(least, size // 2))
    while parts * 2 <= min(most, size // least):
        parts *= 2
    step = -(-size // parts)
    step = -(-step // 16) * 16
    return [(lo, min(lo + step, size)) for lo in range(0, size, step)]
