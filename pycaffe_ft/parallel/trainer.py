"""Data-parallel training with virtual workers over a (fault-tolerant) communicator.

One iteration: compute the gradients of this rank's virtual workers -> sum them over all
workers -> Agree that every survivor succeeded -> only then update. The sum runs, by default,
in worker order (:mod:`.ordered`: each worker's float32 gradient kept apart and added in the
same order whoever computed it, so any failure schedule and any --np give the same bits); with
``overlap`` or two levels, the workers' gradients are kept as one float32 local sum and
allreduced in buckets (:mod:`.buckets`: blocking after backward, or posted during the last
micro-batch's backward), in an order that depends on the ranks. The float64 extras go in a side
message. On a process failure anywhere (a bucket in flight, the wait, agree, broadcast, test
reductions): recover the communicator (revoke, shrink, agree), give the dead ranks' workers to
survivors, compute only those orphaned micro-batches, and retry from the kept gradients. This
class is the one state object and its ``_collective`` the one retry loop that handle MPI
failures.

Re-grow (``regrow``): at the end of an iteration after a shrink, the members spawn replacements
and merge with them (they wait for that only), then train on while the replacements build their
solvers; at the first iteration end where every replacement is ready, the root sends them the
state (weights, solver history, iteration; data cursors and random streams follow from the
iteration) and all Agree to commit (ULFM's Agree fails at all or at none). A failure before the
commit abandons the replacements (they end) and training goes on with the members; after it,
a replacement is a member like any other.
"""
import json
import os
import sys
import time

import numpy as np

from .. import faults
from ..errors import CaffeError, SolverError
from ..intra_op import num_threads, ranks_on_this_node
from ..log import logger
from ..solvers.solver import NONE, SNAPSHOT, STOP, Solver
from .buckets import BucketedReduction, Levels, bucket_elements, plan_buckets
from .comm import ProcessFailure
from .node_shared import SharedSlots, shared_sum_wanted
from .ordered import WorkerOrderReduction
from .workers import assign, reassign, record_of

__all__ = ['DataParallelSolver', 'TooFewRanks', 'ReplacementAbandoned']

REGROW_READY_TIMEOUT_S = 600.0
"""Replacements not ready this long after their spawn are abandoned (and a new re-grow tried)."""


class TooFewRanks(CaffeError):
    """Fewer ranks survive than --min-ranks."""


class ReplacementAbandoned(CaffeError):
    """This spawned replacement was given up by the job before it joined (a failure during the
    re-grow); it ends without having trained."""


class DataParallelSolver(Solver):
    """A Solver whose iteration is V virtual-worker micro-batches spread over the ranks of
    ``comm``. The gradient sum is divided by V (each micro-batch loss is already normalised),
    as Caffe divides by iter_size."""

    def __init__(self, param, comm, virtual_workers=None, min_ranks=1, ledger=None, overlap=False,
                 bucket_mb=None, hierarchy='auto', ranks_per_node=None, deterministic=False, regrow=False,
                 max_regrows=10, argv=None, **kwargs):
        self.comm = comm
        super().__init__(param, **kwargs)
        self.V = virtual_workers or getattr(comm, 'launched_size', comm.size)  # ranks lost at start-up too
        self.min_ranks = min_ranks
        joining = getattr(comm, 'joining', False)
        self.hosting = {} if joining else assign(self.V, comm.members)
        self.regrow, self.regrows_left, self.argv = regrow, max_regrows, list(sys.argv[1:] if argv is None else argv)
        self.target_size, self.regrows, self._pending = comm.size, [], None
        self.failures = []
        self._detect_s = 0.0
        self.samples = 0
        self.ledger_path = ledger
        self._set_root_logging()
        self.local_request = lambda: NONE  # this rank's signal requests (cli.train installs them)
        self.action_request = self._agreed_action
        self._request, self._agreed_request = NONE, NONE
        if getattr(comm, 'lost_at_start', None):
            logger.warning('Recovered from the failure of ranks %s at iteration 0 (start): they died while the job '
                           'started; total 0.000s; world size now %d; workers %s', comm.lost_at_start, comm.size,
                           self.hosting)
        self._use_worker_order(None)  # decided with the levels below
        self._setup_data_layers()
        self._setup_batchnorm()
        if not joining:
            self._broadcast_weights()
        self.deterministic = deterministic
        self._levels_what = 'levels built at the next reduction'
        self._kept, self._buffers = {}, {}
        self._slots, self._slots_key = None, None
        self.overlap = overlap and not deterministic
        per_bucket = bucket_elements(self.net.param_diff.size, bucket_mb)
        self.buckets = plan_buckets(self.net, per_bucket)
        self._reduction = None
        self.net._hooks['after_backward'].append(self._layer_done)
        self.comm_wait_s, self.comm_exposed_s, self.reductions = 0.0, 0.0, 0
        self._backward_end = time.time()
        if hierarchy not in ('auto', 'flat'):
            raise CaffeError('hierarchy must be auto or flat, got %r' % hierarchy)
        if ranks_per_node is not None and ranks_per_node < 1:
            raise CaffeError('--ranks-per-node must be at least 1, got %d' % ranks_per_node)
        self.hierarchy, self.ranks_per_node = hierarchy, ranks_per_node
        self._levels, self._levels_stale = None, True
        if joining:
            self._join()  # takes the members' choice
        elif deterministic:  # the worker order whatever the levels: none to build
            self._use_worker_order(True)
        else:
            self._collective(self._build_levels, 'levels')
            self._use_worker_order(not self.overlap and self._levels is None)
        if self.ordered:
            logger.info('Gradient reduction: in worker order, bitwise the same whatever fails and whatever --np '
                        '(each rank sums one segment of the float32 gradients over all workers: Alltoallv, then '
                        'Allgatherv)%s', '' if deterministic else '; --overlap on or two levels reduce in buckets '
                        'instead, in an order that depends on the ranks')
        else:
            logger.info('Gradient reduction: %s; %d float32 buckets of >= %.3g MB%s', self._levels_what,
                        len(self.buckets), per_bucket * 4 / 2 ** 20, ', overlapped with backward' if self.overlap
                        else ', after backward (no overlap)')
            self._levels_logged = self._levels_what

    # -- setup -------------------------------------------------------------------------------
    def _use_worker_order(self, ordered):
        """Sum the gradients in worker order (bitwise the same whatever fails) or in buckets.
        In buckets, the training net keeps F(2x2, 5x5) out (ConvolutionLayer.keep_5x5_rounding:
        its rounding would let runs whose reductions add in another order drift apart); in
        worker order every run adds the same bits, so the net runs as a single process does."""
        self.ordered = ordered
        for layer in self.net.layers:
            if hasattr(layer, 'keep_5x5_rounding'):
                layer.keep_5x5_rounding = not ordered

    @property
    def is_root(self):
        return self.comm.rank == 0

    def _set_root_logging(self):
        import logging
        if not self.is_root:
            logger.setLevel(max(logger.level, logging.WARNING))
        else:
            from ..log import _level_from_env
            logger.setLevel(_level_from_env())

    def _setup_data_layers(self):
        self.data_layers = self.net.data_layers()
        self.spare_core = (os.cpu_count() or 1) > ranks_on_this_node() * num_threads()
        for net in [self.net] + self.test_nets:
            for layer in net.data_layers():
                layer.stop_prefetch()
                layer.synchronous = True

    def _setup_batchnorm(self):
        self.bn_layers = [l for l in self.net.layers if l.type == 'BatchNorm' and not l.use_global_stats]
        self.bn_size = sum(2 * l.channels for l in self.bn_layers)
        self._bn_rows = {}
        for layer in self.bn_layers:
            layer.stats_hook = self._record_bn

    def _record_bn(self, layer, mean, var):
        self._bn_current.setdefault(id(layer), []).append((mean, var))

    def _agreed(self, fn):
        """Run collective ``fn()``, then Agree on its success at every survivor, whether or not
        it failed here (a rank that skipped the Agree would deadlock the others in it)."""
        ok, result = True, None
        try:
            result = fn()
        except ProcessFailure:
            ok = False
        faults.check('agree', self.iter)
        if not self.comm.agree(ok):
            raise ProcessFailure('the collective failed at some rank')
        return result

    def _collective(self, fn, what):
        """Run ``fn()`` (a collective) under Agree until it succeeds at every survivor;
        recover between attempts. An MPI error that recurs with nobody lost is a real error."""
        futile = 0
        while True:
            started = time.perf_counter()
            try:
                return self._agreed(fn)
            except ProcessFailure as e:
                self._detect_s = time.perf_counter() - started  # time spent in the failed attempt
                if not self._recover(what):
                    futile += 1
                    if futile >= 3:
                        raise CaffeError('%s: MPI keeps failing without any process failure: %s' % (what, e))

    def _broadcast_weights(self):
        faults.check('broadcast', 0)

        def bcast():
            return self.comm.bcast(self.net.param_data.astype(np.float64), 0)
        self.net.param_data[...] = self._collective(bcast, 'broadcast').astype(np.float32)

    # -- the iteration -----------------------------------------------------------------------
    def _hosted(self):
        return self.hosting[self.comm.world_rank]

    def _reading(self, layer, v, iteration, pass_index):
        """(record mapping, position) of worker v's micro-batch ``pass_index`` of ``iteration``."""
        n, isz = len(layer.db), self.param.iter_size
        return (lambda p, v=v, n=n: record_of(p, v, self.V, n),
                (iteration * isz + pass_index) * layer.batch + layer.initial_position)

    def _read_ahead(self, v, iteration, pass_index):
        """Let the Data layers read the micro-batch expected next while this one computes, if
        this node has a core to spare (else the reading thread only competes with compute)."""
        if not self.spare_core:
            return
        for layer in self.data_layers:
            if hasattr(layer, 'read_ahead'):
                records, start = self._reading(layer, v, iteration, pass_index)
                layer.read_ahead((v, self.V), start, records)

    def _run_worker(self, v, collect, reduction=None, then=None):
        """Forward/backward of worker v's micro-batches (all iter_size passes); param diffs
        accumulate. Appends (v, records) to collect; returns the summed loss. ``reduction``
        (if any) posts buckets during the last pass's backward; ``then`` = (worker, iteration)
        expected next, whose first micro-batch is read ahead during the last backward."""
        loss = 0.0
        isz = self.param.iter_size
        for pass_index in range(isz):
            for layer in self.data_layers:
                layer.record_of, layer.position = self._reading(layer, v, self.iter, pass_index)
                layer.serving = (v, self.V)
            self.net.set_iteration(self.iter, worker=v, pass_index=pass_index)
            faults.check('forward', self.iter)
            self._bn_current = {}
            loss += self.net.forward_from_to()
            if pass_index < isz - 1:
                self._read_ahead(v, self.iter, pass_index + 1)
            elif then is not None:
                self._read_ahead(then[0], then[1], 0)
            faults.check('backward', self.iter)
            if reduction is not None and pass_index == isz - 1:
                self._reduction = reduction
            try:
                self.net.backward_from_to()
            finally:
                self._reduction = None
            records = [r for l in self.data_layers[:1] for r in getattr(l, 'last_records', [])]
            collect.append((v, pass_index, records, self._bn_current))
        return loss

    def forward_backward(self):
        """Hosted workers' gradients -> allreduce -> agree; leaves mean gradient in param_diff."""
        isz = self.param.iter_size
        if self.ordered:  # each hosted worker's gradient, kept apart (buffers reused) ...
            hosted = self._hosted()
            # ... unless one rank computes all workers in order: it adds them as they come, the
            # same additions in the same order, without V copies (--np 1 --virtual-workers V)
            self._folding = self.comm.size == 1 and hosted == sorted(hosted)
            self._gradients = {}
            wanted = {'fold'} if self._folding else set(hosted)
            self._kept = {key: buf for key, buf in self._kept.items() if key in wanted}
        else:
            self._local = np.zeros(self.net.param_diff.size, np.float32)
        self._local_loss = 0.0
        self._contributions = []
        self._first_attempt = None
        self._request = self.local_request()  # once per iteration: a retry packs the same
        self._compute(self._hosted(), overlap=self.overlap)
        result, extras = self._collective(self._reduce, 'allreduce')
        # exposed communication: from the last rank's end of backward to the agreed result
        self.comm_exposed_s += max(0.0, time.time() - extras[self._extras_split(3):].max())
        self.reductions += 1
        np.multiply(result, np.float32(1.0 / self.V), out=self.net.param_diff)
        self._apply_batchnorm(extras[:self._extras_split(0)])
        self._check_ledger(extras[self._extras_split(0):self._extras_split(1)])
        total_loss = float(extras[self._extras_split(1)])
        snapshots, stops = extras[self._extras_split(2):self._extras_split(3)]
        self._agreed_request = STOP if stops else SNAPSHOT if snapshots else NONE
        self.samples += self.V * isz * (self.data_layers[0].batch if self.data_layers else 0)
        return total_loss / (self.V * isz)

    def _compute(self, workers, overlap=False):
        """Add the gradients and losses of ``workers`` to the kept local sums, one worker at a
        time. With ``overlap``, the last worker's gradient goes into the sum bucket by bucket
        during its backward, each bucket sent as soon as it is complete (the first attempt of
        the reduction)."""
        hosted = self._hosted()
        for k, v in enumerate(workers):
            if self.ordered:
                self._detach_kept()
            self.net.clear_param_diffs(overwrite_next=True)
            then = (workers[k + 1], self.iter) if k + 1 < len(workers) else \
                (hosted[0], self.iter + 1) if hosted else None
            if overlap and k == len(workers) - 1 and not self._levels_stale:
                self._first_attempt = BucketedReduction(self.comm, self.buckets, self._local, self.net.param_diff,
                                                        self._levels, self._on_post)
                self._local_loss += self._run_worker(v, self._contributions, self._first_attempt, then)
                self._first_attempt.post_all()  # buckets no layer marked done (none expected)
            else:
                self._local_loss += self._run_worker(v, self._contributions, then=then)
                if self.ordered:
                    self._keep_gradient(v)
                else:
                    self._local += self.net.param_diff
        self._backward_end = time.time()

    def _keep_gradient(self, v):
        """Worker order: keep worker v's gradient for the reduction (param_diff itself, until
        another worker's backward needs it: see :meth:`_detach_kept`), or, folding (one rank,
        workers in order), add it to the running sum."""
        key = 'fold' if self._folding else v
        if self._folding and key in self._gradients:  # after the first worker
            self._gradients[key] += self.net.param_diff
            return
        self._gradients[key] = self.net.param_diff

    def _detach_kept(self):
        """Before param_diff is cleared for another worker's backward (the next hosted worker, or
        an orphan recomputed after a failure), the gradient kept in it moves to a reused
        buffer. The last worker's stays in place: the reduction only reads it (a 1.7 MB copy per
        LeNet iteration saved, ~0.3 ms)."""
        for key, kept in self._gradients.items():
            if kept is self.net.param_diff:
                self._gradients[key] = self._kept.setdefault(key, np.empty_like(kept))
                np.copyto(self._gradients[key], kept)

    def _build_levels(self):
        """(Re)build the two reduction levels from the current communicator, or decide on a
        flat reduction: with --hierarchy flat, one rank, or (auto, no --ranks-per-node) when
        no node holds several ranks or all ranks share one node (one level already)."""
        if self._levels is not None:
            self._levels.free()
        self._levels, self._levels_stale = None, False
        if self.hierarchy == 'flat' or self.comm.size == 1:
            what = 'flat (one allreduce over all %d ranks)' % self.comm.size
        else:
            levels = Levels(self.comm, self.ranks_per_node)
            if self.ranks_per_node or 1 < levels.nodes < self.comm.size:
                self._levels = levels
                what = ('two levels: %d nodes of up to %d ranks (%s); each node reduces to its leader, the '
                        'leaders allreduce, then broadcast to their node'
                        % (levels.nodes, levels.largest, '--ranks-per-node %d' % self.ranks_per_node
                           if self.ranks_per_node else 'ranks sharing memory'))
            else:
                levels.free()
                what = 'flat (one allreduce over all %d ranks; %s)' % (
                    self.comm.size, 'all on one node' if levels.nodes == 1 else 'one rank per node')
        self._levels_what = what
        if self.ordered is False and what != getattr(self, '_levels_logged', None):
            logger.info('Gradient reduction: %s', what)
            self._levels_logged = what

    def _on_post(self, level):
        faults.check(level, self.iter)

    def _agreed_action(self):
        """What a signal at any rank asked for, agreed through the last reduction (so every
        rank stops or snapshots at the same iteration); called at every iteration's end, where
        a re-grow advances."""
        action, self._agreed_request = self._agreed_request, NONE
        if self.regrow and action != STOP and self.iter < self.param.max_iter:
            self._regrow_step()
        return action

    def _layer_done(self, layer_index):
        if self._reduction is not None:
            self._reduction.layer_done(layer_index)

    def _extras_split(self, part):
        """Where part 0 (BatchNorm statistics), 1 (ledger), 2 (loss), 3 (signal requests:
        snapshot, stop counts) of the extras ends; then each rank's end-of-backward time
        (time.time()) in its own slot."""
        ends = [self.bn_size * self.V * self.param.iter_size]
        ends.append(ends[0] + 3 * self.V)
        ends.append(ends[1] + 1)
        ends.append(ends[2] + 2)
        return ends[part]

    def _pack(self):
        isz = self.param.iter_size
        bn = np.zeros((self.V, isz, self.bn_size))
        ledger = np.zeros((self.V, 3))
        for v, pass_index, records, stats in self._contributions:
            parts = []
            for layer in self.bn_layers:
                (mean, var), = stats.get(id(layer), [(np.zeros(layer.channels), np.zeros(layer.channels))])
                parts += [mean, var]
            if parts:
                bn[v, pass_index] = np.concatenate(parts)
            r = np.asarray(records, np.float64)
            ledger[v] += [len(r), r.sum(), (r * r).sum()]
        backward_end = np.zeros(self.comm.size)
        backward_end[self.comm.rank] = self._backward_end
        requests = [float(self._request == SNAPSHOT), float(self._request == STOP)]
        return np.concatenate([bn.ravel(), ledger.ravel(), [self._local_loss], requests, backward_end])

    def _reduce(self):
        """One attempt: the overlapped one started during backward, else (a retry, or no
        overlap) all buckets from the kept local sum at once."""
        faults.check('allreduce', self.iter)
        reduction, self._first_attempt = self._first_attempt, None
        if self.ordered and self._folding:
            return self._gradients['fold'], self._pack()
        if self.ordered:
            reduction = WorkerOrderReduction(self.comm, self.hosting, self.V, self.net.param_diff.size, self._buffers,
                                             self._on_post, self._shared_slots())
            try:
                return reduction.finish(self._gradients, self._pack())
            finally:
                self.comm_wait_s += reduction.waited_s
        if reduction is None:
            if self._levels_stale:
                self._build_levels()
            reduction = BucketedReduction(self.comm, self.buckets, self._local, None, self._levels, self._on_post,
                                          blocking=not self.overlap)
        try:
            return reduction.finish(self._pack())
        finally:
            self.comm_wait_s += reduction.waited_s

    def _shared_slots(self):
        """The shared-memory slots of the worker-order sum (built, collectively, on first use and
        whenever the members or their workers change), or None: one rank, turned off, or not
        every rank on this node."""
        if self.comm.size == 1 or not shared_sum_wanted():
            return None
        rows = [len(self.hosting[m]) for m in self.comm.members]
        key = (tuple(self.comm.members), tuple(rows))
        if key != self._slots_key:
            self._slots = None  # the old mapping goes with its last view
            self._slots = SharedSlots.build(self.comm, self.net.param_diff.size, rows)
            self._slots_key = key
            logger.info('Worker-order sum over %d ranks: %s', self.comm.size,
                        'through shared memory (every rank on this node)' if self._slots is not None
                        else 'by MPI exchanges')
        return self._slots

    def _apply_batchnorm(self, flat):
        """Every rank applies all workers' statistics in worker order: replicas stay identical."""
        if not self.bn_layers:
            return
        stats = flat.reshape(self.V, self.param.iter_size, self.bn_size)
        for v in range(self.V):
            for p in range(self.param.iter_size):
                offset = 0
                for layer in self.bn_layers:
                    c = layer.channels
                    mean, var = stats[v, p, offset:offset + c], stats[v, p, offset + c:offset + 2 * c]
                    offset += 2 * c
                    b = layer.blobs
                    b[2].data[0] = b[2].data[0] * layer.maf + 1
                    b[0].data[...] = b[0].data * layer.maf + mean.astype(np.float32)
                    b[1].data[...] = b[1].data * layer.maf + var.astype(np.float32)

    def _check_ledger(self, flat):
        """The allreduced per-worker (count, sum, sum of squares) of record indices must equal
        what each worker should have read exactly once; then log the records to the ledger."""
        if not self.data_layers:
            return
        layer = self.data_layers[0]
        per = flat.reshape(self.V, 3)
        isz = self.param.iter_size
        lines = []
        for v in range(self.V):
            positions = range((self.iter * isz) * layer.batch + layer.initial_position,
                              ((self.iter + 1) * isz) * layer.batch + layer.initial_position)
            expected = np.array([record_of(p, v, self.V, len(layer.db)) for p in positions], np.float64)
            want = [len(expected), expected.sum(), (expected * expected).sum()]
            if not np.allclose(per[v], want):
                raise SolverError('iteration %d: worker %d contributed records (count, sum, sumsq) %s, '
                                  'expected %s: a sample was lost or repeated' % (self.iter, v, per[v].tolist(), want))
            lines.append({'iter': self.iter, 'worker': v, 'records': expected.astype(int).tolist()})
        if self.ledger_path and self.is_root:
            with open(self.ledger_path, 'a') as f:
                for line in lines:
                    f.write(json.dumps(line) + '\n')

    # -- re-grow -----------------------------------------------------------------------------
    def _regrow_step(self):
        """At an iteration's end: spawn replacements if ranks are missing, or let the spawned
        ones join once all are ready. A failure on the way abandons them (they end) and is
        recovered from like any other; a later iteration tries again."""
        try:
            if self._pending is not None:
                self._join_if_ready()
            elif self.comm.size < self.target_size and self.regrows_left > 0:
                self._spawn_replacements()
        except ProcessFailure:
            self._abandon_replacements()
            self._detect_s = 0.0
            self._recover('regrow')

    def _spawn_replacements(self):
        """One replacement per re-grow (several missing ranks come back one after the other):
        Open MPI ends every process of a spawned job when one of them dies, so replacements
        spawned together would die together."""
        self.regrows_left -= 1
        started = time.perf_counter()
        faults.check('regrow', self.iter)
        merged = self.comm.spawn(1, self.argv + ['--virtual-workers', str(self.V)])
        try:
            ready = merged.Ibarrier()  # completes when the replacement has built its solver
        except self.comm.MPI.Exception:
            self.comm.abandon(merged)
            raise ProcessFailure('the replacement\'s readiness barrier failed') from None
        self._pending = {'merged': merged, 'ready': ready, 'iter': self.iter, 'started': started,
                         'spawn_s': time.perf_counter() - started}

    def _join_if_ready(self):
        pending = self._pending
        try:
            ready, failed = bool(pending['ready'].Test()), False
        except self.comm.MPI.Exception:
            ready, failed = False, True
        waited = time.perf_counter() - pending['started']
        if not self.comm.agree(not failed and waited < REGROW_READY_TIMEOUT_S):
            logger.warning('Giving up the replacement spawned at iteration %d (%s)', pending['iter'],
                           'one failed' if failed else 'not ready after %.0fs' % REGROW_READY_TIMEOUT_S)
            self._abandon_replacements()
            return
        if not self.comm.agree(ready):
            return
        started = time.perf_counter()
        faults.check('regrow', self.iter)
        merged, old_size = pending['merged'], self.comm.size
        try:
            self.comm._call(merged.bcast, self._member_state() if self.is_root else None, 0)
            prepared = self.comm.prepare(merged, self.comm.next_id, old_size)
            committed = bool(self.comm._call(merged.Agree, 1))  # fails at all members or at none
        except ProcessFailure:
            committed = False
        if not committed:
            raise ProcessFailure('a failure while the replacements joined')
        self._pending = None
        self.comm.switch(merged, prepared)
        self._after_regrow()
        joined_s = time.perf_counter() - started
        self.regrows.append({'iter': self.iter, 'spawned_at': pending['iter'], 'ids': self.comm.members[old_size:],
                             'wait_s': pending['spawn_s'] + joined_s})
        (logger.warning if self.is_root else logger.info)(  # one line per re-grow
            'Re-grew to %d ranks at iteration %d: replacement rank(s) %s (spawned at iteration %d in %.3fs, state '
            'sent and joined in %.3fs: training waited %.3fs); workers %s', self.comm.size, self.iter,
            self.comm.members[old_size:], pending['iter'], pending['spawn_s'], joined_s, pending['spawn_s'] + joined_s,
            {r: w for r, w in self.hosting.items()})

    def _abandon_replacements(self):
        if self._pending is not None:
            self.comm.abandon(self._pending['merged'])
            self._pending = None

    def _after_regrow(self):
        """Every member, replacements included, after the commit: an even share of workers."""
        self.hosting = assign(self.V, self.comm.members)
        self._levels_stale = True

    def _member_state(self):
        """What a replacement needs to continue as a member (the root's copy)."""
        return {'next_id': self.comm.next_id, 'old_size': self.comm.size, 'ordered': self.ordered,
                'iter': self.iter, 'current_step': self.current_step, 'V': self.V, 'target_size': self.target_size,
                'regrows_left': self.regrows_left, 'samples': self.samples,
                'blobs': [b.data for layer in self.net.layers for b in layer.blobs],
                'history': self.history, 'losses': self.losses, 'smoothed_loss': self.smoothed_loss}

    def _join(self):
        """A replacement: say it is ready (the members' barrier), receive the state, Agree to
        commit. Raises ReplacementAbandoned if the job gave it up first."""
        merged = self.comm.comm
        try:
            self.comm._call(lambda: merged.Ibarrier().Wait())  # matches the members' Ibarrier
            state = self.comm._call(merged.bcast, None, 0)
            prepared = self.comm.prepare(merged, state['next_id'], state['old_size'])
            fits = state['V'] == self.V and len(state['blobs']) == sum(len(layer.blobs) for layer in self.net.layers)
            if not self.comm._call(merged.Agree, int(fits)):
                raise ProcessFailure('commit refused' if fits else 'this process builds another net or another '
                                     'number of virtual workers (%d, the job %d)' % (self.V, state['V']))
        except ProcessFailure as e:
            raise ReplacementAbandoned('the job gave up this replacement before it joined (%s)' % e) from None
        self.comm.switch(merged, prepared)
        blobs = [b for layer in self.net.layers for b in layer.blobs]
        for blob, data in zip(blobs, state['blobs']):
            blob.data[...] = data
        for mine, theirs in zip(self.history, state['history']):
            mine[...] = theirs
        self.iter, self.current_step, self.samples = state['iter'], state['current_step'], state['samples']
        self.target_size, self.regrows_left = state['target_size'], state['regrows_left']
        self._use_worker_order(state['ordered'])
        self.losses, self.smoothed_loss = list(state['losses']), state['smoothed_loss']
        self.sync_data_positions()
        self._after_regrow()
        self._set_root_logging()

    # -- failures ----------------------------------------------------------------------------
    def _recover(self, phase):
        t_detect = time.perf_counter()
        was_root = self.is_root
        old_hosting = self.hosting
        self._abandon_replacements()  # spawned for the old membership: a later iteration spawns anew
        dead, seconds = self.comm.recover()
        self._levels_stale = True  # rebuilt from the shrunk communicator before the next reduction
        if not dead:
            return False
        if self.comm.size < self.min_ranks:
            state = None
            self._set_root_logging()  # a new root logs its final snapshot lines
            if self.is_root:
                try:
                    state = self.snapshot()[-1]
                except CaffeError as e:
                    logger.error('final snapshot failed: %s', e)
            alive = '1 rank survives' if self.comm.size == 1 else '%d ranks survive' % self.comm.size
            resume = (' at iteration %d (%s); resume with: pycaffe-ft train --solver %s --snapshot %s --np %d'
                      % (self.iter, state, self.path or 'SOLVER', state, self.min_ranks)) if state else ''
            raise TooFewRanks('only %s (original ranks %s), fewer than --min-ranks %d; a final snapshot was '
                              'written%s' % (alive, self.comm.members, self.min_ranks, resume or
                                             ' at iteration %d by the root' % self.iter))
        self.hosting = reassign(old_hosting, self.comm.members)
        mine = [v for v in self._hosted() if v not in old_hosting.get(self.comm.world_rank, [])]
        self._set_root_logging()
        t0 = time.perf_counter()
        if phase == 'allreduce' and mine:
            self._compute(mine)
        recompute = time.perf_counter() - t0
        total = time.perf_counter() - t_detect
        self.failures.append({'iter': self.iter, 'phase': phase, 'dead': dead, 'recovery_s': total})
        logger.warning('Recovered from the failure of ranks %s at iteration %d (%s): detected after %.3fs in '
                       'the collective, shrink+agree %.3fs, orphaned micro-batches recomputed in %.3fs, '
                       'total %.3fs; world size now %d; workers %s', dead, self.iter, phase,
                       self._detect_s, seconds, recompute, total, self.comm.size,
                       {r: w for r, w in self.hosting.items()})
        if not was_root and self.is_root:
            logger.warning('Rank %d is the new root: it logs and snapshots from now on', self.comm.world_rank)
            self._resnapshot_if_missed()
        return True

    def _resnapshot_if_missed(self):
        p = self.param
        if p.snapshot and self.iter > 0 and self.iter % p.snapshot == 0:
            from ..solvers.snapshot import snapshot_filename
            if not os.path.exists(snapshot_filename(self, '.solverstate')):
                self.snapshot()

    # -- testing and snapshots ---------------------------------------------------------------
    def test(self, test_net_id=0):
        """Test batches are split over the ranks (batch j on rank j mod size) and summed."""
        p = self.param
        net = self.test_nets[test_net_id]
        iters = p.test_iter[test_net_id]
        done = self.tests_done(self.iter)
        logger.info('Iteration %d, Testing net (#%d)', self.iter, test_net_id)
        self._share_test_nets()
        layers = net.data_layers()

        def run():
            totals = None
            loss = 0.0
            for j in range(self.comm.rank, iters, self.comm.size):
                faults.check('test', self.iter)
                for layer in layers:
                    layer.position = layer.initial_position + (done * iters + j) * layer.batch
                iter_loss = net.forward_from_to()
                loss += iter_loss
                values = np.concatenate([net._blob_list[i].data.ravel().astype(np.float64) for i in net.output_ids])
                totals = values if totals is None else totals + values
            size = sum(net._blob_list[i].count for i in net.output_ids)
            local = np.concatenate([totals if totals is not None else np.zeros(size), [loss]])
            return self.comm.allreduce_sum(local)
        summed = self._collective(run, 'test')
        if p.test_compute_loss:
            logger.info('Test loss: %g', summed[-1] / iters)
        means, offset = [], 0
        for i in net.output_ids:
            c = net._blob_list[i].count
            means.append(summed[offset:offset + c] / iters)
            offset += c
        return self._log_outputs(net, 'Test', means)

    def snapshot(self):
        if self.is_root:
            return super().snapshot()
        return None

    def summary(self):
        self._abandon_replacements()  # still building at the end: let it end now
        faults.warn_unfired()
        total = sum(f['recovery_s'] for f in self.failures)
        logger.info('Parallel training summary: %d virtual workers, %d ranks alive of %d, %d failures '
                    '(%s), total recovery time %.3fs, %d re-grows%s, %d samples processed', self.V, self.comm.size,
                    len(self.comm.members) + sum(len(f['dead']) for f in self.failures), len(self.failures),
                    ', '.join('ranks %s at iteration %d (%s)' % (f['dead'], f['iter'], f['phase']) for f in self.failures) or 'none',
                    total, len(self.regrows), ''.join(' (ranks %s joined at iteration %d, training waited %.3fs)'
                                                      % (g['ids'], g['iter'], g['wait_s']) for g in self.regrows),
                    self.samples)
        if self.reductions:
            logger.info('Gradient reduction: %.2f ms per iteration exposed (from the last rank\'s end of '
                        'backward to the agreed sum); %.2f ms per iteration spent waiting for it after '
                        'backward, imbalance between ranks included (%s)',
                        1e3 * self.comm_exposed_s / self.reductions, 1e3 * self.comm_wait_s / self.reductions,
                        'in worker order' if self.ordered else 'overlap %s, %d buckets'
                        % ('on' if self.overlap else 'off', len(self.buckets)))
