"""Fault injection for tests and demos: SIGKILL this process at a chosen point.

Configured by ``inject(specs)`` or the environment variable ``PYCAFFE_FT_INJECT_FAULT``
("RANK:ITER[:PHASE]", several separated by commas; RANK is the original MPI rank, 0 when
serial; PHASE one of mpi-init (just before the rank's MPI starts, iteration 0: the other
ranks wait in MPI_Init and the --np launcher starts the job again), start (before the ranks'
first collective, iteration 0), forward, backward, bucket (a gradient bucket in flight:
--overlap on or two levels), allgather (the sum in worker order: segments exchanged, not yet gathered), node
(a bucket in flight to the node leader, two-level reduction), leader (a bucket in flight
among the node leaders: only a leader dies there), allreduce, agree (between a collective and
the Agree on its outcome), snapshot, test, broadcast, regrow (spawning replacements, or sending
them the state; replacements have the ranks after the job's, 4, 5, ... in a job of four);
default forward; ``PHASES`` is the one list). ``check(phase, iteration)`` is called at those points and kills the process (never
returns) when a spec matches. The kill is real (SIGKILL): this is what fault tolerance must
survive.
"""
import os
import signal
import time

__all__ = ['inject', 'check', 'PHASES', 'parse_spec', 'warn_unfired', 'impossible']

PHASES = ('mpi-init', 'start', 'forward', 'backward', 'bucket', 'allgather', 'node', 'leader', 'allreduce', 'agree',
          'snapshot', 'test', 'broadcast', 'regrow')
_specs = []
_rank = [0]


def parse_spec(text):
    parts = text.split(':')
    if len(parts) not in (2, 3):
        raise ValueError('fault spec must be RANK:ITER[:PHASE], got %r' % text)
    phase = parts[2] if len(parts) == 3 else 'forward'
    if phase not in PHASES:
        raise ValueError('unknown fault phase %r; known: %s' % (phase, ', '.join(PHASES)))
    if not (parts[0].isdigit() and parts[1].isdigit()):
        raise ValueError('fault spec must be RANK:ITER[:PHASE] with whole numbers RANK and ITER, got %r' % text)
    return int(parts[0]), int(parts[1]), phase


def inject(specs, rank=0):
    _specs[:] = [parse_spec(s) if isinstance(s, str) else tuple(s) for s in specs]
    _rank[0] = rank


def set_rank(rank):
    _rank[0] = rank


def _from_env():
    value = os.environ.get('PYCAFFE_FT_INJECT_FAULT')
    if value:
        inject([s for s in value.split(',') if s], _rank[0])


_from_env()


def check(phase, iteration):
    for rank, it, ph in _specs:
        if rank == _rank[0] and it == iteration and ph == phase:
            stamp = os.environ.get('PYCAFFE_FT_FAULT_STAMP')
            if stamp:  # benchmarks measure detect-to-resume from this moment
                with open(stamp, 'a') as f:
                    f.write('%d %d %s %.6f\n' % (rank, iteration, phase, time.time()))
            os.kill(os.getpid(), signal.SIGKILL)


def impossible(specs, ranks, param, parallel=True, two_level=False, regrow=False, bucketed=False):
    """Why each of ``specs`` can never fire in a run of ``ranks`` ranks with SolverParameter
    ``param`` (and replacements, with ``regrow``; gradients reduced in buckets, with
    ``bucketed``, else in worker order): a list of (spec text, reason) for the start-up
    warnings."""
    out = []
    for rank, iteration, phase in (parse_spec(s) if isinstance(s, str) else tuple(s) for s in specs):
        text = '%d:%d:%s' % (rank, iteration, phase)
        reason = None
        if rank >= ranks and not regrow:
            reason = 'there is no rank %d in a run of %d rank%s' % (rank, ranks, '' if ranks == 1 else 's')
        elif phase == 'regrow' and not regrow:
            reason = 'phase regrow happens only with --regrow'
        elif iteration >= param.max_iter and phase != 'snapshot' and not (phase == 'test' and iteration == param.max_iter):
            reason = 'training ends at iteration %d' % param.max_iter
        elif not parallel and phase in ('mpi-init', 'start', 'bucket', 'allgather', 'node', 'leader', 'allreduce', 'agree',
                                        'broadcast', 'test', 'forward', 'backward', 'regrow'):
            reason = 'phase %s is checked only in data-parallel runs' % phase
        elif phase == 'broadcast' and iteration != 0:
            reason = 'weights are broadcast only at iteration 0'
        elif phase in ('mpi-init', 'start') and iteration != 0:
            reason = 'the ranks start only at iteration 0'
        elif phase == 'mpi-init' and rank >= ranks:
            reason = 'replacements join a job whose MPI has started'
        elif phase in ('node', 'leader') and not (two_level and bucketed):
            reason = 'phase %s exists only in a two-level reduction (--ranks-per-node, or several nodes)' % phase
        elif phase == 'bucket' and not bucketed:
            reason = 'phase bucket exists only where gradients go in buckets (--overlap on, or two levels)'
        elif phase == 'allgather' and bucketed:
            reason = 'phase allgather exists only in the sum in worker order (the default; not with --overlap on ' \
                     'or two levels)'
        elif phase == 'test' and (not param.test_interval or iteration % param.test_interval or
                                  (iteration == 0 and not param.test_initialization) or not len(param.test_iter)):
            reason = 'no test pass runs at iteration %d (test_interval %d)' % (iteration, param.test_interval)
        elif phase == 'snapshot' and not (param.snapshot and iteration % param.snapshot == 0 and iteration > 0) and \
                not (iteration == param.max_iter and param.snapshot_after_train):
            reason = 'no snapshot is written at iteration %d (snapshot %d)' % (iteration, param.snapshot)
        if reason:
            out.append((text, reason))
    return out


def warn_unfired():
    """At the end of a run: this process's scheduled faults that never fired (a fired one
    killed it), each named with why it may not have (the phase does not happen at that
    iteration: no test or snapshot there, a broadcast only at iteration 0, ...)."""
    from .log import logger
    for rank, iteration, phase in _specs:
        if rank == _rank[0]:
            logger.warning('--inject-fault %d:%d:%s never fired: rank %d reached no %s phase at iteration %d '
                           '(training ended first, or that phase does not run at that iteration)',
                           rank, iteration, phase, rank, phase, iteration)
