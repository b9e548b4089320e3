"""``pycaffe-ft``: Caffe's command-line tools with Caffe's flag names.

Flags may be written the gflags way too (``-solver S``, ``--solver=S``, ``-solver=S``).
This is the only module that turns errors into messages and exit codes.
"""
import argparse
import os
import sys
import time

__all__ = ['main']

COMMANDS = {}


def command(name, help_text):
    def decorate(fn):
        COMMANDS[name] = (fn, help_text)
        return fn
    return decorate


def normalize_gflags(argv):
    """``-flag`` (a single dash and a multi-letter name) -> ``--flag``; ``-flag=v`` too."""
    out = []
    for arg in argv:
        if arg.startswith('-') and not arg.startswith('--') and len(arg) > 2 and arg[1].isalpha():
            arg = '-' + arg
        out.append(arg)
    return out


def _parse_shapes(values):
    shapes = {}
    for item in values or []:
        name, _, dims = item.partition('=')
        try:
            shapes[name] = tuple(int(d) for d in dims.split(','))
        except ValueError:
            raise SystemExit('--input-shape wants NAME=N,C,H,W, got %r' % item) from None
    return shapes


def _bool_flag(value):
    if isinstance(value, bool):
        return value
    if value.lower() in ('true', '1', 'yes'):
        return True
    if value.lower() in ('false', '0', 'no'):
        return False
    raise argparse.ArgumentTypeError('expected true or false, got %r' % value)


def _phase(name):
    from ..proto import caffe_pb2
    return caffe_pb2.TRAIN if name.upper() == 'TRAIN' else caffe_pb2.TEST


def _stages(value):
    return [s for s in (value or '').split(',') if s]


# -- info ---------------------------------------------------------------------------------
@command('info', 'versions, BLAS, threads, MPI and ULFM availability')
def cmd_info(args):
    import platform

    import numba
    import numpy as np
    from google.protobuf import __version__ as pb_version

    from .. import __version__
    print('pycaffe-ft %s' % __version__)
    print('python     %s' % platform.python_version())
    print('numpy      %s' % np.__version__)
    print('numba      %s' % numba.__version__)
    print('protobuf   %s' % pb_version)
    try:
        import lmdb
        print('lmdb       %s' % lmdb.__version__)
    except ImportError:
        print('lmdb       not installed')
    try:
        blas = np.__config__.CONFIG['Build Dependencies']['blas']
        print('BLAS       %s %s' % (blas.get('name'), blas.get('version')))
    except (AttributeError, KeyError, TypeError):
        print('BLAS       unknown')
    from ..intra_op import thread_policy
    print('cores      %s' % os.cpu_count())
    print('threads    %s' % thread_policy())
    for var in ('PYCAFFE_FT_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS', 'MKL_NUM_THREADS',
                'NUMBA_NUM_THREADS'):
        print('%s=%s' % (var, os.environ.get(var, '(unset)')))
    from ..parallel.mpi_env import describe_mpi
    for line in describe_mpi():
        print(line)
    return 0


@command('device-query', "caffe device_query: the device training runs on (the CPU: no GPU mode here)")
def cmd_device_query(args):
    from ..intra_op import blas_library, num_threads
    model = 'unknown'
    try:
        with open('/proc/cpuinfo') as f:
            model = next(line.split(':', 1)[1].strip() for line in f if line.startswith('model name'))
    except (OSError, StopIteration):
        pass
    blas = blas_library()
    print('Device: CPU (pycaffe-ft has no GPU mode; --gpu is accepted and ignored)')
    print('Model:           %s' % model)
    print('Cores:           %s' % os.cpu_count())
    print('Threads per run: %d' % num_threads())
    print('BLAS:            %s' % ('OpenBLAS, %s kernels' % blas.corename() if blas else 'not OpenBLAS'))
    return 0


# -- time ----------------------------------------------------------------------------------
@command('time', 'benchmark forward/backward of a net, per layer (like caffe time)')
def cmd_time(args):
    from ..bench import time_net
    time_net(args.model, iterations=args.iterations, phase=_phase(args.phase), level=args.level,
             stages=_stages(args.stage), overrides=_parse_shapes(args.input_shape),
             weights=args.weights)
    return 0


def _fault_spec(text):
    """RANK:ITER[:PHASE], checked now (faults.parse_spec) so that a typo is a one-line error."""
    from .. import faults
    try:
        faults.parse_spec(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _positive_int(text):
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError('expected a whole number >= 1, got %r' % text)
    return value


def _non_negative_float(text):
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not (value >= 0 and value != float('inf')):
        raise argparse.ArgumentTypeError('expected a number of seconds >= 0, got %r' % text)
    return value


def _non_negative_int(text):
    if not text.isdigit():
        raise argparse.ArgumentTypeError('expected a whole number >= 0, got %r' % text)
    return int(text)


def _threads_flag(parser, scope=''):
    parser.add_argument('--threads', type=_positive_int, default=None,
                        help='threads%s; default: automatic (the free cores, rechecked while training); '
                             'PYCAFFE_FT_NUM_THREADS, OMP_NUM_THREADS, ... also fix it' % scope)


def _positive_float(text):
    try:
        value = float(text)
    except ValueError:
        value = float('nan')
    if not value > 0 or value == float('inf'):
        raise argparse.ArgumentTypeError('expected a positive number, got %r' % text)
    return value


# -- train / test --------------------------------------------------------------------------
@command('train', 'train a net (like caffe train); --np N for fault-tolerant data parallelism')
def cmd_train(args):
    from ..errors import CaffeError
    from ..parallel.launcher import in_mpi_job
    from .train import train, train_parallel
    parallel = args.mpi_worker or in_mpi_job()
    if args.inject_fault:
        from .. import faults
        faults.inject(args.inject_fault)
        if not parallel:  # said once, by the launcher or the serial run
            _warn_impossible_faults(args)
    if (args.hostfile or args.host or args.net_if) and (args.np == 1 or parallel):
        raise CaffeError('--hostfile, --host and --net-if place the ranks that --np N (N > 1) starts')
    if args.resume and args.snapshot:
        raise CaffeError('give --snapshot FILE or --resume auto, not both')
    if args.max_restarts and (args.np == 1 or parallel):
        raise CaffeError('--max-restarts restarts the ranks that --np N (N > 1) starts')
    if args.regrow and (args.ft == 'off' or (args.np == 1 and not parallel)):
        raise CaffeError('--regrow replaces failed ranks of a fault-tolerant job: it needs --np N (N > 1) or '
                         'mpiexec, and --ft on')
    snapshot = args.snapshot or (_newest_snapshot(args.solver) if args.resume else None)
    if args.np > 1 and not parallel:
        return _launch_ranks(args, snapshot)
    virtual_workers = _virtual_workers(args, snapshot)
    common = dict(weights=args.weights, snapshot=snapshot, level=args.level, stages=_stages(args.stage),
                  sigint_effect=args.sigint_effect, sighup_effect=args.sighup_effect)
    if parallel or (virtual_workers or 1) > 1:
        train_parallel(args.solver, parallel=parallel, ft=args.ft != 'off', virtual_workers=virtual_workers,
                       min_ranks=args.min_ranks, ledger=args.ledger, overlap=args.overlap == 'on',
                       bucket_mb=args.bucket_mb, hierarchy=args.hierarchy, ranks_per_node=args.ranks_per_node,
                       deterministic=args.deterministic, regrow=args.regrow, max_regrows=args.max_regrows, **common)
        return 0  # an MPI rank then ends in main() without MPI_Finalize
    train(args.solver, **common)
    return 0


def _warn_impossible_faults(args):
    from .. import faults
    from ..log import logger
    from ..netspec_io import load_solver_param
    param = load_solver_param(args.solver)
    ranks = args.np
    data_parallel = ranks > 1 or (args.virtual_workers or 1) > 1
    two_level = bool(args.ranks_per_node) and args.hierarchy == 'auto' or bool(args.hostfile or args.host)
    bucketed = not args.deterministic and (args.overlap == 'on' or two_level)
    for spec, reason in faults.impossible(args.inject_fault, ranks, param, data_parallel, two_level, args.regrow,
                                          bucketed):
        logger.warning('--inject-fault %s can never fire: %s', spec, reason)


def _newest_snapshot(solver_path):
    """--resume auto: the newest complete snapshot of the solver's prefix, or None (fresh start)."""
    from ..log import logger
    from ..netspec_io import load_solver_param
    from ..solvers.snapshot import newest_snapshot
    prefix = load_solver_param(solver_path).snapshot_prefix
    path = newest_snapshot(prefix) if prefix else None
    if path is None:
        logger.info('--resume auto: no complete snapshot with prefix "%s" yet: starting from the beginning', prefix)
    else:
        logger.info('--resume auto: continuing from %s', path)
    return path


def _virtual_workers(args, snapshot):
    """--virtual-workers, else the V of the data-parallel run that wrote the snapshot (so that
    a resume with another --np keeps the global batch and the data order)."""
    from ..errors import CaffeError
    from ..solvers.snapshot import state_virtual_workers
    saved = state_virtual_workers(snapshot) if snapshot else 0
    if saved and args.virtual_workers and args.virtual_workers != saved:
        raise CaffeError('%s was written by a run with %d virtual workers; --virtual-workers %d would change the '
                         'global batch and the data order (leave it out to keep %d)'
                         % (snapshot, saved, args.virtual_workers, saved))
    return args.virtual_workers or saved or None


MPIEXEC_START_RETRIES = 2
"""How many times the --np launcher starts mpiexec again when it ends, or is ended, before any
rank's MPI started (nothing trained: see :mod:`pycaffe_ft.parallel.startup`)."""


def _launch_ranks(args, snapshot):
    """The --np launcher: start the ranks from ``snapshot`` (or the beginning), restarting the
    whole job from its newest snapshot up to --max-restarts times if it dies as a whole."""
    from ..log import logger
    from ..parallel.launcher import Placement, launch
    from ..parallel.startup import StartupWatch
    from . import progress
    from .train import warm_up
    placement = Placement(args.hostfile, args.host, args.net_if)
    placement.check(args.np)
    warm_up(args.solver)
    argv = normalize_gflags(sys.argv[1:])
    for flag in ('--np', '--hostfile', '--host', '--net-if', '--net_if', '--resume', '--max-restarts',
                 '--max_restarts', '--snapshot'):
        argv = _strip_flag(argv, flag)
    status = os.path.abspath('.pycaffe-ft-job-%d.status' % os.getpid())  # the ranks share this directory
    os.environ['PYCAFFE_FT_STATUS_FILE'] = status
    if args.hang_timeout and args.ft != 'off':  # ULFM's heartbeat detector: a hung rank counts as failed
        os.environ.update(OMPI_MCA_mpi_ft_detector='true', OMPI_MCA_mpi_ft_detector_thread='true',
                          OMPI_MCA_mpi_ft_detector_timeout=repr(args.hang_timeout),
                          OMPI_MCA_mpi_ft_detector_period=repr(args.hang_timeout / 4.0))
    watch = StartupWatch(status, args.np, placement.local)
    code, attempt, unstarted = 1, 0, 0
    try:
        while attempt <= args.max_restarts:
            if attempt:
                argv = _strip_flag(argv, '--inject-fault')  # scheduled faults belong to the first attempt
                argv = _strip_flag(argv, '--inject_fault')
                snapshot = _newest_snapshot(args.solver) or snapshot
                logger.warning('the job died as a whole (exit code %d); restart %d of %d from %s', code, attempt,
                               args.max_restarts, snapshot or 'the beginning (no snapshot yet)')
            run = argv + (['--snapshot', snapshot] if snapshot else []) + ['--mpi-worker']
            options = dict(ft=args.ft != 'off', placement=placement, finished=lambda: os.path.exists(status),
                           abandon=watch.failure)
            if progress.wanted():
                with progress.ProgressLine() as line:
                    code = launch(args.np, run, relay=progress.TerminalRelay(line), **options)
            else:
                code = launch(args.np, run, **options)
            finished = os.path.exists(status)
            failed_start, ran, mpi_started, errors = watch.failed, watch.ranks_ran(), watch.mpi_started(), \
                watch.rank_errors()
            watch.clear()
            if finished:  # the root wrote it after the final snapshot: what follows is the ranks' exit
                os.unlink(status)
                if code != 0:
                    logger.warning('mpiexec exited with code %d after training had finished (a process ending '
                                   'badly at exit); the final snapshot is complete', code)
                return 0
            if unstarted < MPIEXEC_START_RETRIES and not errors and (failed_start or (ran and not mpi_started) or
                                                                     (not ran and code != 0)):
                unstarted += 1  # no rank's MPI started: nothing was trained, nothing was written
                if failed_start:
                    why = 'the start-up failed (%s): the job was ended' % failed_start
                elif ran:  # a rank crashed inside MPI_Init_thread and took the others down in theirs
                    why = 'every rank ended before its MPI had started (exit code %d)' % code
                else:  # seen once in ~130 launches: "The PMIx server's listener thread failed to start"
                    why = 'mpiexec exited with code %d before starting any rank' % code
                logger.warning('%s; starting it again (%d of %d)', why, unstarted, MPIEXEC_START_RETRIES)
                argv = _strip_faults_in_phase(argv, 'mpi-init')  # they fired; no other phase came
                time.sleep(1.0)
                continue
            if code == 0:  # with ULFM mpiexec reports 0 even when every rank was killed
                code = 1
                logger.error('every rank died before the end of training (no rank finished)')
            attempt += 1
    finally:
        watch.clear()
    return code


def _strip_faults_in_phase(argv, phase):
    """``argv`` without the --inject-fault specs of fault phase ``phase``."""
    from ..faults import parse_spec
    out, i = [], 0
    while i < len(argv):
        flag, _, value = argv[i].partition('=')
        spec = value if value else (argv[i + 1] if i + 1 < len(argv) else '')
        if flag in ('--inject-fault', '--inject_fault') and parse_spec(spec)[2] == phase:
            i += 1 if value else 2
            continue
        out.append(argv[i])
        i += 1
    return out


def _strip_flag(argv, flag):
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a == flag:
            skip = True
            continue
        if a.startswith(flag + '='):
            continue
        out.append(a)
    return out


@command('test', 'score a trained model over N batches (like caffe test)')
def cmd_test(args):
    from .train import test
    test(args.model, args.weights, iterations=args.iterations, level=args.level, stages=_stages(args.stage))
    return 0


# -- dataset tools -------------------------------------------------------------------------
@command('convert-mnist', 'MNIST IDX files (gzipped or not) -> LMDB (convert_mnist_data)')
def cmd_convert_mnist(args):
    from ..data.convert import convert_mnist
    convert_mnist(args.images, args.labels, args.db, args.backend)
    return 0


@command('prepare-mnist', 'build <dir>/mnist_train_lmdb and mnist_test_lmdb from the IDX files if missing')
def cmd_prepare_mnist(args):
    import os
    from ..data.convert import convert_mnist
    from ..log import logger
    for split, prefix in (('train', 'train'), ('test', 't10k')):
        db = os.path.join(args.dir, 'mnist_%s_lmdb' % split)
        if os.path.exists(db):
            logger.info('%s exists', db)
            continue
        convert_mnist(os.path.join(args.dir, '%s-images-idx3-ubyte' % prefix),
                      os.path.join(args.dir, '%s-labels-idx1-ubyte' % prefix), db)
    return 0


@command('convert-cifar', 'CIFAR-10 binary batches -> LMDBs (convert_cifar_data)')
def cmd_convert_cifar(args):
    from ..data.convert import convert_cifar
    convert_cifar(args.input_folder, args.output_folder, args.backend)
    return 0


@command('convert-imageset', 'an image list -> LMDB of Datums (convert_imageset)')
def cmd_convert_imageset(args):
    from ..data.convert import convert_imageset
    convert_imageset(args.root_folder, args.list_file, args.db, args.resize_height, args.resize_width,
                     args.shuffle, args.gray, args.encoded, args.encode_type, args.backend, args.check_size)
    return 0


@command('compute-image-mean', 'mean image of an LMDB -> .binaryproto (compute_image_mean)')
def cmd_compute_image_mean(args):
    from ..data.convert import compute_image_mean
    compute_image_mean(args.db, args.output, args.backend)
    return 0


@command('check-db', 'read every record of an LMDB in a child process; report the first unreadable one')
def cmd_check_db(args):
    from ..data.check_db import check_db, describe
    report = check_db(args.db, timeout=args.timeout)
    for line in describe(args.db, report):
        print(line)
    return 0 if report['status'] == 'ok' else 1


@command('extract-features', 'blob values of a net over N batches -> LMDB of Datums')
def cmd_extract_features(args):
    from ..data.features import extract_features
    extract_features(args.weights, args.model, args.blobs.split(','), args.dbs.split(','),
                     args.num_batches, args.backend)
    return 0


@command('draw-net', 'draw a net definition (pydot + Graphviz; .dot output needs nothing)')
def cmd_draw_net(args):
    from ..draw import draw_net_to_file
    from ..netspec_io import load_net_param
    from ..proto import caffe_pb2
    param, _ = load_net_param(args.input_net_proto_file)
    phase = {'TRAIN': caffe_pb2.TRAIN, 'TEST': caffe_pb2.TEST}.get(args.phase.upper())
    draw_net_to_file(param, args.output_image_file, args.rankdir, phase, args.display_lrm)
    print('Drawing net to %s' % args.output_image_file)
    return 0


@command('install-caffe-alias', 'opt-in: make "import caffe" load pycaffe-ft (never over a real caffe)')
def cmd_install_alias(args):
    from ..alias import install_alias
    print('Installed the caffe alias at %s' % install_alias(args.target))
    return 0


@command('parse-log', 'a training log -> LOG.train and LOG.test CSV files (like parse_log.py)')
def cmd_parse_log(args):
    import os
    from ..logparse import parse_log, write_csv
    train, test = parse_log(args.logfile)
    base = os.path.join(args.output_dir, os.path.basename(args.logfile))
    for rows, suffix in ((train, '.train'), (test, '.test')):
        with open(base + suffix, 'w', newline='') as f:
            write_csv(rows, f)
        print('Wrote %s (%d rows)' % (base + suffix, len(rows)))
    return 0


@command('plot-log', 'plot the outputs of a training log, and the recovery timeline of a parallel run (needs matplotlib)')
def cmd_plot_log(args):
    from ..logparse import parse_recovery, plot_log, plot_timeline
    print('Wrote %s' % plot_log(args.logfile, args.out, args.x))
    timeline = args.timeline
    if timeline is None and parse_recovery(args.logfile)['ranks'] is not None:
        timeline = '%s-timeline%s' % os.path.splitext(args.out)
    if timeline:
        print('Wrote %s' % plot_timeline(args.logfile, timeline))
    return 0


@command('export-onnx', 'export a deploy net (with its weights) to ONNX; --verify runs it in ONNX Runtime')
def cmd_export_onnx(args):
    from ..onnx_export import build_for_export, export_onnx, verify
    net = build_for_export(args.model, args.weights, _parse_shapes(args.input_shape), stages=_stages(args.stage))
    model = export_onnx(net, args.out, opset=args.opset, dynamic_batch=args.dynamic_batch)
    print('Wrote %s (opset %d, %d nodes; inputs %s; outputs %s)' % (
        args.out, args.opset, len(model.graph.node), ', '.join(i.name for i in model.graph.input),
        ', '.join(o.name for o in model.graph.output)))
    if args.verify:
        worst = 0.0
        for name, (diff, scale) in verify(net, args.out).items():
            relative = diff / scale if scale else diff
            worst = max(worst, relative)
            print('  %s: max |ONNX Runtime - pycaffe-ft| = %.3g (%.3g relative to max |output| %.3g)'
                  % (name, diff, relative, scale))
        if worst > 1e-4:
            print('verification FAILED: outputs differ by more than 1e-4 relative')
            return 1
        print('verified: every output within 1e-4 relative')
    return 0


# -- upgrades ------------------------------------------------------------------------------
@command('upgrade-net', 'write a V0/V1/old-input net definition in the current format')
def cmd_upgrade_net(args):
    from ..netspec_io import load_net_param
    from ..proto.io import write_binary, write_text
    param, _ = load_net_param(args.input)
    if args.binary:
        write_binary(args.output, param)
    else:
        write_text(args.output, param)
    print('Wrote upgraded NetParameter to %s' % args.output)
    return 0


@command('upgrade-solver', 'write a solver with the old solver_type enum in the current format')
def cmd_upgrade_solver(args):
    from ..netspec_io import load_solver_param
    from ..proto.io import write_text
    write_text(args.output, load_solver_param(args.input))
    print('Wrote upgraded SolverParameter to %s' % args.output)
    return 0


def build_parser():
    from ..faults import PHASES
    from ..onnx_export import DEFAULT_OPSET
    parser = argparse.ArgumentParser(prog='pycaffe-ft', description=(
        'Caffe-compatible deep learning with fault-tolerant MPI training. '
        'Flags also accept Caffe\'s gflags spellings (-solver S, --solver=S).'))
    sub = parser.add_subparsers(dest='command', metavar='COMMAND')
    add_parser = sub.add_parser

    def described(name, **kwargs):  # every subcommand's --help opens with what it does
        return add_parser(name, description=COMMANDS[name][1][:1].upper() + COMMANDS[name][1][1:] + '.', **kwargs)
    sub.add_parser = described
    p = sub.add_parser('info', help=COMMANDS['info'][1])
    p = sub.add_parser('device-query', help=COMMANDS['device-query'][1])
    p.add_argument('--gpu', default=None, help='accepted and ignored (CPU only), with a warning')
    p = sub.add_parser('time', help=COMMANDS['time'][1])
    p.add_argument('--model', required=True, help='net definition (.prototxt)')
    p.add_argument('--iterations', type=int, default=50)
    p.add_argument('--phase', default='TRAIN', choices=['TRAIN', 'TEST', 'train', 'test'])
    p.add_argument('--level', type=int, default=0)
    p.add_argument('--stage', default='', help='comma-separated stages')
    p.add_argument('--weights', default=None)
    p.add_argument('--input-shape', '--input_shape', action='append',
                   help='NAME=N,C,H,W: shape of a data layer top fed with synthetic input')
    p.add_argument('--gpu', default=None, help='accepted and ignored (CPU only), with a warning')
    _threads_flag(p)
    p = sub.add_parser('train', help=COMMANDS['train'][1])
    p.add_argument('--solver', required=True, help='solver definition (.prototxt)')
    p.add_argument('--weights', help='comma-separated .caffemodel files to start from (finetuning)')
    p.add_argument('--snapshot', help='.solverstate to resume from')
    p.add_argument('--resume', choices=['auto'], help='auto: continue from the newest complete snapshot of the '
                                                      'solver\'s snapshot_prefix, or start fresh if there is none')
    p.add_argument('--hang-timeout', '--hang_timeout', type=_non_negative_float, default=10.0,
                   help='with --np: a rank silent this many seconds (stopped, frozen, its host gone) is treated as '
                        'failed and excluded (Open MPI\'s heartbeat detector, on its own thread: long compiles, '
                        'tests and snapshots do not count); 0 turns it off; default 10')
    p.add_argument('--max-restarts', '--max_restarts', type=_non_negative_int, default=0,
                   help='with --np: restart a job that died as a whole up to K times, from its newest snapshot')
    p.add_argument('--level', type=int, default=0)
    p.add_argument('--stage', default='', help='comma-separated stages')
    p.add_argument('--sigint_effect', '--sigint-effect', default='stop', choices=['stop', 'snapshot', 'none'])
    p.add_argument('--sighup_effect', '--sighup-effect', default='snapshot', choices=['stop', 'snapshot', 'none'])
    p.add_argument('--gpu', default=None, help='accepted and ignored (CPU only), with a warning')
    p.add_argument('--np', type=_positive_int, default=1, help='start N MPI ranks (data-parallel, fault tolerant)')
    _threads_flag(p, ' (per rank with --np)')
    p.add_argument('--hostfile', help='with --np: run the ranks on the hosts of this Open MPI hostfile '
                                      '("name slots=N" lines; see README, Several machines)')
    p.add_argument('--host', help='with --np: run the ranks on these hosts, NAME[:SLOTS],...')
    p.add_argument('--net-if', '--net_if', help='with --np: the network interface (or CIDR) the ranks talk '
                                                'over; default: loopback on one machine, Open MPI\'s choice '
                                                'with --hostfile/--host')
    p.add_argument('--virtual-workers', '--virtual_workers', type=_positive_int, default=None,
                   help='virtual workers V (default: the starting number of ranks)')
    p.add_argument('--ft', default='on', choices=['on', 'off'], help='ULFM fault tolerance (off: fail-stop MPI)')
    p.add_argument('--min-ranks', '--min_ranks', type=_positive_int, default=1,
                   help='give up (with a final snapshot) below this many ranks')
    p.add_argument('--regrow', action='store_true',
                   help='with --np: after ranks fail, spawn replacements (MPI_Comm_spawn) that receive the state '
                        'and take workers back, so the job returns to its starting size')
    p.add_argument('--max-regrows', '--max_regrows', type=_non_negative_int, default=10,
                   help='with --regrow: at most this many re-grow attempts (default 10)')
    p.add_argument('--inject-fault', '--inject_fault', action='append', default=[], type=_fault_spec,
                   help='RANK:ITER[:PHASE]: SIGKILL that rank there; phases: %s (mpi-init: just before the '
                        'rank starts MPI, iteration 0; bucket: a gradient bucket in '
                        'flight; allgather: the sum in worker order between its two exchanges; node and leader: '
                        'a bucket in flight at that level of a two-level reduction); '
                        'repeatable; entries that can never fire are warned about at start' % ', '.join(PHASES))
    p.add_argument('--hierarchy', default='auto', choices=['auto', 'flat'],
                   help='gradient reduction: auto = two levels (node, then across node leaders) when '
                        'several nodes hold several ranks each, or with --ranks-per-node; flat = one allreduce')
    p.add_argument('--ranks-per-node', '--ranks_per_node', type=_positive_int, default=None,
                   help='treat every K consecutive ranks as one node (two-level reduction on one machine)')
    p.add_argument('--overlap', default='off', choices=['on', 'off'],
                   help='off (default): the sum in worker order after backward (flat), or blocking bucket '
                        'allreduces (two levels); on: nonblocking bucket allreduces posted during backward, '
                        'in an order that depends on the ranks (see README: an Open MPI deadlock seen once '
                        'under failures)')
    p.add_argument('--bucket-mb', '--bucket_mb', type=_positive_float, default=None,
                   help='gradient bucket size in MB (whole parameter blobs per bucket; default 1, or a '
                        'quarter of the gradients when that is smaller)')
    p.add_argument('--deterministic', action='store_true',
                   help='data-parallel: the final weights are bitwise the same whatever ranks fail and whatever '
                        '--np (equal to --np 1 --virtual-workers V): the gradients are summed in worker order '
                        '(each rank sums one segment over all workers). This is the default reduction; the '
                        'flag keeps it where --overlap on or two levels would reduce in buckets instead')
    p.add_argument('--ledger', help='append the record indices each iteration consumed to this file (JSON lines)')
    p.add_argument('--mpi-worker', action='store_true', help=argparse.SUPPRESS)
    p = sub.add_parser('test', help=COMMANDS['test'][1])
    p.add_argument('--model', required=True)
    p.add_argument('--weights', required=True)
    p.add_argument('--iterations', type=int, default=50)
    p.add_argument('--level', type=int, default=0)
    p.add_argument('--stage', default='')
    p.add_argument('--gpu', default=None, help='accepted and ignored (CPU only), with a warning')
    _threads_flag(p)
    p = sub.add_parser('convert-mnist', help=COMMANDS['convert-mnist'][1])
    p.add_argument('images')
    p.add_argument('labels')
    p.add_argument('db')
    p.add_argument('--backend', default='lmdb')
    p = sub.add_parser('prepare-mnist', help=COMMANDS['prepare-mnist'][1])
    p.add_argument('dir', nargs='?', default='data/mnist')
    p = sub.add_parser('convert-cifar', help=COMMANDS['convert-cifar'][1])
    p.add_argument('input_folder')
    p.add_argument('output_folder')
    p.add_argument('--backend', default='lmdb')
    p = sub.add_parser('convert-imageset', help=COMMANDS['convert-imageset'][1])
    p.add_argument('root_folder')
    p.add_argument('list_file')
    p.add_argument('db')
    for flag in ('resize_height', 'resize_width'):
        p.add_argument('--' + flag, type=int, default=0)
    for flag in ('shuffle', 'gray', 'encoded', 'check_size'):
        p.add_argument('--' + flag, nargs='?', const=True, default=False, type=_bool_flag)
    p.add_argument('--encode_type', default='')
    p.add_argument('--backend', default='lmdb')
    p = sub.add_parser('compute-image-mean', help=COMMANDS['compute-image-mean'][1])
    p.add_argument('db')
    p.add_argument('output', nargs='?')
    p.add_argument('--backend', default='lmdb')
    p = sub.add_parser('check-db', help=COMMANDS['check-db'][1])
    p.add_argument('db', help='the LMDB directory (or data.mdb file)')
    p.add_argument('--timeout', type=_positive_float, default=None, help='give up after this many seconds')
    p = sub.add_parser('extract-features', help=COMMANDS['extract-features'][1])
    p.add_argument('weights')
    p.add_argument('model')
    p.add_argument('blobs', help='comma-separated blob names')
    p.add_argument('dbs', help='comma-separated output databases, one per blob')
    p.add_argument('num_batches', type=int)
    p.add_argument('--backend', default='lmdb')
    p = sub.add_parser('draw-net', help=COMMANDS['draw-net'][1])
    p.add_argument('input_net_proto_file')
    p.add_argument('output_image_file')
    p.add_argument('--rankdir', default='LR', choices=['LR', 'TB', 'BT', 'RL'])
    p.add_argument('--phase', default='ALL', help='TRAIN, TEST or ALL')
    p.add_argument('--display_lrm', '--display-lrm', action='store_true',
                   help="show the learned layers' lr_mult in their boxes")
    p = sub.add_parser('parse-log', help=COMMANDS['parse-log'][1])
    p.add_argument('logfile')
    p.add_argument('output_dir', nargs='?', default='.')
    p = sub.add_parser('plot-log', help=COMMANDS['plot-log'][1])
    p.add_argument('logfile')
    p.add_argument('--out', required=True)
    p.add_argument('--x', default='NumIters', choices=['NumIters', 'Seconds'])
    p.add_argument('--timeline', help='also draw the recovery timeline of a parallel run here (default for a '
                                      'parallel log: OUT-timeline.png beside --out)')
    p = sub.add_parser('export-onnx', help=COMMANDS['export-onnx'][1])
    p.add_argument('--model', required=True, help='the net (.prototxt); data layers become inputs')
    p.add_argument('--weights', help='.caffemodel (or .h5) with the trained weights')
    p.add_argument('--out', required=True, help='the .onnx file to write')
    p.add_argument('--opset', type=_positive_int, default=DEFAULT_OPSET,
                   help='ONNX opset (13 or newer; default %d)' % DEFAULT_OPSET)
    p.add_argument('--input-shape', '--input_shape', action='append',
                   help='NAME=N,C,H,W: shape of an input (or of a data layer top) in the exported graph')
    p.add_argument('--dynamic-batch', '--dynamic_batch', action='store_true', help='leave the batch axis free (N)')
    p.add_argument('--stage', default='', help='comma-separated stages')
    p.add_argument('--verify', action='store_true',
                   help='run the model in ONNX Runtime and pycaffe-ft on the same random input and print '
                        'the difference per output')
    p = sub.add_parser('install-caffe-alias', help=COMMANDS['install-caffe-alias'][1])
    p.add_argument('--target', help='directory to put the caffe package in (default: site-packages)')
    p = sub.add_parser('upgrade-net', help=COMMANDS['upgrade-net'][1])
    p.add_argument('input')
    p.add_argument('output')
    p.add_argument('--binary', action='store_true', help='write a binary NetParameter')
    p = sub.add_parser('upgrade-solver', help=COMMANDS['upgrade-solver'][1])
    p.add_argument('input')
    p.add_argument('output')
    return parser


# Caffe's tool names that are not just ours with underscores (convert_imageset, device_query,
# ... are: _canonical_command maps those by replacing the underscores)
CAFFE_TOOL_NAMES = {'convert_mnist_data': 'convert-mnist', 'convert_cifar_data': 'convert-cifar',
                    'upgrade_net_proto_text': 'upgrade-net', 'upgrade_net_proto_binary': 'upgrade-net',
                    'upgrade_solver_proto_text': 'upgrade-solver'}


def _canonical_command(argv):
    """Caffe's spelling of a command (``convert_imageset``, ``device_query``) -> ours."""
    for i, arg in enumerate(argv):
        if not arg.startswith('-'):
            name = CAFFE_TOOL_NAMES.get(arg, arg)
            if name not in COMMANDS and arg.replace('_', '-') in COMMANDS:
                name = arg.replace('_', '-')
            return argv[:i] + [name] + argv[i + 1:]
    return argv


def main(argv=None):
    from ..errors import CaffeError
    argv = _canonical_command(normalize_gflags(sys.argv[1:] if argv is None else argv))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not args.command:
        parser.print_help()
        return 1
    if getattr(args, 'gpu', None) is not None:
        print('warning: --gpu %s ignored: pycaffe-ft runs on the CPU' % args.gpu, file=sys.stderr)
    if getattr(args, 'threads', None) is not None:
        from ..intra_op import set_num_threads
        set_num_threads(args.threads)
    rank = args.command == 'train' and (args.mpi_worker or _in_mpi_job())
    if rank:
        from ..parallel.comm import JOINING
        from ..parallel.startup import mark_rank_started
        if not JOINING:  # (a replacement joins a job whose start-up is over)
            mark_rank_started()
    try:
        code = COMMANDS[args.command][0](args) or 0
    except CaffeError as e:
        print('pycaffe-ft %s: error: %s' % (args.command, e), file=sys.stderr)
        code = 1
        _mark_rank_error(rank)
    except KeyboardInterrupt:
        print('pycaffe-ft %s: interrupted' % args.command, file=sys.stderr)
        code = 130
    except BaseException:
        if not rank:
            raise
        import traceback
        traceback.print_exc()
        code = 1
        _mark_rank_error(rank)
    if rank:  # an MPI rank ends here: MPI_Finalize can hang for ever under ULFM (after failures, or in
        sys.stdout.flush()  # the heartbeat detector's finalize when ranks end apart); mpiexec gets the code
        sys.stderr.flush()
        _end_if_spawned(code)
        os._exit(code)
    return code


def _mark_rank_error(rank):
    """A rank ending with an error of its own tells the --np launcher, which then does not start
    the job again for a start-up that never reached MPI (the error would come again)."""
    if rank:
        from ..parallel.startup import mark_rank_error
        mark_rank_error()


def _end_if_spawned(code):
    """A replacement that a re-grow spawned: mpiexec ends the whole job when a spawned process
    exits without MPI_Finalize (the ranks it started may), but survives one that is killed. So
    at the end of training it finalizes (bounded: after 10 s it is killed), and after an error
    it is killed, a failure the other ranks recover from (a finalized process would leave them
    waiting)."""
    from ..parallel.comm import JOINING
    if not JOINING:
        return
    import signal
    import threading
    if code != 0:
        os.kill(os.getpid(), signal.SIGKILL)
    watchdog = threading.Timer(10.0, os.kill, (os.getpid(), signal.SIGKILL))
    watchdog.daemon = True
    watchdog.start()
    from mpi4py import MPI
    MPI.Finalize()


def _in_mpi_job():
    from ..parallel.launcher import in_mpi_job
    return in_mpi_job()
