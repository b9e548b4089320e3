"""The pycaffe-ft command line: help, info, time, gflags spellings, clear errors."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft import cli

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_gflags_spellings_are_normalized():
    assert cli.normalize_gflags(['-model', 'm', '-iterations=3', '--phase=TEST', '-x']) == \
        ['--model', 'm', '--iterations=3', '--phase=TEST', '-x']


def test_help_lists_commands(capsys):
    try:
        cli.main(['--help'])
    except SystemExit as e:
        assert e.code == 0
    out = capsys.readouterr().out
    for name in ('info', 'time', 'upgrade-net', 'upgrade-solver'):
        assert name in out


def test_info_reports_versions_and_mpi(capsys):
    assert cli.main(['info']) == 0
    out = capsys.readouterr().out
    assert 'numpy' in out and 'numba' in out and 'ULFM' in out and 'BLAS' in out


def test_info_says_how_many_threads_run_and_why(capsys):
    assert cli.main(['info']) == 0
    assert re.search(r'threads +[0-9]+ threads? \((automatic|from )', capsys.readouterr().out)


def test_time_prints_caffe_style_report_with_synthetic_data(capsys, tmp_path, monkeypatch):
    from pycaffe_ft import intra_op
    monkeypatch.chdir(tmp_path)  # the model's relative LMDB paths do not exist here
    model = os.path.join(ROOT, 'models', 'lenet', 'lenet_train_test.prototxt')
    before = intra_op.num_threads(), intra_op._state['source']
    try:
        assert cli.main(['time', '-model', model, '-iterations', '2', '--threads', '1']) == 0
    finally:
        intra_op.set_num_threads(before[0])
        intra_op._state['source'] = before[1]
    out = capsys.readouterr().out
    assert 'Throughput per layer, median of 2 passes (1 thread(s)' in out
    assert 'synthetic' in out and '*** Benchmark begins ***' in out
    assert 'conv1\tforward:' in out and 'conv1\tbackward:' in out
    assert 'Average Forward-Backward:' in out and 'Total Time:' in out
    # throughput: GFLOP/s beside a GEMM's for the GEMM layers, GB/s beside a copy's for pooling,
    # both measured before every pass
    assert re.search(r'measured before each pass: GEMM peak [0-9.]+ GFLOP/s .*; a 64 MB copy [0-9.]+ GB/s', out)
    # the algorithm of each pass: conv1 (1 x 5 x 5 inputs per output) runs both directly; conv2
    # (20 input channels) its forward (LeNet's max pools rule Winograd out), and keeps im2col
    # backward (50 outputs: Winograd's 5x5 products would run in BLAS)
    for name, backward in (('conv1', 'direct'), ('conv2', 'im2col')):
        assert re.search(r'%s\tforward [0-9.]+ GFLOP/s \([0-9]+%% of peak, direct\), backward [0-9.]+ GFLOP/s '
                         r'\([0-9]+%% of peak, %s\)' % (name, backward), out)
    for name in ('ip1', 'ip2'):
        assert re.search(r'%s\tforward [0-9.]+ GFLOP/s \([0-9]+%% of peak\), backward [0-9.]+ GFLOP/s' % name, out)
    # and beside a stream of the same bytes run in the layer's place, in more passes
    assert re.search(r'pooling also beside a stream of its bytes run in its place, 2 more passes', out)
    assert re.search(r'pool1\tforward [0-9.]+ GB/s \([0-9]+% of the copy, [0-9]+% of its bytes streamed in its '
                     r'place\), backward [0-9.]+ GB/s \([0-9]+% of the copy, [0-9]+% of its bytes streamed in its '
                     r'place\)', out)


def test_layer_work_counts_two_flops_per_multiply_add():
    """Oracle: a GEMM layer does top.count multiply-adds per weight of one output."""
    from pycaffe_ft.bench import layer_work
    net = caffe.Net('''layer { name: "data" type: "Input" top: "data" top: "label"
          input_param { shape { dim: 4 dim: 3 dim: 12 dim: 12 } shape { dim: 4 } } }
        layer { name: "conv1" type: "Convolution" bottom: "data" top: "conv1"
          convolution_param { num_output: 6 kernel_size: 3 stride: 2 pad: 1 } }
        layer { name: "conv2" type: "Convolution" bottom: "conv1" top: "conv2"
          convolution_param { num_output: 4 kernel_size: 3 group: 2 } }
        layer { name: "ip1" type: "InnerProduct" bottom: "conv2" top: "ip1" inner_product_param { num_output: 5 } }
        layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip1" bottom: "label" top: "loss" }''', caffe.TRAIN)
    for name in ('conv1', 'conv2', 'ip1'):
        i = list(net._layer_names).index(name)
        layer, top = net.layers[i], net.top_vecs[i][0]
        per_output = layer.blobs[0].count // layer.num_output
        unit, forward, backward = layer_work(net, i)
        assert unit == 'GFLOP/s' and forward == pytest.approx(2 * top.count * per_output / 1e9)
        # conv1's bottom is the data (no gradient): weights only; the others: weights and bottom
        assert backward == pytest.approx(forward * (1 if name == 'conv1' else 2))


def test_pooling_stand_ins_write_the_arrays_the_layer_writes():
    """`time`'s stand-in of a MAX pool moves its bytes: forward writes the top and the mask,
    backward the bottom diff."""
    from pycaffe_ft.bench import pooling_stand_ins
    net = caffe.Net('''layer { name: "data" type: "Input" top: "data"
          input_param { shape { dim: 3 dim: 2 dim: 9 dim: 9 } } }
        layer { name: "pool" type: "Pooling" bottom: "data" top: "pool"
          pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
        layer { name: "loss" type: "EuclideanLoss" bottom: "pool" bottom: "pool" top: "loss" }''', caffe.TRAIN)
    i = list(net._layer_names).index('pool')
    layer, bottom, top = net.layers[i], net.bottom_vecs[i], net.top_vecs[i]
    bottom[0].data[...] = np.random.default_rng(1).uniform(1, 2, bottom[0].shape)
    for array in (top[0].data, layer._mask, bottom[0].diff):
        array[...] = np.nan
    forward, backward = pooling_stand_ins(net, i)
    forward()
    assert not np.isnan(top[0].data).any() and not np.isnan(layer._mask).any()
    assert np.isnan(bottom[0].diff).all()
    top[0].diff[...] = 1.0
    backward()
    assert not np.isnan(bottom[0].diff).any()


def test_errors_are_messages_not_tracebacks(tmp_path):
    bad = tmp_path / 'bad.prototxt'
    bad.write_text('layer { name: "x" type: "Input" top: "x" input_param { shape { dim: 1 } } }\n'
                   'layer { name: "p" type: "Pooling" bottom: "x" top: "p" pooling_param { ceil_mode: true } }\n')
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'time', '--model', str(bad)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 1
    assert 'Traceback' not in proc.stderr
    assert 'bad.prototxt:2' in proc.stderr and 'ceil_mode' in proc.stderr


@pytest.mark.parametrize('flags, message', [
    (['--np', '0'], '--np: expected a whole number >= 1'),
    (['--np', '-3'], '--np: expected a whole number >= 1'),
    (['--virtual-workers', '0'], '--virtual-workers'),
    (['--inject-fault', 'banana'], 'RANK:ITER[:PHASE]'),
    (['--inject-fault', '1:x'], 'whole numbers'),
    (['--inject-fault', '1:50:sideways'], "unknown fault phase 'sideways'"),
    (['--bucket-mb', 'nan'], "expected a positive number, got 'nan'"),
    (['--threads', '0'], "--threads: expected a whole number >= 1, got '0'"),
])
def test_bad_train_values_are_one_line_errors(flags, message, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(['train', '--solver', 'solver.prototxt'] + flags)
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert message in err and 'Traceback' not in err


def test_train_requires_a_solver(capsys):
    with pytest.raises(SystemExit):
        cli.main(['train'])
    assert 'the following arguments are required: --solver' in capsys.readouterr().err


@pytest.mark.parametrize('caffe_name, ours', [('convert_imageset', 'convert-imageset'),
                                              ('compute_image_mean', 'compute-image-mean'),
                                              ('upgrade_net_proto_text', 'upgrade-net'),
                                              ('upgrade_solver_proto_text', 'upgrade-solver'),
                                              ('extract_features', 'extract-features')])
def test_caffes_tool_names_work_and_every_command_describes_itself(caffe_name, ours, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([caffe_name, '--help'])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith('usage: pycaffe-ft %s' % ours)
    description = out.split('\n\n')[1].strip()
    assert description and description[0].isupper() and description.endswith('.')


def test_device_query_describes_the_cpu(capsys):
    assert cli.main(['device_query']) == 0
    out = capsys.readouterr().out
    assert 'Device: CPU' in out and 'Cores:' in out


def test_a_scheduled_fault_that_never_fires_is_reported(tmp_path):
    (tmp_path / 'net.prototxt').write_text(
        'layer { name: "x" type: "DummyData" top: "x" top: "y" dummy_data_param { shape { dim: 2 dim: 3 } '
        'shape { dim: 2 } data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { num_output: 2 } }\n'
        'layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }\n')
    (tmp_path / 'solver.prototxt').write_text('net: "net.prototxt" base_lr: 0.01 lr_policy: "fixed" max_iter: 3 '
                                              'snapshot_after_train: false')
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt',
                           '--inject-fault', '0:2:snapshot', '--inject-fault', '0:40'], cwd=str(tmp_path),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert '--inject-fault 0:2:snapshot never fired' in proc.stderr
    assert '--inject-fault 0:40:forward never fired' in proc.stderr


def test_fault_entries_that_can_never_fire_are_warned_about_at_start():
    from pycaffe_ft import faults
    from pycaffe_ft.proto import caffe_pb2
    param = caffe_pb2.SolverParameter(max_iter=40, snapshot=10, test_interval=20, test_iter=[2])
    reasons = dict(faults.impossible(['5:3', '1:7:test', '1:20:test', '0:13:snapshot', '0:40:snapshot', '2:50',
                                      '1:3:broadcast', '1:0:broadcast', '1:3:node', '1:3:bucket', '1:3:allgather'],
                                     4, param))
    assert reasons == {
        '5:3:forward': 'there is no rank 5 in a run of 4 ranks',
        '1:7:test': 'no test pass runs at iteration 7 (test_interval 20)',
        '0:13:snapshot': 'no snapshot is written at iteration 13 (snapshot 10)',
        '2:50:forward': 'training ends at iteration 40',
        '1:3:broadcast': 'weights are broadcast only at iteration 0',
        '1:3:node': 'phase node exists only in a two-level reduction (--ranks-per-node, or several nodes)',
        '1:3:bucket': 'phase bucket exists only where gradients go in buckets (--overlap on, or two levels)'}
    bucketed = dict(faults.impossible(['1:3:bucket', '1:3:allgather', '1:3:node'], 4, param, two_level=True,
                                      bucketed=True))
    assert bucketed == {'1:3:allgather': 'phase allgather exists only in the sum in worker order (the default; '
                                         'not with --overlap on or two levels)'}
    serial = dict(faults.impossible(['0:3:forward', '0:10:snapshot'], 1, param, parallel=False))
    assert serial == {'0:3:forward': 'phase forward is checked only in data-parallel runs'}
    # --regrow: replacements take the ranks after the job's, and phase regrow exists
    assert dict(faults.impossible(['5:3', '1:6:regrow'], 4, param, regrow=True)) == {}
    assert dict(faults.impossible(['1:6:regrow'], 4, param)) == {'1:6:regrow': 'phase regrow happens only with --regrow'}
    assert dict(faults.impossible(['1:0:mpi-init', '1:2:mpi-init', '5:0:mpi-init'], 4, param, regrow=True)) == {
        '1:2:mpi-init': 'the ranks start only at iteration 0',
        '5:0:mpi-init': 'replacements join a job whose MPI has started'}


@pytest.mark.parametrize('flags', [['--regrow'], ['--regrow', '--np', '2', '--ft', 'off']])
def test_regrow_needs_a_fault_tolerant_job_of_several_ranks(tmp_path, flags):
    (tmp_path / 'solver.prototxt').write_text('net: "none.prototxt"\nmax_iter: 1\n')
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'train', '--solver', 'solver.prototxt'] + flags,
                          cwd=str(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and '--regrow replaces failed ranks of a fault-tolerant job' in proc.stderr


def test_the_np_launcher_starts_mpiexec_again_when_no_rank_s_mpi_started(tmp_path, monkeypatch):
    """mpiexec once exited before starting any rank ("The PMIx server's listener thread failed
    to start"), and once every rank ended inside MPI_Init_thread (one crashed in Open MPI's
    start-up and took the others down); a rank lost before its MPI started leaves the others
    waiting in MPI_Init, and the launcher's watch ends the job. Nothing was trained: the
    launcher tells these from a job whose ranks' MPI started (the ranks' marks,
    pycaffe_ft.parallel.startup) and starts it again, at most MPIEXEC_START_RETRIES times,
    without spending a --max-restarts and without the mpi-init faults (they fired)."""
    from pycaffe_ft.cli import train as train_module
    from pycaffe_ft.parallel import launcher, startup
    (tmp_path / 'solver.prototxt').write_text('net: "net.prototxt"\nmax_iter: 1\n')
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(train_module, 'warm_up', lambda solver: None)
    monkeypatch.setattr(startup, 'START_GRACE_S', 0.0)
    for var in ('PYCAFFE_FT_STATUS_FILE', 'OMPI_MCA_mpi_ft_detector', 'OMPI_MCA_mpi_ft_detector_thread',
                'OMPI_MCA_mpi_ft_detector_timeout', 'OMPI_MCA_mpi_ft_detector_period', 'OMPI_COMM_WORLD_RANK'):
        monkeypatch.setenv(var, '')  # _launch_ranks sets them for its ranks: restored afterwards
    monkeypatch.setattr(cli.time, 'sleep', lambda seconds: None)
    outcomes, calls = [], []
    gone = subprocess.Popen([sys.executable, '-c', 'pass'])
    gone.wait()

    def fake_launch(n, run, **options):
        """What happened to each mpiexec: None = no rank started, 'no-mpi' = every rank ended in
        MPI_Init, 'lost' = rank 1 was lost before its MPI started (the others wait), 'error' =
        the ranks ended with an error of their own before MPI, 'died' = the ranks ran and died,
        'finished' = the job ended."""
        calls.append(run)
        status = os.environ['PYCAFFE_FT_STATUS_FILE']
        outcome = outcomes.pop(0)
        for rank in range(n) if outcome is not None else ():
            monkeypatch.setenv('OMPI_COMM_WORLD_RANK', str(rank))
            with monkeypatch.context() as m:
                m.setattr(os, 'getpid', lambda: gone.pid if outcome == 'lost' and rank == 1 else os.getppid())
                startup.mark_rank_started()
            if outcome in ('died', 'finished'):
                open('%s.up%d' % (status, rank), 'w').close()
            if outcome == 'error':
                startup.mark_rank_error()
        if outcome == 'lost':
            assert options['abandon']()  # the launcher's poll: launch() kills the job then
            return -9
        if outcome == 'finished':
            open(status, 'w').close()
        return {'died': 1, 'error': 1, None: 1}.get(outcome, 0)
    monkeypatch.setattr(launcher, 'launch', fake_launch)
    args = cli.build_parser().parse_args(['train', '--solver', 'solver.prototxt', '--np', '2'])
    monkeypatch.setattr(sys, 'argv', ['pycaffe-ft', 'train', '--solver', 'solver.prototxt', '--np', '2',
                                      '--inject-fault', '1:0:mpi-init', '--inject-fault=1:5'])
    for first in (None, 'no-mpi', 'lost'):
        outcomes[:] = [first, 'finished']
        calls.clear()
        assert cli._launch_ranks(args, None) == 0 and len(calls) == 2
        assert '1:0:mpi-init' in calls[0] and '1:0:mpi-init' not in calls[1] and '--inject-fault=1:5' in calls[1]
    outcomes[:] = [None, 'lost', 'no-mpi']  # retries exhausted: the error stands
    calls.clear()
    assert cli._launch_ranks(args, None) == 1 and len(calls) == 3
    for outcome in ('died', 'error'):  # ranks ran and died, or ended with their own error: no retry
        outcomes[:] = [outcome]
        calls.clear()
        assert cli._launch_ranks(args, None) == 1 and len(calls) == 1
    assert not list(tmp_path.glob('.pycaffe-ft-job-*'))
