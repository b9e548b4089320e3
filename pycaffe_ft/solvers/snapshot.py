"""Snapshots: ``<prefix>_iter_<N>.caffemodel`` + ``.solverstate`` (or HDF5), byte-compatible
with Caffe's, each written atomically (temp file, fsync, rename)."""
import os
import re

import numpy as np

from .. import faults
from ..errors import SolverError, WeightsError
from ..hdf5 import require_h5py
from ..log import logger
from ..proto import caffe_pb2
from ..proto.io import array_to_blob, blob_to_array, read_binary, write_binary

__all__ = ['write_snapshot', 'restore_state', 'snapshot_filename', 'newest_snapshot', 'state_virtual_workers']


def snapshot_filename(solver, extension):
    return '%s_iter_%d%s' % (solver.param.snapshot_prefix, solver.iter, extension)


def _history_blobs(solver):
    """Per learnable param, per history block: (block, array shaped like the param)."""
    net = solver.net
    arrays = []
    for block in solver.history:
        for i, blob in enumerate(net.learnable_params):
            lo, hi = net.param_offsets[i], net.param_offsets[i + 1]
            arrays.append(block[lo:hi].reshape(blob.shape))
    return arrays


def remove_stale_temp_files(prefix):
    """Delete the temp files a killed snapshot writer left for ``prefix`` (ours only: the
    hidden ``.<prefix>_iter_N.caffemodel.XXXX.tmp`` names of atomic writes and HDF5's
    ``<prefix>_iter_N.*.h5.tmp``). Only one process writes a prefix's snapshots at a time."""
    directory, base = os.path.split(prefix)
    pattern = re.compile(r'^(\.%s_iter_\d+\.(caffemodel|solverstate)(\.h5)?\.\w+\.tmp|'
                         r'%s_iter_\d+\.(caffemodel|solverstate)\.h5\.tmp)$' % (re.escape(base), re.escape(base)))
    try:
        names = os.listdir(directory or '.')
    except OSError:
        return []
    removed = []
    for name in names:
        if pattern.match(name):
            try:
                os.unlink(os.path.join(directory, name))
                removed.append(name)
                logger.info('Removed %s, left by a snapshot writer that was killed', os.path.join(directory, name))
            except OSError:
                pass
    return removed


def write_snapshot(solver):
    """Write model then solver state; returns (model path, state path)."""
    p = solver.param
    if not p.snapshot_prefix:
        raise SolverError('snapshot requested but the solver has no snapshot_prefix')
    directory = os.path.dirname(p.snapshot_prefix)
    if directory and not os.path.isdir(directory):
        raise SolverError('snapshot directory "%s" does not exist' % directory)
    remove_stale_temp_files(p.snapshot_prefix)
    hdf5 = p.snapshot_format == caffe_pb2.SolverParameter.HDF5
    try:
        if hdf5:
            model = snapshot_filename(solver, '.caffemodel.h5')
            logger.info('Snapshotting to HDF5 file %s', model)
            solver.net.save_hdf5(model)
            state_path = snapshot_filename(solver, '.solverstate.h5')
            logger.info('Snapshotting solver state to HDF5 file %s', state_path)
            _write_state_hdf5(solver, model, state_path)
        else:
            model = snapshot_filename(solver, '.caffemodel')
            logger.info('Snapshotting to binary proto file %s', model)
            write_binary(model, solver.net.to_proto(write_diff=p.snapshot_diff),
                         midway=lambda: faults.check('snapshot', solver.iter))
            state = caffe_pb2.SolverState(iter=solver.iter, learned_net=model,
                                          current_step=solver.current_step)
            if getattr(solver, 'V', None):  # a data-parallel run: a resume keeps its global batch
                state.virtual_workers = solver.V
            for array in _history_blobs(solver):
                array_to_blob(array, state.history.add())
            state_path = snapshot_filename(solver, '.solverstate')
            logger.info('Snapshotting solver state to binary proto file %s', state_path)
            write_binary(state_path, state)
    except OSError as e:
        raise SolverError('snapshot at iteration %d failed (%s); earlier snapshots are intact'
                          % (solver.iter, e)) from None
    return model, state_path


def _write_state_hdf5(solver, model, path):
    h5py = require_h5py('an HDF5 snapshot')
    tmp = path + '.tmp'
    with h5py.File(tmp, 'w') as f:
        # Caffe's layout: iter and current_step as (1,) int32, learned_net a fixed-length string
        f.create_dataset('iter', data=np.array([solver.iter], np.int32))
        f.create_dataset('learned_net', data=np.bytes_(model.encode()))
        f.create_dataset('current_step', data=np.array([solver.current_step], np.int32))
        g = f.create_group('history')
        for i, array in enumerate(_history_blobs(solver)):
            g.create_dataset(str(i), data=array)
    os.replace(tmp, path)


def _resolve(path, relative_to):
    if os.path.isabs(path) or os.path.exists(path):
        return path
    candidate = os.path.join(os.path.dirname(os.path.abspath(relative_to)), os.path.basename(path))
    return candidate if os.path.exists(candidate) else path


def restore_state(solver, path):
    """Load a .solverstate (binary or .h5): iter, current_step, weights, history."""
    if not os.path.exists(path):
        raise SolverError('solver state "%s" not found' % path)
    if path.endswith('.h5'):
        h5py = require_h5py('restoring %s' % path)
        with h5py.File(path, 'r') as f:
            iteration = int(np.asarray(f['iter']).ravel()[0])
            current_step = int(np.asarray(f['current_step']).ravel()[0])
            learned = np.asarray(f['learned_net']).item() if 'learned_net' in f else b''
            learned = learned.decode() if isinstance(learned, bytes) else str(learned)
            history = [np.asarray(f['history'][str(i)]) for i in range(len(f['history']))]
    else:
        try:
            state = read_binary(path, caffe_pb2.SolverState())
        except WeightsError as e:
            raise SolverError(str(e)) from None
        iteration, current_step, learned = state.iter, state.current_step, state.learned_net
        history = [blob_to_array(b) for b in state.history]
    if isinstance(learned, bytes):  # protobuf hands back a string field that is not UTF-8 as bytes
        raise SolverError('%s: its learned_net %r is not a UTF-8 file name: a damaged solver state?' % (path, learned))
    if not learned:  # Caffe would keep fresh weights: take them from where Caffe writes them
        sibling = _sibling_model(path)
        if sibling == path or not os.path.exists(sibling):
            raise SolverError('%s names no weights file (learned_net is empty) and %s does not exist: '
                              'resuming would silently start from fresh weights' % (path, sibling))
        logger.warning('%s names no weights file (learned_net is empty); using %s beside it', path, sibling)
        learned = sibling
    try:
        solver.net.copy_from(_resolve(learned, path))
    except WeightsError as e:
        raise SolverError('%s: its weights (learned_net "%s") cannot be used: %s' % (path, learned, e)) from None
    expected = len(solver.history) * len(solver.net.learnable_params)
    if len(history) != expected:
        raise SolverError('%s: %d history blobs, this solver (%s) needs %d'
                          % (path, len(history), solver.param.type, expected))
    for k, array in enumerate(_history_blobs(solver)):
        if history[k].size != array.size:
            raise SolverError('%s: history blob %d has %d values, expected %d (shape %s)'
                              % (path, k, history[k].size, array.size, list(array.shape)))
        array[...] = history[k].reshape(array.shape)
    solver.iter, solver.current_step = iteration, current_step
    logger.info('SGDSolver: restoring history')


def _sibling_model(state_path):
    """``<stem>.caffemodel[.h5]`` beside ``<stem>.solverstate[.h5]``: where Caffe writes the
    weights of a snapshot."""
    return re.sub(r'\.solverstate(\.h5)?$', r'.caffemodel\1', state_path)


def _complete(state_path):
    """True when the state parses and the weights it names exist (an interrupted writer leaves
    only hidden temp files, but a copy or a full disk may leave less)."""
    if state_path.endswith('.h5'):
        return os.path.exists(_sibling_model(state_path))
    try:
        state = read_binary(state_path, caffe_pb2.SolverState())
    except WeightsError:
        return False
    learned = state.learned_net
    if isinstance(learned, bytes) or not learned:
        return False
    try:
        read_binary(_resolve(learned, state_path), caffe_pb2.NetParameter())
    except WeightsError:
        return False
    return True


def newest_snapshot(prefix):
    """The newest complete ``<prefix>_iter_N.solverstate`` (or ``.solverstate.h5``), or None:
    what ``--resume auto`` continues from. Incomplete ones are skipped with a warning."""
    directory, base = os.path.split(prefix)
    pattern = re.compile(r'^%s_iter_(\d+)\.solverstate(\.h5)?$' % re.escape(base))
    try:
        names = os.listdir(directory or '.')
    except OSError:
        return None
    found = sorted(((int(m.group(1)), name) for name in names for m in [pattern.match(name)] if m), reverse=True)
    for _, name in found:
        path = os.path.join(directory, name)
        if _complete(path):
            return path
        logger.warning('%s is incomplete or damaged (its weights are missing or unreadable): skipped', path)
    return None


def state_virtual_workers(path):
    """The virtual workers of the data-parallel run that wrote the state at ``path`` (0 if it
    does not say: a serial run's, Caffe's, or an HDF5 state)."""
    if path.endswith('.h5'):
        return 0
    try:
        return read_binary(path, caffe_pb2.SolverState()).virtual_workers
    except WeightsError as e:
        raise SolverError(str(e)) from None
