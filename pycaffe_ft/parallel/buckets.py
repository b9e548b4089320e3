"""The gradient allreduce in buckets, overlapped with the backward pass, flat or in two levels.

The flat float32 gradient buffer is cut into buckets of whole parameter blobs, in reverse layer
order (the order in which backward finishes them). During the backward of a rank's last
micro-batch, each bucket is added to the kept local sum and sent as soon as the last layer that
writes it is done; requests are progressed between layers. The small float64 extras
(BatchNorm statistics, sample ledger, loss) follow as one side message over all ranks.

Flat: one ``Iallreduce`` per bucket. Two levels (HSGD's): each node reduces a bucket to its
leader (``Ireduce``), the leaders allreduce it among themselves as soon as their node's sum is
in, and broadcast it back to their node (``Ibcast``). With ``blocking`` (the trainer's default,
no overlap) the same collectives run as blocking calls, in the same order.

Every rank posts the same requests on each communicator in the same order, whatever failed
where (a leader whose node sum failed still joins the leaders' allreduce and the broadcast),
and then waits for all of them: so no survivor can be left waiting in a collective another rank
skipped. A failure only marks the attempt failed; the caller agrees on the outcome and retries
from the kept local sum (which MPI only reads).
"""
import time

import numpy as np

from .comm import ProcessFailure

__all__ = ['plan_buckets', 'bucket_elements', 'Levels', 'BucketedReduction']


def bucket_elements(gradient_elements, bucket_mb=None):
    """Floats per bucket: ``bucket_mb`` MB, or by default 1 MB or a quarter of the gradients,
    whichever is smaller (so that a small net's reduction overlaps with its backward too)."""
    if bucket_mb is None:
        return max(1, min(1 << 18, gradient_elements // 4))
    return max(1, int(bucket_mb * (1 << 20)) // 4)


def plan_buckets(net, per_bucket):
    """[(lo, hi, ready_layer)] over ``net.param_diff``, last parameters first: whole blobs
    gathered until a bucket holds at least ``per_bucket`` values. ``ready_layer`` is the
    lowest layer index that writes into the bucket (a shared blob is final only after the
    first layer that uses it): the bucket is complete once backward has passed that layer."""
    first_user = {}
    for net_pid, (layer_id, _) in enumerate(net._param_layer_indices):
        lid = net.learnable_param_ids[net_pid]
        first_user[lid] = min(first_user.get(lid, layer_id), layer_id)
    offsets = net.param_offsets
    buckets, hi, ready = [], None, None
    for lid in reversed(range(len(offsets) - 1)):
        lo = int(offsets[lid])
        if hi is None:
            hi, ready = int(offsets[lid + 1]), first_user.get(lid, 0)
        ready = min(ready, first_user.get(lid, 0))
        if hi - lo >= per_bucket or lid == 0:
            buckets.append((lo, hi, ready))
            hi = None
    return buckets


class Levels:
    """The two levels built from ``comm`` (a collective on it): ``node``, the ranks of one
    node (shared memory), or ``ranks_per_node`` consecutive ranks when forced; ``leaders``,
    rank 0 of every node (None on the other ranks). ``nodes``: how many there are."""

    def __init__(self, comm, ranks_per_node=None):
        self.node = comm.split(comm.rank // ranks_per_node, comm.rank) if ranks_per_node else comm.split_shared()
        self.leaders = comm.split(0 if self.node.rank == 0 else None, comm.rank)
        self.nodes = int(comm.allreduce_sum(np.array([1.0 if self.leaders else 0.0]))[0])
        self.largest = int(comm.allreduce_sum(np.eye(comm.size)[comm.rank] * self.node.size).max())

    def free(self):
        for sub in (self.node, self.leaders):
            if sub is not None:
                sub.free()


class _Request:
    """A request and whether it is over (completed or failed)."""
    __slots__ = ('req', 'over')

    def __init__(self, req):
        self.req, self.over = req, req is None


class BucketedReduction:
    """One attempt at summing the local gradients (and extras) over the communicator.

    ``layer_done(i)`` (a backward hook) posts the buckets that became complete; ``post_all()``
    posts what is left at once (no overlap: a retry, or a rank without micro-batches);
    ``finish(extras)`` posts the rest of the schedule, waits, and returns (gradient sum, extras
    sum) or raises :class:`ProcessFailure`. ``local`` is read by MPI and must not change until
    then. ``on_post(level)`` is called once per level ('bucket', 'node', 'leader') when its
    first request goes out (fault injection points).
    """

    # a collective: (nonblocking method, blocking method) of the communicators
    _METHODS = {'allreduce': ('iallreduce_sum', 'allreduce_sum_into'), 'reduce': ('ireduce_sum', 'reduce_sum_into'),
                'bcast': ('ibcast', 'bcast_into')}

    def __init__(self, comm, buckets, local, diff=None, levels=None, on_post=None, blocking=False):
        self.comm = comm
        self.blocking = blocking  # blocking collectives, in the same order (no overlap possible)
        self.buckets = buckets
        self.local = local
        self.diff = diff  # the last micro-batch's gradient, added bucket by bucket; None: already in local
        self.levels = levels
        self.leading = levels is not None and levels.leaders is not None
        self.result = np.empty_like(local)
        self.stage = np.empty_like(local) if self.leading else None  # a leader's node sums
        self.first = []  # per bucket: the flat allreduce, or the node reduce
        self.second = []  # leaders: per bucket, the leaders' allreduce
        self.rest = []  # broadcasts and the extras
        self.posted = 0
        self.failed = None
        self.waited_s = 0.0
        self._on_post = on_post or (lambda level: None)

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except ProcessFailure as e:
            self.failed = self.failed or e
            return None

    def _start(self, kind, comm, *args):
        """Post one collective (or, blocking, run it): a _Request, over at once when blocking."""
        nonblocking, blocking = self._METHODS[kind]
        if self.blocking:
            self._try(getattr(comm, blocking), *args)
            return _Request(None)
        return _Request(self._try(getattr(comm, nonblocking), *args))

    def _over(self, request, comm, block):
        """True once ``request`` completed or failed (a failure is recorded, never raised)."""
        if not request.over:
            if block:
                self._try(comm.waitall, [request.req])
                request.over = True
            else:
                done = self._try(comm.testall, [request.req])
                request.over = done is None or bool(done)
        return request.over

    def _post(self):
        lo, hi, _ = self.buckets[self.posted]
        if self.diff is not None:
            self.local[lo:hi] += self.diff[lo:hi]
        if self.levels is None:
            self.first.append(self._start('allreduce', self.comm, self.local[lo:hi], self.result[lo:hi]))
        else:
            target = self.stage[lo:hi] if self.leading else None
            self.first.append(self._start('reduce', self.levels.node, self.local[lo:hi], target, 0))
        self.posted += 1
        if self.posted == 1:
            self._on_post('bucket' if self.levels is None else 'node')

    def _lead(self, block):
        """A leader: start the leaders' allreduce of every bucket whose node sum is in, in
        bucket order (with ``block``, wait for all of them)."""
        while len(self.second) < self.posted and self._over(self.first[len(self.second)], self.levels.node, block):
            lo, hi, _ = self.buckets[len(self.second)]
            self.second.append(self._start('allreduce', self.levels.leaders, self.stage[lo:hi], self.result[lo:hi]))
            if len(self.second) == 1:
                self._on_post('leader')

    def layer_done(self, layer_index):
        """Backward has finished layer ``layer_index``: post the buckets now complete, in
        order, and let MPI progress the ones in flight. Never raises."""
        while self.posted < len(self.buckets) and self.buckets[self.posted][2] >= layer_index:
            self._post()
        if self.failed is not None:
            return
        if self.leading:
            self._lead(block=False)
        pending = [r.req for r in self.first + self.second if not r.over]
        if pending:
            self._try((self.levels.node if self.levels else self.comm).testall, pending)

    def post_all(self):
        while self.posted < len(self.buckets):
            self._post()

    def finish(self, extras):
        t0 = time.perf_counter()  # blocking buckets run inside post_all: their time counts
        self.post_all()
        if self.levels is not None:
            node = self.levels.node
            if self.leading:
                self._lead(block=True)
            for b, (lo, hi, _) in enumerate(self.buckets):
                if self.leading:
                    self._over(self.second[b], self.levels.leaders, block=True)
                self.rest.append(self._start('bcast', node, self.result[lo:hi], 0))
        extras_sum = np.empty_like(extras)
        self.rest.append(self._start('allreduce', self.comm, extras, extras_sum))
        self._try(self.comm.waitall, [r.req for r in self.first + self.second + self.rest if not r.over])
        self.waited_s = time.perf_counter() - t0
        if self.failed is not None:
            raise ProcessFailure(str(self.failed))
        return self.result, extras_sum
