"""The Solver: Caffe's training loop (iter_size accumulation, smoothed loss, display, tests,
snapshots) around one update rule. Serial and distributed training are the same code: the
only meeting point with a communicator is the ``on_gradients_ready`` callback list."""
import math
import os
import time

import numpy as np

from .. import caffe_runtime
from ..errors import SolverError
from ..intra_op import adapt_threads, run_chunks
from ..kernels.solver_update import L1, L2, NO_DECAY
from ..log import logger
from ..net import Net
from ..netspec_io import load_net_param, load_solver_param
from ..proto import caffe_pb2
from ..random import set_random_seed
from .lr_policies import learning_rate
from .rules import RULES
from .settings import check_solver_settings
from .snapshot import restore_state, write_snapshot

__all__ = ['Solver', 'STOP', 'SNAPSHOT', 'NONE']

NONE, STOP, SNAPSHOT = 'none', 'stop', 'snapshot'
f32 = np.float32
_REGULARIZATION = {'L2': L2, 'L1': L1}


def _finite(x):
    """All of x finite: one BLAS dot (NaN and inf propagate), confirmed element-wise only in
    the rare case the sum of squares overflows."""
    return bool(np.isfinite(np.dot(x, x))) or bool(np.isfinite(x).all())


def _norm(x, block=1 << 20):
    """L2 norm of a float32 vector, accumulated in float64 a block at a time."""
    total = 0.0
    for lo in range(0, x.size, block):
        part = x[lo:lo + block].astype(np.float64)
        total += float(np.dot(part, part))
    return total ** 0.5


class Solver:
    """A Caffe solver.

    ``Solver(solver_file_or_param, solver_type=None)``; ``solver_type`` forces the update rule
    (pycaffe's ``caffe.SGDSolver(path)`` etc.), else the solver's ``type`` field chooses.

    Hooks: ``add_callback(on_start, on_gradients_ready)`` (pycaffe), ``action_request`` (a
    callable returning NONE/STOP/SNAPSHOT: signals), ``before_update(solver)``. A callback
    must not change the weights; ``on_gradients_ready`` may change ``net.param_diff`` (the
    allreduce of a parallel trainer does).
    """

    def __init__(self, param, solver_type=None, weights=None, level=None, stages=None, source=None):
        """``param``: a solver file or SolverParameter; ``source``: the file it came from, when
        ``param`` is already parsed (named in error messages)."""
        self.param = load_solver_param(param)
        self.path = source or (param if isinstance(param, str) and os.path.exists(param) else None)
        p = self.param
        if solver_type is not None:
            p.type = solver_type
        rule_cls = RULES.get(p.type, SolverError, 'solver: ')
        check_solver_settings(p, self.path or 'the solver')
        if p.lars_eta < 0:
            raise SolverError('lars_eta must be a positive number (0 = LARS off), got %g' % p.lars_eta)
        if p.lars_eta > 0 and p.type not in ('SGD', 'Nesterov'):
            raise SolverError('lars_eta (LARS) applies to the SGD and Nesterov solvers, not type: "%s"' % p.type)
        if p.solver_mode == caffe_pb2.SolverParameter.GPU and p.HasField('solver_mode'):
            from ..log import warn_once
            warn_once('gpu', 'solver_mode: GPU requested; pycaffe-ft runs on the CPU')
        if p.random_seed >= 0:
            set_random_seed(p.random_seed)
        self.level, self.stages = level, stages
        self.solver_rank = caffe_runtime.solver_rank()  # (caffe.set_solver_rank; see root)
        self.net = self._init_train_net()
        self.test_nets = self._init_test_nets() if self.root else []
        self.rule = rule_cls(p)
        n = self.net.param_data.size
        self.history = [np.zeros(n, np.float32) for _ in range(rule_cls.history_blocks)]
        counts = [b.count for b in self.net.learnable_params]
        self._bounds = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self.iter = 0
        self.current_step = 0
        self.losses, self.smoothed_loss = [], 0.0
        self.callbacks = []
        self.action_request = lambda: NONE
        self.requested_early_exit = False
        self.snapshot_paths = []
        for w in list(p.weights) + ([weights] if weights else []):
            self.net.copy_from(w)
        self._share_test_nets()
        logger.info('Solver scaffolding done.')

    # -- construction ------------------------------------------------------------------------
    def _state(self, phase, extra=None, net_param=None):
        state = caffe_pb2.NetState(phase=phase)
        if net_param is not None:
            state.MergeFrom(net_param.state)
        if extra is not None:
            state.MergeFrom(extra)
        if self.level is not None:
            state.level = self.level
        if self.stages:
            state.stage.extend(self.stages)
        return state

    def _make_net(self, source, state):
        param, origin = load_net_param(source)
        param.state.CopyFrom(state)
        return Net(param, phase=state.phase, level=state.level, stages=list(state.stage), source=origin)

    def _init_train_net(self):
        p = self.param
        given = [f for f in ('train_net_param', 'train_net', 'net_param', 'net') if p.HasField(f)]
        if len(given) != 1:
            raise SolverError('the solver must specify exactly one of train_net_param, train_net, '
                              'net_param or net; it gives %s' % (given or 'none'))
        source = getattr(p, given[0])
        state = self._state(caffe_pb2.TRAIN, p.train_state if p.HasField('train_state') else None,
                            source if isinstance(source, caffe_pb2.NetParameter) else None)
        logger.info('Creating training net from %s', given[0] if 'param' in given[0] else source)
        return self._make_net(source, state)

    def _init_test_nets(self):
        p = self.param
        sources = list(p.test_net_param) + list(p.test_net)
        generic = p.net_param if p.HasField('net_param') else (p.net if p.HasField('net') else None)
        if generic is not None and len(p.test_iter) > len(sources):
            sources += [generic] * (len(p.test_iter) - len(sources))
        if len(p.test_iter) != len(sources):
            raise SolverError('test_iter must be given once per test net: %d test nets, %d test_iter '
                              'values' % (len(sources), len(p.test_iter)))
        if sources and p.test_interval <= 0:
            raise SolverError('test nets are defined but test_interval is not positive')
        if len(p.test_state) not in (0, len(sources)):
            raise SolverError('test_state must be given once per test net (%d), or not at all'
                              % len(sources))
        nets = []
        for i, source in enumerate(sources):
            state = self._state(caffe_pb2.TEST, p.test_state[i] if len(p.test_state) else None,
                                source if isinstance(source, caffe_pb2.NetParameter) else None)
            logger.info('Creating test net (#%d)', i)
            nets.append(self._make_net(source, state))
        return nets

    def _share_test_nets(self):
        for net in self.test_nets:
            net.copy_trained_layers_from_net(self.net, share=True)

    # -- pycaffe API -------------------------------------------------------------------------
    def add_callback(self, on_start=None, on_gradients_ready=None):
        self.callbacks.append((on_start, on_gradients_ready))

    @property
    def root(self):
        """Whether this is the root solver (solver_rank 0), the only one that builds test nets,
        tests, displays and snapshots, as in Caffe."""
        return self.solver_rank == 0

    @property
    def max_iter(self):
        return self.param.max_iter

    def share_weights(self, net):
        """Make ``net``'s learnable params the training net's (pycaffe's solver.share_weights)."""
        net.share_with(self.net)

    def step(self, iters):
        """Run ``iters`` training iterations (Caffe's Solver::Step)."""
        p = self.param
        start_iter, stop_iter = self.iter, self.iter + iters
        self.losses, self.smoothed_loss = [], 0.0
        timer, iters_last = time.perf_counter(), self.iter
        while self.iter < stop_iter:
            self.net.clear_param_diffs(overwrite_next=True)
            if p.test_interval and self.iter % p.test_interval == 0 and \
                    (self.iter > 0 or p.test_initialization):
                self.test_all()
                if self.requested_early_exit:
                    break
            for on_start, _ in self.callbacks:
                if on_start:
                    on_start()
            adapt_threads()
            display = p.display and self.iter % p.display == 0
            self.net.debug_info = bool(display and p.debug_info)
            try:
                loss = self.forward_backward()
            finally:
                self.net.settle_param_diffs()
            if not math.isfinite(loss):
                raise self._non_finite('the loss is %s' % loss, 'not found in the blobs')
            self._update_smoothed_loss(loss, start_iter)
            if display and self.root:
                lapse = time.perf_counter() - timer
                per_s = (self.iter - iters_last) / (lapse or 1)
                logger.info('Iteration %d (%g iter/s, %gs/%d iters), loss = %g', self.iter, per_s,
                            lapse, p.display, self.smoothed_loss)
                timer, iters_last = time.perf_counter(), self.iter
                self._log_outputs(self.net, 'Train', None)
            for _, on_ready in self.callbacks:
                if on_ready:
                    on_ready()
            self.apply_update()
            self.iter += 1
            request = self.action_request()
            if (p.snapshot and self.iter % p.snapshot == 0 and self.root) or request == SNAPSHOT:
                self.snapshot()
            if request == STOP:
                self.requested_early_exit = True
                break

    def forward_backward(self):
        """Accumulate iter_size forward/backward passes; returns the mean loss."""
        loss = 0.0
        for i in range(self.param.iter_size):
            self.net.set_iteration(self.iter, pass_index=i)
            loss += self.net.forward_backward()
        return loss / self.param.iter_size

    def solve(self, resume=None):
        p = self.param
        logger.info('Solving %s', self.net.name)
        logger.info('Learning Rate Policy: %s', p.lr_policy)
        self.requested_early_exit = False
        if resume:
            logger.info('Restoring previous solver status from %s', resume)
            self.restore(resume)
        start_iter = self.iter
        self.step(p.max_iter - self.iter)
        if p.snapshot_after_train and (not p.snapshot or self.iter % p.snapshot != 0) and self.root:
            self.snapshot()
        if self.requested_early_exit:
            logger.info('Optimization stopped early.')
            return
        if p.display and self.iter % p.display == 0 and self.root:
            loss = self.net.forward_from_to()
            self._update_smoothed_loss(loss, start_iter)
            logger.info('Iteration %d, loss = %g', self.iter, self.smoothed_loss)
        if p.test_interval and self.iter % p.test_interval == 0:
            self.test_all()
        logger.info('Optimization Done.')

    # -- the update --------------------------------------------------------------------------
    def learning_rate(self):
        return learning_rate(self)

    def apply_update(self):
        """Clip, normalise, regularise, compute the update and apply it (SGDSolver::ApplyUpdate):
        after clipping, one fused pass over the flat buffers, split over the threads."""
        p = self.param
        rate = self.learning_rate()
        self.last_lr = rate
        if p.display and self.iter % p.display == 0 and self.root:
            logger.info('Iteration %d, lr = %g', self.iter, rate)
        g, w = self.net.param_diff, self.net.param_data
        self._clip(g)
        if p.weight_decay == 0:
            regularization = NO_DECAY
        elif p.regularization_type in _REGULARIZATION:
            regularization = _REGULARIZATION[p.regularization_type]
        else:
            raise SolverError('unknown regularization type "%s"; known: L1, L2' % p.regularization_type)
        rates = f32(rate) * np.asarray(self.net.params_lr, np.float32)
        decays = f32(p.weight_decay) * np.asarray(self.net.params_weight_decay, np.float32)
        iter_scale = f32(1.0 / p.iter_size) if p.iter_size > 1 else f32(1)
        if p.lars_eta > 0:
            rates = rates * self._lars_ratios(w, g, iter_scale, decays)
        chunk = 1 << 20  # elements per task: fixed, so the split never depends on the threads
        chunks = [(lo, min(lo + chunk, w.size)) for lo in range(0, max(w.size, 1), chunk)]
        if not all(run_chunks(lambda lo, hi: _finite(g[lo:hi]), chunks)):
            raise self._non_finite('the gradient is not finite', 'after clipping')
        run_chunks(lambda lo, hi: self.rule.apply(
            w, g, self.history, (lo, hi, self._bounds, rates, decays, iter_scale, regularization),
            self.iter), chunks)

    def _non_finite(self, what, otherwise):
        """The error that stops training before a non-finite update, naming where the first
        non-finite value is (``otherwise`` when no blob holds one)."""
        return SolverError('iteration %d: %s (first non-finite value: %s); training stopped before applying '
                           'this update (the last snapshot, if any, is intact)'
                           % (self.iter, what, self.net.first_non_finite() or otherwise))

    def _lars_ratios(self, w, g, iter_scale, decays):
        """LARS's per-blob factor eta * ||w|| / (||g|| + decay * ||w||) (float32), 1 where
        ||w|| or ||g|| is 0; g as the update will see it (clipped, iter_size-normalised)."""
        bounds = self._bounds
        ratios = np.ones(len(bounds) - 1, np.float32)
        for i in range(len(ratios)):
            w_norm = _norm(w[bounds[i]:bounds[i + 1]])
            g_norm = float(iter_scale) * _norm(g[bounds[i]:bounds[i + 1]])
            if w_norm > 0 and g_norm > 0:
                ratios[i] = self.param.lars_eta * w_norm / (g_norm + float(decays[i]) * w_norm)
        return ratios

    def _clip(self, g):
        clip = self.param.clip_gradients
        if clip < 0:
            return
        norm = _norm(g)
        if norm > clip:
            scale = clip / norm
            logger.info('Gradient clipping: scaling down gradients (L2 norm %g > %g) by scale factor %g',
                        norm, clip, scale)
            g *= f32(scale)

    def _update_smoothed_loss(self, loss, start_iter):
        average = self.param.average_loss
        if len(self.losses) < average:
            self.losses.append(loss)
            n = len(self.losses)
            self.smoothed_loss = (self.smoothed_loss * (n - 1) + loss) / n
        else:
            idx = (self.iter - start_iter) % average
            self.smoothed_loss += (loss - self.losses[idx]) / average
            self.losses[idx] = loss

    # -- testing -----------------------------------------------------------------------------
    def test_all(self):
        return [self.test(i) for i in range(len(self.test_nets))]

    def test(self, test_net_id=0):
        """Run test_iter forwards of a test net; log and return {output name: mean}."""
        p = self.param
        net = self.test_nets[test_net_id]
        logger.info('Iteration %d, Testing net (#%d)', self.iter, test_net_id)
        self._share_test_nets()
        totals, loss = None, 0.0
        iters = p.test_iter[test_net_id]
        for _ in range(iters):
            iter_loss = net.forward_from_to()
            if p.test_compute_loss:
                loss += iter_loss
            values = [net._blob_list[i].data.ravel().astype(np.float64).copy() for i in net.output_ids]
            totals = values if totals is None else [a + b for a, b in zip(totals, values)]
        if p.test_compute_loss:
            logger.info('Test loss: %g', loss / iters)
        means = [t / iters for t in totals] if totals else []
        return self._log_outputs(net, 'Test', means)

    def _log_outputs(self, net, kind, values):
        """Log '<kind> net output #i: name = v' lines; returns {name: value or array}."""
        result, index = {}, 0
        for j, bid in enumerate(net.output_ids):
            name = net._blob_names[bid]
            weight = net.blob_loss_weights[name]
            vec = values[j] if values is not None else net._blob_list[bid].data.ravel()
            for v in vec:
                extra = ' (* %g = %g loss)' % (weight, weight * v) if weight else ''
                logger.info('    %s net output #%d: %s = %g%s', kind, index, name, v, extra)
                index += 1
            result[name] = float(vec[0]) if len(vec) == 1 else np.array(vec)
        return result

    # -- snapshots ---------------------------------------------------------------------------
    def snapshot(self):
        if not self.root:
            raise SolverError('only the root solver writes snapshots: this one was made with solver_rank %d '
                              '(caffe.set_solver_rank)' % self.solver_rank)
        paths = write_snapshot(self)
        self.snapshot_paths.append(paths)
        return paths

    def restore(self, path):
        restore_state(self, path)
        self.sync_data_positions()

    def tests_done(self, iteration):
        """How many test phases an uninterrupted run has done before ``iteration``."""
        p = self.param
        if not p.test_interval:
            return 0
        done = (iteration - 1) // p.test_interval + 1 if iteration > 0 else 0
        if not p.test_initialization and iteration > 0:
            done -= 1
        return max(done, 0)

    def sync_data_positions(self):
        """Data cursors as a pure function of the iteration (after restore): the train net has
        served iter * iter_size batches, each test net test_iter batches per test done."""
        for layer in self.net.data_layers():
            layer.seek(layer.initial_position + self.iter * self.param.iter_size * layer.batch)
        for k, net in enumerate(self.test_nets):
            for layer in net.data_layers():
                layer.seek(layer.initial_position + self.tests_done(self.iter) * self.param.test_iter[k] * layer.batch)
