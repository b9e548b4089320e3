"""Fault injection for tests and demos: SIGKILL this process at a chosen point.

Configured by ``inject(specs)`` or the environment variable ``PYCAFFE_FT_INJECT_FAULT``
("RANK:ITER[:PHASE]", several separated by commas; RANK is the original MPI rank, 0 when
serial; PHASE one of forward, backward, bucket (a gradient bucket in flight during backward),
node (a bucket in flight to the node leader, two-level reduction), leader (a bucket in flight
among the node leaders: only a leader dies there), allreduce, snapshot, test, broadcast; default
forward). ``check(phase, iteration)`` is called at those points and kills the process (never
returns) when a spec matches. The kill is real (SIGKILL): this is what fault tolerance must
survive.
"""
import os
import signal
import time

__all__ = ['inject', 'check', 'PHASES', 'parse_spec', 'warn_unfired']

PHASES = ('forward', 'backward', 'bucket', 'node', 'leader', 'allreduce', 'snapshot', 'test', 'broadcast')
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
