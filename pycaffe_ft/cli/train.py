"""``pycaffe-ft train`` and ``pycaffe-ft test``: Caffe's train/test tools."""
import json
import os
import signal

from ..errors import SolverError
from ..log import logger
from . import progress

__all__ = ['train', 'test', 'install_signal_handlers']

_EFFECTS = {'stop': 'stop', 'snapshot': 'snapshot', 'none': 'none'}


def install_signal_handlers(solver, sigint_effect='stop', sighup_effect='snapshot', parallel=False):
    """SIGINT/SIGHUP ask the solver to stop or snapshot after the current iteration. In a
    parallel rank, SIGUSR1/SIGUSR2 (what the launcher relays for SIGINT/SIGHUP; ``kill -USR1``
    on an external mpiexec does the same) feed ``solver.local_request``, which the ranks agree
    on before acting."""
    pending = []

    def handler(effect):
        def on_signal(signum, frame):
            if effect != 'none':
                pending.append(effect)
        return on_signal
    signals = ((signal.SIGINT, sigint_effect), (signal.SIGHUP, sighup_effect))
    if parallel:
        signals += ((signal.SIGUSR1, sigint_effect), (signal.SIGUSR2, sighup_effect))
    for sig, effect in signals:
        if effect not in _EFFECTS:
            raise SolverError('signal effect must be stop, snapshot or none, got "%s"' % effect)
        signal.signal(sig, handler(effect))

    def request():
        return pending.pop(0) if pending else 'none'
    if parallel:
        solver.local_request = request
    else:
        solver.action_request = request


def train(solver_path, weights=None, snapshot=None, level=0, stages=(), sigint_effect='stop',
          sighup_effect='snapshot'):
    from ..solvers import Solver
    if weights and snapshot:
        raise SolverError('give a snapshot to resume training or weights to finetune, not both')
    from ..netspec_io import load_solver_param
    param = load_solver_param(solver_path)
    param.train_state.level = level
    param.train_state.stage.extend(stages)
    logger.info('Using CPU (pycaffe-ft runs on the CPU)')
    solver = Solver(param, weights=weights, source=solver_path)
    install_signal_handlers(solver, sigint_effect, sighup_effect)
    logger.info('Starting Optimization')
    if progress.wanted():
        with progress.ProgressLine() as line:
            progress.attach(solver, line.update)
            solver.solve(snapshot)
    else:
        solver.solve(snapshot)
    from .. import faults
    faults.warn_unfired()
    return solver


def warm_up(solver_path):
    """Compile (and cache) the Numba kernels in one process before starting ranks."""
    from ..netspec_io import load_solver_param
    from ..solvers import Solver
    param = load_solver_param(solver_path)
    param.ClearField('test_iter')
    param.ClearField('test_net')
    param.ClearField('test_net_param')
    param.test_interval = 0
    solver = Solver(param, source=solver_path)
    solver.net.forward_backward()
    for layer in solver.net.data_layers():
        layer.stop_prefetch()


def train_parallel(solver_path, parallel, ft=True, virtual_workers=None, min_ranks=1, ledger=None,
                   overlap=False, bucket_mb=None, hierarchy='auto', ranks_per_node=None, deterministic=False, weights=None,
                   snapshot=None, level=0, stages=(), sigint_effect='stop', sighup_effect='snapshot', regrow=False,
                   max_regrows=10):
    """Data-parallel training over MPI ranks (parallel=True) or V virtual workers in this
    process (parallel=False: no MPI is imported). A replacement that a re-grow spawned gets
    its state from the job, not from ``weights`` or ``snapshot``."""
    from .. import faults
    from ..netspec_io import load_solver_param
    from ..parallel.comm import make_comm
    from ..parallel.trainer import DataParallelSolver, ReplacementAbandoned
    if weights and snapshot:
        raise SolverError('give a snapshot to resume training or weights to finetune, not both')
    comm = make_comm(parallel, ft)
    joining = getattr(comm, 'joining', False)
    if joining:
        weights = snapshot = None
    else:
        faults.set_rank(comm.world_rank)
    param = load_solver_param(solver_path)
    param.train_state.level = level
    param.train_state.stage.extend(stages)
    try:
        solver = DataParallelSolver(param, comm, virtual_workers=virtual_workers, min_ranks=min_ranks, ledger=ledger,
                                    overlap=overlap, bucket_mb=bucket_mb, hierarchy=hierarchy,
                                    ranks_per_node=ranks_per_node, deterministic=deterministic, weights=weights,
                                    source=solver_path, regrow=regrow, max_regrows=max_regrows)
    except ReplacementAbandoned as e:
        logger.warning('%s', e)
        return None
    if joining:
        faults.set_rank(comm.world_rank)
        logger.warning('Replacement rank %d joined at iteration %d', comm.world_rank, solver.iter)
    logger.info('Data-parallel training: %d ranks, %d virtual workers (fault tolerance %s)',
                comm.size, solver.V, 'on' if parallel and ft else 'off')
    install_signal_handlers(solver, sigint_effect, sighup_effect, parallel=True)
    sink = progress.report_line()
    if sink is not None:
        progress.attach(solver, lambda report: solver.is_root and sink(report))
    logger.info('Starting Optimization')
    solver.solve(snapshot)
    solver.summary()
    status = os.environ.get('PYCAFFE_FT_STATUS_FILE')
    if status and solver.is_root:  # tells the --np launcher that the job ended on purpose
        from ..atomic import atomic_write_bytes
        atomic_write_bytes(status, json.dumps({'iter': solver.iter, 'stopped': bool(solver.requested_early_exit),
                                               'ranks': solver.comm.size}).encode())
    if solver.requested_early_exit and solver.snapshot_paths:
        logger.info('Stopped on request at iteration %d; resume with: pycaffe-ft train --solver %s --snapshot %s '
                    '--np %d', solver.iter, solver_path, solver.snapshot_paths[-1][-1], comm.size)
    return solver


def test(model, weights, iterations=50, level=0, stages=()):
    """Caffe's ``caffe test``: per-batch outputs, then per-output means."""
    from ..net import Net
    from ..proto import caffe_pb2
    net = Net(model, weights=weights, phase=caffe_pb2.TEST, level=level, stages=stages)
    logger.info('Running for %d iterations.', iterations)
    totals, loss = None, 0.0
    for i in range(iterations):
        loss += net.forward_from_to()
        values = []
        for bid in net.output_ids:
            name = net._blob_names[bid]
            for v in net._blob_list[bid].data.ravel():
                logger.info('Batch %d, %s = %g', i, name, v)
                values.append((name, float(v)))
        totals = values if totals is None else [(n, a + v) for (n, a), (_, v) in zip(totals, values)]
    logger.info('Loss: %g', loss / max(iterations, 1))
    means = {}
    for name, total in totals or []:
        mean = total / iterations
        weight = net.blob_loss_weights[name]
        extra = ' (* %g = %g loss)' % (weight, weight * mean) if weight else ''
        logger.info('%s = %g%s', name, mean, extra)
        means.setdefault(name, mean)
    return means
