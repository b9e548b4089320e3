"""Entry point of a replacement process that a re-grow spawned (``python .../join.py ARGV``,
ARGV being the training ranks' own command line; run as a script, so that nothing of the
package is imported before MPI).

MPI starts first and the replacement merges with the job at once, so that the ranks that
spawned it wait only for Python's and MPI's start-up; it then imports the package and builds
its solver like any rank while they train on, and joins them when it is ready (see
``DataParallelSolver``). If the job gives it up before then (a failure during the re-grow), it
ends.
"""
import sys

MERGE_DEADLINE_S = 120.0
"""The members merge right after the spawn; a replacement still waiting this long ends."""


def main(argv):
    import signal
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)  # a stop request relayed to every process: the
    from mpi4py import MPI  # members agree on it (a replacement learns of it once it has joined)
    parent = MPI.Comm.Get_parent()
    if parent == MPI.COMM_NULL:
        print('pycaffe-ft: pycaffe_ft.parallel.join is started by a re-grow (MPI_Comm_spawn), not by hand',
              file=sys.stderr)
        return 2
    parent.Set_errhandler(MPI.ERRORS_RETURN)
    import os
    import threading
    watchdog = threading.Timer(MERGE_DEADLINE_S, os.kill, (os.getpid(), signal.SIGKILL))
    watchdog.daemon = True  # the job gave this process up without a word: a killed process is a
    watchdog.start()  # failure the job survives
    try:
        merged = parent.Merge(True)
        merged.Set_errhandler(MPI.ERRORS_RETURN)
    except MPI.Exception:  # the re-grow was abandoned before the merge: end as a failed process
        os.kill(os.getpid(), signal.SIGKILL)  # (MPI_Finalize with the revoked parent could hang)
    finally:
        watchdog.cancel()
    from pycaffe_ft.parallel import comm
    comm.JOINING.update(merged=merged, parent=parent)
    from pycaffe_ft.cli import main as cli_main
    return cli_main(argv)


if __name__ == '__main__':
    del sys.path[0]  # this file's directory: its modules are the package's, not top-level ones
    sys.exit(main(sys.argv[1:]))
