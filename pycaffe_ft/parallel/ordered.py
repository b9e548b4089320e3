"""The gradient sum in worker order, whoever computed what: bitwise the same for any number of
ranks and any failure schedule.

Each rank owns one contiguous segment of the flat gradient (rank r of P: elements
[size * r // P, size * (r + 1) // P)). One ``Alltoallv`` sends every hosted worker's gradient,
segment by segment, to the segment's owner, unsummed; the owner adds the V workers' segments in
worker order (0, 1, ..., V - 1, float32, left to right, as ``--np 1 --virtual-workers V`` adds
them); one ``Allgatherv`` hands the summed segments to every rank. With one worker per rank
this moves what a ring allreduce moves (a reduce-scatter and an all-gather, float32); a rank
hosting k workers (after a failure, or with more workers than ranks) sends k gradients.
The float64 extras (BatchNorm statistics, ledger, loss, requests) go in one side allreduce.

Where every rank is on one node, the gradients go through shared memory instead
(:mod:`~pycaffe_ft.parallel.node_shared`): each rank copies its workers' gradients into its
slots, the extras' allreduce tells it that every rank has, it adds its segment over the V
workers' slots (the same additions in the same order) into its result area, and a barrier tells
it that every segment is there to copy. A failure surfaces in one of those two collectives, as
in the exchanges.
"""
import time

import numpy as np

__all__ = ['WorkerOrderReduction']


class WorkerOrderReduction:
    """One attempt at the worker-order sum over ``comm``. ``hosting`` maps each member's
    original rank to its workers (``comm.members[i]`` is comm rank i's original rank);
    ``gradients`` maps each worker this rank hosts to its float32 gradient, which MPI only
    reads. ``finish`` returns (sum, extras sum) or raises ProcessFailure (from the comm);
    ``waited_s`` is the time it spent in MPI; ``on_post('allgather')`` is called between the
    two exchanges (a fault injection point). ``buffers``: a dict kept between iterations,
    where the send, receive and result arrays are reused (fresh ones cost a page fault per 4
    KB: ~1 ms per LeNet iteration); the sum returned is valid until the next ``finish``."""

    def __init__(self, comm, hosting, num_workers, size, buffers, on_post=None, shared=None):
        self.comm, self.V, self.size, self.buffers = comm, num_workers, size, buffers
        self.shared = shared  # SharedSlots of this membership and hosting, or None: MPI exchanges
        self._on_post = on_post or (lambda level: None)
        members = comm.members
        self.workers_of = [sorted(hosting[members[r]]) for r in range(comm.size)]
        # worker v -> (the comm rank hosting it, its row there)
        self.where = {v: (r, i) for r, workers in enumerate(self.workers_of) for i, v in enumerate(workers)}
        if sorted(self.where) != list(range(num_workers)):
            raise ValueError('workers %s hosted, expected 0..%d once each' % (sorted(self.where), num_workers - 1))
        self.bounds = [size * r // comm.size for r in range(comm.size + 1)]
        self.lengths = [b - a for a, b in zip(self.bounds, self.bounds[1:])]  # of each rank's segment
        self.waited_s = 0.0

    def _segment(self, r):
        return self.bounds[r], self.bounds[r + 1]

    def _buffer(self, name, count):
        if self.buffers.get(name, np.empty(0)).size != count:
            self.buffers[name] = np.empty(count, np.float32)
        return self.buffers[name]

    def finish(self, gradients, extras):
        me, ranks = self.comm.rank, self.comm.size
        mine = self.workers_of[me]
        if sorted(gradients) != mine:
            raise ValueError('gradients of workers %s, but this rank hosts %s' % (sorted(gradients), mine))
        lo, hi = self._segment(me)
        if self.shared is not None:
            return self._through_shared_memory(gradients, extras, lo, hi)
        if len(mine) == 1:  # by destination already
            send = gradients[mine[0]]
        else:
            send, at = self._buffer('send', len(mine) * self.size), 0
            for r in range(ranks):  # by destination, then by worker
                a, b = self._segment(r)
                for v in mine:
                    send[at:at + b - a] = gradients[v][a:b]
                    at += b - a
        send_counts = [len(mine) * length for length in self.lengths]
        recv_counts = [len(workers) * (hi - lo) for workers in self.workers_of]
        received = self._buffer('received', sum(recv_counts))
        t0 = time.perf_counter()
        self.comm.alltoallv_into(send, send_counts, received, recv_counts)
        self.waited_s += time.perf_counter() - t0
        rows = dict(zip([v for workers in self.workers_of for v in workers],
                        received.reshape(-1, hi - lo) if hi > lo else [received[:0]] * self.V))
        total = self._buffer('total', hi - lo)
        np.copyto(total, rows[0])
        for v in range(1, self.V):
            total += rows[v]
        result = self._buffer('result', self.size)
        extras_sum = np.empty_like(extras)
        self._on_post('allgather')
        t0 = time.perf_counter()
        self.comm.allgatherv_into(total, result, self.lengths)
        self.comm.allreduce_sum_into(extras, extras_sum)
        self.waited_s += time.perf_counter() - t0
        return result, extras_sum

    def _through_shared_memory(self, gradients, extras, lo, hi):
        slots, me = self.shared, self.comm.rank
        for row, v in zip(slots.gradients(me), self.workers_of[me]):
            np.copyto(row, gradients[v])
        extras_sum = np.empty_like(extras)
        t0 = time.perf_counter()
        self.comm.allreduce_sum_into(extras, extras_sum)  # after it, every rank's slots are written
        self.waited_s += time.perf_counter() - t0
        total = slots.result(me)[lo:hi]
        for v in range(self.V):
            r, i = self.where[v]
            row = slots.gradients(r)[i, lo:hi]
            if v == 0:
                np.copyto(total, row)
            else:
                total += row
        self._on_post('allgather')
        t0 = time.perf_counter()
        self.comm.barrier()  # after it, every rank's segment of the sum is written
        self.waited_s += time.perf_counter() - t0
        result = self._buffer('result', self.size)
        for r in range(self.comm.size):
            a, b = self._segment(r)
            np.copyto(result[a:b], slots.result(r)[a:b])
        return result, extras_sum
