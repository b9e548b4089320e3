"""Seeded fuzzing of every reader of user files: net and solver prototxt, binary NetParameter
(.caffemodel), .solverstate, BlobProto mean files, Datum records and LMDB databases.

Each input is a valid seed file (two nets covering most layer types) changed by 1-3 seeded mutations (byte flips, truncation,
insertions, huge varint length prefixes, duplicated or deleted ranges; for text also extreme
numbers, NUL bytes, deep nesting, dropped braces, swapped field names). Inputs run in child
processes, so every outcome is classified:

- typed: a pycaffe_ft error (CaffeError) - what a bad input must give;
- accepted: no error (the mutation kept the file valid);
- untyped: any other exception (a bug);
- crash: the child died on a signal while reading it (a bug, except inside check-db's own child);
- hang: no answer within the time limit (a bug).

    python tools/fuzz_readers.py [--inputs 2000] [--seed 0] [--readers net_text,lmdb]

prints a table of counts per reader and the first inputs of each bad class (reproduce one with
``--only READER:INDEX --keep DIR``). Exit status 1 when any untyped, crash or hang was seen.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BAD = ('untyped', 'crash', 'hang')

DEPLOY = '''name: "fuzz"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 dim: 12 dim: 12 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv"
  convolution_param { num_output: 4 kernel_size: 3 pad: 1 stride: 1 group: 1 weight_filler { type: "xavier" }
  bias_filler { type: "constant" value: 0.1 } } }
layer { name: "bn" type: "BatchNorm" bottom: "conv" top: "conv" batch_norm_param { eps: 0.00001 } }
layer { name: "scale" type: "Scale" bottom: "conv" top: "conv" scale_param { bias_term: true } }
layer { name: "relu" type: "ReLU" bottom: "conv" top: "conv" relu_param { negative_slope: 0.1 } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: MAX kernel_size: 3 stride: 2 } }
layer { name: "lrn" type: "LRN" bottom: "pool" top: "lrn" lrn_param { local_size: 3 alpha: 0.0001 beta: 0.75 } }
layer { name: "split" type: "Slice" bottom: "lrn" top: "a" top: "b" slice_param { axis: 1 slice_point: 2 } }
layer { name: "sum" type: "Eltwise" bottom: "a" bottom: "b" top: "sum" eltwise_param { operation: SUM coeff: 1 coeff: -1 } }
layer { name: "cat" type: "Concat" bottom: "sum" bottom: "a" top: "cat" concat_param { axis: 1 } }
layer { name: "drop" type: "Dropout" bottom: "cat" top: "cat" dropout_param { dropout_ratio: 0.5 } }
layer { name: "ip" type: "InnerProduct" bottom: "cat" top: "ip" param { lr_mult: 1 decay_mult: 1 }
  inner_product_param { num_output: 5 axis: 1 weight_filler { type: "gaussian" std: 0.01 } } }
layer { name: "shape" type: "Reshape" bottom: "ip" top: "r" reshape_param { shape { dim: 0 dim: -1 } } }
layer { name: "prob" type: "Softmax" bottom: "r" top: "prob" softmax_param { axis: 1 } }
'''

DEPLOY_MORE = '''name: "fuzz2"
layer { name: "data" type: "Input" top: "data" top: "ids" input_param { shape { dim: 2 dim: 4 dim: 10 dim: 10 } shape { dim: 2 dim: 3 } } }
layer { name: "deconv" type: "Deconvolution" bottom: "data" top: "up" convolution_param { num_output: 4 kernel_size: 4 stride: 2 pad: 1 group: 2 weight_filler { type: "bilinear" } } }
layer { name: "crop" type: "Crop" bottom: "up" bottom: "data" top: "crop" crop_param { axis: 2 offset: 1 } }
layer { name: "prelu" type: "PReLU" bottom: "crop" top: "crop" prelu_param { channel_shared: false } }
layer { name: "spp" type: "SPP" bottom: "crop" top: "spp" spp_param { pyramid_height: 2 pool: MAX } }
layer { name: "im2col" type: "Im2col" bottom: "data" top: "cols" convolution_param { kernel_size: 3 stride: 2 } }
layer { name: "mvn" type: "MVN" bottom: "data" top: "mvn" mvn_param { normalize_variance: true across_channels: false eps: 1e-9 } }
layer { name: "power" type: "Power" bottom: "mvn" top: "pow" power_param { power: 2 scale: 0.5 shift: 1 } }
layer { name: "elu" type: "ELU" bottom: "pow" top: "elu" elu_param { alpha: 1 } }
layer { name: "exp" type: "Exp" bottom: "elu" top: "exp" exp_param { base: -1 scale: 0.1 shift: 0 } }
layer { name: "log" type: "Log" bottom: "exp" top: "log" log_param { base: 10 scale: 1 shift: 1 } }
layer { name: "thr" type: "Threshold" bottom: "log" top: "thr" threshold_param { threshold: 0.5 } }
layer { name: "tile" type: "Tile" bottom: "thr" top: "tile" tile_param { axis: 1 tiles: 2 } }
layer { name: "red" type: "Reduction" bottom: "tile" top: "red" reduction_param { operation: SUMSQ axis: 2 coeff: 0.5 } }
layer { name: "flat" type: "Flatten" bottom: "red" top: "flat" flatten_param { axis: 1 end_axis: -1 } }
layer { name: "bias" type: "Bias" bottom: "flat" top: "biased" bias_param { axis: 1 num_axes: 1 filler { type: "constant" value: 0.1 } } }
layer { name: "argmax" type: "ArgMax" bottom: "biased" top: "am" argmax_param { top_k: 2 out_max_val: true axis: 1 } }
layer { name: "embed" type: "Embed" bottom: "ids" top: "emb" embed_param { num_output: 5 input_dim: 10 weight_filler { type: "uniform" min: -1 max: 1 } } }
layer { name: "abs" type: "AbsVal" bottom: "emb" top: "abs" }
layer { name: "clip" type: "Clip" bottom: "abs" top: "clip" clip_param { min: 0 max: 0.5 } }
layer { name: "swish" type: "Swish" bottom: "clip" top: "swish" swish_param { beta: 1.5 } }
layer { name: "soft" type: "Softmax" bottom: "swish" top: "prob" softmax_param { axis: 2 } }
'''

TRAIN = '''name: "fuzz_train"
layer { name: "x" type: "DummyData" top: "x" top: "y" dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 2 }
  data_filler { type: "gaussian" } data_filler { type: "constant" value: 1 } } }
layer { name: "ip" type: "InnerProduct" bottom: "x" top: "ip" inner_product_param { num_output: 2
  weight_filler { type: "gaussian" std: 0.1 } } }
layer { name: "loss" type: "SoftmaxWithLoss" bottom: "ip" bottom: "y" top: "loss" }
'''

SOLVER = '''net: "train.prototxt"
test_iter: 2
test_interval: 5
base_lr: 0.01
momentum: 0.9
weight_decay: 0.0005
lr_policy: "step"
gamma: 0.1
stepsize: 10
display: 1
max_iter: 20
snapshot: 10
snapshot_prefix: "snap"
random_seed: 1
type: "SGD"
iter_size: 1
average_loss: 1
clip_gradients: 10
'''

EXTREMES = [b'-1', b'0', b'2147483647', b'-2147483648', b'4294967296', b'1e39', b'-1e39', b'nan', b'inf', b'-inf',
            b'1e-45', b'99999999999999999999', b'"x"', b'true', b'MAX', b'']
FIELDS = [b'num_output', b'kernel_size', b'stride', b'pad', b'group', b'dim', b'axis', b'slice_point', b'coeff',
          b'local_size', b'dropout_ratio', b'bottom', b'top', b'type', b'name', b'lr_mult', b'base_lr', b'max_iter',
          b'test_iter', b'iter_size', b'snapshot', b'stepsize', b'eps', b'negative_slope', b'shape', b'layer']


# -- seeds (built once per campaign, in the campaign's directory) ------------------------
def build_seeds(directory):
    """Write the seed files; returns {reader: seed bytes}."""
    import numpy as np

    import pycaffe_ft as caffe
    from pycaffe_ft.data.datum import array_to_datum
    from pycaffe_ft.proto import caffe_pb2
    from pycaffe_ft.proto.io import array_to_blob
    cwd = os.getcwd()
    os.chdir(directory)
    try:
        open('deploy.prototxt', 'w').write(DEPLOY)
        open('train.prototxt', 'w').write(TRAIN)
        open('solver.prototxt', 'w').write(SOLVER)
        caffe.set_random_seed(1)  # the same seed files (and so the same inputs) in every campaign
        net = caffe.Net('deploy.prototxt', caffe.TEST)
        net.save('deploy.caffemodel')
        solver = caffe.get_solver('solver.prototxt')
        solver.step(1)
        solver.snapshot()
        mean = array_to_blob(np.random.default_rng(0).random((1, 3, 12, 12)).astype(np.float32))
        open('mean.binaryproto', 'wb').write(mean.SerializeToString())
        raw = array_to_datum(np.arange(3 * 5 * 4, dtype=np.uint8).reshape(3, 5, 4), 7)
        floats = array_to_datum(np.linspace(-1, 1, 2 * 3 * 3, dtype=np.float32).reshape(2, 3, 3), 1)
        _write_lmdb('seed_lmdb', [raw.SerializeToString()] * 40)
        import io

        from PIL import Image
        png = io.BytesIO()
        Image.fromarray(np.arange(8 * 6 * 3, dtype=np.uint8).reshape(8, 6, 3)).save(png, 'PNG')
        encoded = caffe_pb2.Datum(encoded=True, label=3, data=png.getvalue())
        return {
            'net_text': DEPLOY.encode(),
            'net_text_more': DEPLOY_MORE.encode(),
            'solver_text': SOLVER.encode(),
            'net_binary': open('deploy.caffemodel', 'rb').read(),
            'solverstate': open('snap_iter_1.solverstate', 'rb').read(),
            'blobproto': mean.SerializeToString(),
            'datum': raw.SerializeToString(),
            'datum_float': floats.SerializeToString(),
            'datum_encoded': encoded.SerializeToString(),
            'lmdb': open(os.path.join('seed_lmdb', 'data.mdb'), 'rb').read(),
        }
    finally:
        os.chdir(cwd)


def _write_lmdb(path, values):
    import lmdb
    env = lmdb.open(path, map_size=1 << 22)
    with env.begin(write=True) as txn:
        for i, value in enumerate(values):
            txn.put(b'%08d' % i, value)
    env.close()


# -- mutations -----------------------------------------------------------------------------
def _varint(n):
    out = bytearray()
    while True:
        byte, n = n & 0x7f, n >> 7
        out.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(out)


def mutate(data, rng, text):
    """1-3 seeded changes to ``data``."""
    data = bytearray(data)
    for _ in range(rng.randint(1, 3)):
        kinds = ['flip', 'truncate', 'insert', 'delete', 'duplicate', 'varint']
        if text:  # mostly changes that keep the syntax, so that the values reach the checks
            kinds = ['number'] * 6 + ['field'] * 3 + ['nul', 'nest', 'brace', 'flip', 'truncate', 'duplicate']
        kind = rng.choice(kinds)
        at = rng.randrange(len(data) + 1)
        if kind == 'flip' and data:
            for _ in range(rng.randint(1, 8)):
                data[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
        elif kind == 'truncate':
            del data[at:]
        elif kind == 'insert':
            data[at:at] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        elif kind == 'delete':
            del data[at:at + rng.randint(1, 64)]
        elif kind == 'duplicate' and data:
            lo = rng.randrange(len(data))
            data[at:at] = data[lo:lo + rng.randint(1, 256)]
        elif kind == 'varint':  # a field tag followed by a huge length prefix
            data[at:at] = bytes([rng.choice((0x0a, 0x12, 0x1a, 0x22, 0x2a, 0x32, 0x3a, 0x42))]) + \
                _varint(rng.choice((2 ** 31 - 1, 2 ** 32 + 5, 2 ** 62, len(data) + 1)))
        elif kind == 'number':
            digits = [i for i in range(len(data)) if 48 <= data[i] <= 57]
            if digits:
                i = rng.choice(digits)
                j = i
                while j < len(data) and (48 <= data[j] <= 57 or data[j] in b'.e-'):
                    j += 1
                data[i:j] = rng.choice(EXTREMES)
        elif kind == 'field':
            words = [i for i in range(1, len(data)) if 97 <= data[i] <= 122 and not 97 <= data[i - 1] <= 122]
            if words:
                i = rng.choice(words)
                j = i
                while j < len(data) and (97 <= data[j] <= 122 or data[j] == 95):
                    j += 1
                data[i:j] = rng.choice(FIELDS)
        elif kind == 'nul':
            data[at:at] = b'\0'
        elif kind == 'nest':
            depth = rng.choice((50, 500, 5000))
            data[at:at] = b'layer { ' * depth + b'}' * depth
        elif kind == 'brace':
            braces = [i for i in range(len(data)) if data[i] in b'{}']
            if braces:
                del data[rng.choice(braces)]
    return bytes(data)


# -- what each reader does with an input file (runs in the child) -----------------------------
def _read_net_text(path, seeds):
    import pycaffe_ft as caffe
    caffe.Net(path, caffe.TEST)


_read_net_text_more = _read_net_text


def _read_solver_text(path, seeds):
    import pycaffe_ft as caffe
    caffe.get_solver(path)


def _read_net_binary(path, seeds):
    import pycaffe_ft as caffe
    net = caffe.Net(os.path.join(seeds, 'deploy.prototxt'), caffe.TEST)
    net.copy_from(path)


def _read_solverstate(path, seeds):
    import pycaffe_ft as caffe
    solver = caffe.get_solver(os.path.join(seeds, 'solver.prototxt'))
    solver.restore(path)


def _read_blobproto(path, seeds):
    from pycaffe_ft.proto.io import read_blob_file
    read_blob_file(path)


def _read_datum(path, seeds):
    from pycaffe_ft.data.datum import datum_to_array, parse_datum
    datum_to_array(parse_datum(open(path, 'rb').read(), b'fuzz'), b'fuzz')


_read_datum_float = _read_datum_encoded = _read_datum


def _read_lmdb(path, seeds):
    """As a careful user would: check-db first (its child may crash, the caller lives on),
    then read every record in this process only if it said the database is sound."""
    from pycaffe_ft.data.check_db import check_db
    from pycaffe_ft.data.datum import datum_to_array, parse_datum
    from pycaffe_ft.data.db import LMDBReader
    from pycaffe_ft.errors import DataError
    directory = os.path.dirname(path)
    report = check_db(directory, timeout=15)
    if report['status'] != 'ok':
        raise DataError('check-db: %s' % report['message'])
    reader = LMDBReader(directory)
    try:
        for i in range(len(reader)):
            key, value = reader[i]
            datum_to_array(parse_datum(value, key), key)
    finally:
        reader.close()


READERS = {name[len('_read_'):]: fn for name, fn in globals().items() if name.startswith('_read_')}


def _selfcheck(path, seeds):
    """Proves the classifier: the input's first byte picks what happens."""
    from pycaffe_ft.errors import CaffeError
    first = open(path, 'rb').read()[:1]
    if first == b'a':
        os.abort()
    if first == b'h':
        import time
        time.sleep(3600)
    if first == b'u':
        raise KeyError('untyped')
    if first == b't':
        raise CaffeError('typed')


SELF_CHECK = {'selfcheck': _selfcheck}  # not a reader: run only by the suite's own test
TEXT = ('net_text', 'net_text_more', 'solver_text')


def inputs(reader, seed_bytes, count, seed):
    rng = random.Random('%s:%d' % (reader, seed))
    return [mutate(seed_bytes, rng, reader in TEXT) for _ in range(count)]


# -- the child: run inputs, one line per outcome -----------------------------------------------
def child(reader, seeds, batch_file, first):
    import signal
    from pycaffe_ft.errors import CaffeError
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    with open(batch_file) as f:
        batch = json.load(f)
    work = tempfile.mkdtemp(prefix='fuzz-')
    os.chdir(work)
    with open('train.prototxt', 'w') as f:  # what the solvers name
        f.write(TRAIN)
    if reader == 'solverstate':  # the weights the state names
        shutil.copy(os.path.join(seeds, 'snap_iter_1.caffemodel'), work)
    for index in range(first, len(batch)):
        data = bytes.fromhex(batch[index])
        sys.stdout.write('start %d\n' % index)
        sys.stdout.flush()
        if reader == 'lmdb':
            os.makedirs('db', exist_ok=True)
            path = os.path.join('db', 'data.mdb')
        else:
            path = 'input' + ('.prototxt' if reader in TEXT else '.bin')
        with open(path, 'wb') as f:
            f.write(data)
        try:
            {**READERS, **SELF_CHECK}[reader](path, seeds)
            outcome, detail = 'accepted', ''
        except CaffeError as e:
            outcome, detail = 'typed', type(e).__name__
        except BaseException as e:  # noqa: B902 - classifying is the point
            outcome, detail = 'untyped', '%s: %s' % (type(e).__name__, str(e)[:200])
        sys.stdout.write('done %d %s %s\n' % (index, outcome, json.dumps(detail)))
        sys.stdout.flush()


def run_reader(reader, batch, seeds, timeout=20.0):
    """Outcome per input, running children and restarting after a crash or hang."""
    import selectors
    import time
    outcomes = [None] * len(batch)
    batch_file = os.path.join(seeds, 'batch-%s.json' % reader)
    with open(batch_file, 'w') as f:
        json.dump([b.hex() for b in batch], f)
    first = 0
    env = dict(os.environ, GLOG_minloglevel='3', PYCAFFE_FT_NUM_THREADS='1',
               PYCAFFE_FT_MAX_BLOB_BYTES=str(256 << 20))
    while first < len(batch):
        proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), '--child', reader, seeds, batch_file,
                                 str(first)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, text=True)
        selector = selectors.DefaultSelector()
        selector.register(proc.stdout, selectors.EVENT_READ)
        current, last = None, time.monotonic()
        while True:
            if not selector.select(timeout=1.0):
                if current is not None and time.monotonic() - last > timeout:
                    proc.kill()
                    proc.wait()
                    outcomes[current] = ('hang', 'no answer in %g s' % timeout)
                    break
                if proc.poll() is not None:
                    break
                continue
            line = proc.stdout.readline()
            if not line:
                proc.wait()
                if current is not None:
                    outcomes[current] = ('crash', 'signal %d' % -proc.returncode if proc.returncode < 0
                                         else 'exit %d' % proc.returncode)
                break
            last = time.monotonic()
            word, index, *rest = line.split(' ', 3)
            if word == 'start':
                current = int(index)
            elif word == 'done':
                outcomes[int(index)] = (rest[0], json.loads(rest[1]))
                current = None
        proc.stdout.close()
        done = [i for i, o in enumerate(outcomes) if o is not None]
        first = (max(done) + 1) if done else len(batch)
    return outcomes


def campaign(count, seed=0, readers=None, log=print):
    """{reader: [(class, detail) per input]} over ``count`` inputs per reader."""
    seeds = tempfile.mkdtemp(prefix='fuzz-seeds-')
    seed_bytes = build_seeds(seeds)
    results = {}
    for reader in readers or READERS:
        results[reader] = run_reader(reader, inputs(reader, seed_bytes[reader], count, seed), seeds)
        log(summary_line(reader, results[reader]))
    return results


def summary_line(reader, outcomes):
    counts = {c: sum(1 for o in outcomes if o[0] == c) for c in ('typed', 'accepted') + BAD}
    return '| %s | %d | %s |' % (reader, len(outcomes), ' | '.join(str(counts[c]) for c in ('typed', 'accepted') + BAD))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    ap.add_argument('--inputs', type=int, default=2000, help='inputs per reader')
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--readers', default=','.join(READERS))
    args = ap.parse_args(argv)
    print('| reader | inputs | typed | accepted | untyped | crash | hang |')
    print('|---|---|---|---|---|---|---|')
    results = campaign(args.inputs, args.seed, args.readers.split(','))
    bad = [(r, i, o) for r, outs in results.items() for i, o in enumerate(outs) if o[0] in BAD]
    for reader, index, (kind, detail) in bad[:20]:
        print('%s %s:%d %s' % (kind, reader, index, detail))
    return 1 if bad else 0


if __name__ == '__main__':
    if len(sys.argv) > 1 and sys.argv[1] == '--child':
        sys.path.insert(0, ROOT)
        child(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
    else:
        sys.exit(main())
