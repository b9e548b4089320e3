"""The gradient allreduce in buckets, overlapped with the backward pass.

The flat float32 gradient buffer is cut into buckets of whole parameter blobs, in reverse layer
order (the order in which backward finishes them). During the backward of a rank's last
micro-batch, each bucket is added to the kept local sum and sent (``Iallreduce``) as soon as
the last layer that writes it is done; requests are progressed between layers. The small
float64 extras (BatchNorm statistics, sample ledger, loss) follow as one side message.

Every rank posts the same requests in the same order, whatever failed where, and then waits
for all of them: so no survivor can be left waiting in a collective that another rank skipped.
A failure only marks the reduction failed; the caller agrees on the outcome and retries from
the kept local sum (which MPI only reads).
"""
import time

import numpy as np

from .comm import ProcessFailure

__all__ = ['plan_buckets', 'BucketedReduction']


def plan_buckets(net, bucket_elements):
    """[(lo, hi, ready_layer)] over ``net.param_diff``, last parameters first: whole blobs
    gathered until a bucket holds at least ``bucket_elements`` values. ``ready_layer`` is the
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
        if hi - lo >= bucket_elements or lid == 0:
            buckets.append((lo, hi, ready))
            hi = None
    return buckets


class BucketedReduction:
    """One attempt at summing the local gradients (and extras) over the communicator.

    ``layer_done(i)`` (a backward hook) posts the buckets that became complete; ``post_all()``
    posts what is left at once (no overlap: a retry, or a rank without micro-batches);
    ``finish(extras)`` posts the side message, waits, and returns (gradient sum, extras sum)
    or raises :class:`ProcessFailure`. ``local`` is read by MPI and must not change until then.
    """

    def __init__(self, comm, buckets, local, diff=None, on_first_post=None):
        self.comm = comm
        self.buckets = buckets
        self.local = local
        self.diff = diff  # the last micro-batch's gradient, added bucket by bucket; None: already in local
        self.result = np.empty_like(local)
        self.requests = []
        self.posted = 0
        self.failed = None
        self.waited_s = 0.0
        self._on_first_post = on_first_post

    def _try(self, fn, *args):
        try:
            return fn(*args)
        except ProcessFailure as e:
            self.failed = self.failed or e
            return None

    def _post(self):
        lo, hi, _ = self.buckets[self.posted]
        if self.diff is not None:
            self.local[lo:hi] += self.diff[lo:hi]
        self.requests.append(self._try(self.comm.iallreduce_sum, self.local[lo:hi], self.result[lo:hi]))
        self.posted += 1
        if self.posted == 1 and self._on_first_post is not None:
            self._on_first_post()

    def layer_done(self, layer_index):
        """Backward has finished layer ``layer_index``: post the buckets now complete, in
        order, and let MPI progress the ones in flight. Never raises."""
        while self.posted < len(self.buckets) and self.buckets[self.posted][2] >= layer_index:
            self._post()
        pending = [r for r in self.requests if r is not None]
        if pending and self.failed is None:
            self._try(self.comm.testall, pending)

    def post_all(self):
        while self.posted < len(self.buckets):
            self._post()

    def finish(self, extras):
        self.post_all()
        extras_sum = np.empty_like(extras)
        self.requests.append(self._try(self.comm.iallreduce_sum, extras, extras_sum))
        t0 = time.perf_counter()
        self._try(self.comm.waitall, [r for r in self.requests if r is not None])
        self.waited_s = time.perf_counter() - t0
        if self.failed is not None:
            raise ProcessFailure(str(self.failed))
        return self.result, extras_sum
