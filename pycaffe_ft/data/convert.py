"""Dataset tools with Caffe's outputs: convert_mnist_data, convert_cifar_data,
convert_imageset, compute_image_mean. Databases are written under a temporary name and renamed
when complete (see :class:`~pycaffe_ft.data.db.DBWriter`)."""
import gzip
import os
import struct
import sys

import numpy as np

from ..errors import DataError
from ..log import logger
from ..proto import caffe_pb2
from ..proto.io import array_to_blob, write_binary
from .datum import datum_to_array, parse_datum
from .db import DBWriter, open_db

__all__ = ['convert_mnist', 'convert_cifar', 'convert_imageset', 'compute_image_mean', 'read_idx',
           'read_image_list']


class Progress:
    """A progress bar on a terminal (stderr), silent otherwise."""

    def __init__(self, total, what):
        self.total, self.what, self.tty = total, what, sys.stderr.isatty()

    def update(self, done):
        if self.tty and (done % 500 == 0 or done == self.total):
            width = 30
            filled = int(width * done / max(self.total, 1))
            sys.stderr.write('\r%s [%s%s] %d/%d' % (self.what, '#' * filled, '.' * (width - filled),
                                                   done, self.total))
            if done == self.total:
                sys.stderr.write('\n')
            sys.stderr.flush()


def _open_maybe_gz(path):
    if not os.path.exists(path):
        if os.path.exists(path + '.gz'):
            path += '.gz'
        else:
            raise DataError('%s: file not found' % path)
    with open(path, 'rb') as f:
        magic = f.read(2)
    return gzip.open(path, 'rb') if magic == b'\x1f\x8b' else open(path, 'rb')


def read_idx(path, expected_magic):
    """An IDX file (gzipped or not) -> uint8 array."""
    with _open_maybe_gz(path) as f:
        header = f.read(8)
        if len(header) < 8:
            raise DataError('%s: truncated IDX header' % path)
        magic, count = struct.unpack('>II', header)
        if magic != expected_magic:
            raise DataError('%s: bad magic number %d (expected %d): not an MNIST %s file'
                            % (path, magic, expected_magic, 'image' if expected_magic == 2051 else 'label'))
        dims = [count]
        if magic == 2051:
            dims += list(struct.unpack('>II', f.read(8)))
        data = f.read()
    need = int(np.prod(dims))
    if len(data) < need:
        raise DataError('%s: truncated: %d bytes for %d values' % (path, len(data), need))
    return np.frombuffer(data[:need], np.uint8).reshape(dims)


def convert_mnist(images_path, labels_path, db_path, backend='lmdb'):
    images = read_idx(images_path, 2051)
    labels = read_idx(labels_path, 2049)
    if len(images) != len(labels):
        raise DataError('%d images but %d labels' % (len(images), len(labels)))
    n, rows, cols = images.shape
    logger.info('A total of %d items.', n)
    logger.info('Rows: %d Cols: %d', rows, cols)
    progress = Progress(n, 'convert-mnist')
    with DBWriter(db_path, backend) as db:
        for i in range(n):
            datum = caffe_pb2.Datum(channels=1, height=rows, width=cols, data=images[i].tobytes(),
                                    label=int(labels[i]))
            db.put('%08d' % i, datum.SerializeToString())
            progress.update(i + 1)
    logger.info('Processed %d files.', n)
    return n


def convert_cifar(input_folder, output_folder, backend='lmdb'):
    """CIFAR-10 binary batches -> cifar10_train_<backend> and cifar10_test_<backend>."""
    def records(path):
        if not os.path.exists(path):
            raise DataError('%s: CIFAR-10 batch file not found (download the "binary version" and '
                            'extract it)' % path)
        raw = np.fromfile(path, np.uint8)
        if raw.size % 3073:
            raise DataError('%s: size %d is not a multiple of 3073 (label + 3x32x32)' % (path, raw.size))
        return raw.reshape(-1, 3073)
    os.makedirs(output_folder, exist_ok=True)
    logger.info('Writing Training data')
    with DBWriter(os.path.join(output_folder, 'cifar10_train_' + backend), backend) as db:
        for fileid in range(5):
            batch = records(os.path.join(input_folder, 'data_batch_%d.bin' % (fileid + 1)))
            for itemid, rec in enumerate(batch):
                datum = caffe_pb2.Datum(channels=3, height=32, width=32, data=rec[1:].tobytes(), label=int(rec[0]))
                db.put('%05d' % (fileid * 10000 + itemid), datum.SerializeToString())
    logger.info('Writing Testing data')
    with DBWriter(os.path.join(output_folder, 'cifar10_test_' + backend), backend) as db:
        for itemid, rec in enumerate(records(os.path.join(input_folder, 'test_batch.bin'))):
            datum = caffe_pb2.Datum(channels=3, height=32, width=32, data=rec[1:].tobytes(), label=int(rec[0]))
            db.put('%05d' % itemid, datum.SerializeToString())


def _match_ext(filename, encoding):
    ext = filename.rsplit('.', 1)[-1].lower() if '.' in filename else ''
    encoding = encoding.lower()
    return ext == encoding or (encoding == 'jpg' and ext == 'jpeg')


def _cv2():
    try:
        import cv2
    except ImportError:
        raise DataError('convert-imageset reads and resizes images exactly as Caffe (OpenCV); install '
                        'it: pip install "opencv-python-headless<5" (a dependency of pycaffe-ft)') from None
    return cv2


def read_image_to_datum(path, label, resize_height, resize_width, is_color, encoding):
    """Caffe's ReadImageToDatum; None if the image cannot be read."""
    cv2 = _cv2()
    img = cv2.imread(path, cv2.IMREAD_COLOR if is_color else cv2.IMREAD_GRAYSCALE)
    if img is None:
        return None
    if resize_height > 0 and resize_width > 0:
        img = cv2.resize(img, (resize_width, resize_height))
    if encoding:
        if (img.ndim == 3) == is_color and not resize_height and not resize_width and _match_ext(path, encoding):
            with open(path, 'rb') as f:
                return caffe_pb2.Datum(data=f.read(), label=label, encoded=True)
        ok, buf = cv2.imencode('.' + encoding, img)
        if not ok:
            raise DataError('cannot encode %s as %s' % (path, encoding))
        return caffe_pb2.Datum(data=buf.tobytes(), label=label, encoded=True)
    chw = img[None] if img.ndim == 2 else img.transpose(2, 0, 1)
    datum = caffe_pb2.Datum(channels=chw.shape[0], height=chw.shape[1], width=chw.shape[2],
                            data=np.ascontiguousarray(chw).tobytes(), label=label)
    datum.encoded = False  # Caffe's CVMatToDatum sets it explicitly, so it is serialized
    return datum


def read_image_list(list_file):
    """[(path, label)] of a Caffe image list: the label follows the LAST space of each line."""
    if not os.path.exists(list_file):
        raise DataError('image list %s not found (relative to the working directory %s)' % (list_file, os.getcwd()))
    lines = []
    with open(list_file) as f:
        for raw in f:
            raw = raw.rstrip('\n')
            if not raw.strip():
                continue
            path, _, label = raw.rpartition(' ')
            try:
                lines.append((path, int(label)))
            except ValueError:
                raise DataError('%s: line "%s" does not end in an integer label' % (list_file, raw)) from None
    return lines


def convert_imageset(root_folder, list_file, db_path, resize_height=0, resize_width=0, shuffle=False,
                     gray=False, encoded=False, encode_type='', backend='lmdb', check_size=False, seed=None):
    """Caffe's convert_imageset. Returns (records written, lines skipped)."""
    lines = read_image_list(list_file)
    if shuffle:
        np.random.default_rng(seed).shuffle(lines)
    logger.info('A total of %d images.', len(lines))
    if encode_type and not encoded:
        logger.info('encode_type specified, assuming encoded=true.')
        encoded = True
    size, count, skipped = None, 0, 0
    progress = Progress(len(lines), 'convert-imageset')
    with DBWriter(db_path, backend) as db:
        for line_id, (name, label) in enumerate(lines):
            enc = encode_type
            if encoded and not enc:
                enc = name.rsplit('.', 1)[-1].lower() if '.' in name else ''
            datum = read_image_to_datum(os.path.join(root_folder, name) if root_folder else name, label,
                                        max(0, resize_height), max(0, resize_width), not gray, enc)
            progress.update(line_id + 1)
            if datum is None:
                logger.error('Could not open or find file %s', os.path.join(root_folder, name))
                skipped += 1
                continue
            if check_size:
                if size is None:
                    size = len(datum.data)
                elif len(datum.data) != size:
                    raise DataError('incorrect data field size %d for %s (first image: %d)' % (len(datum.data), name, size))
            db.put('%08d_%s' % (line_id, name), datum.SerializeToString())
            count += 1
            if count % 1000 == 0:
                logger.info('Processed %d files.', count)
    logger.info('Processed %d files.', count)
    return count, skipped


def compute_image_mean(db_path, output=None, backend='lmdb'):
    """Caffe's compute_image_mean: per-pixel mean as a legacy-shaped BlobProto (1, C, H, W)."""
    db = open_db(db_path, backend)
    total, shape = None, None
    for i in range(len(db)):
        key, value = db[i]
        image = datum_to_array(parse_datum(value, key), key).astype(np.float64)
        if total is None:
            total, shape = np.zeros_like(image), image.shape
        elif image.shape != shape:
            raise DataError('record %r has shape %s, the first record %s' % (key, list(image.shape), list(shape)))
        total += image
    n = len(db)
    db.close()
    mean = (total / n).astype(np.float32)[None]
    logger.info('Processed %d files.', n)
    if output:
        logger.info('Write to %s', output)
        write_binary(output, array_to_blob(mean, legacy_shape=True))
    for c in range(mean.shape[1]):
        logger.info('mean_value channel [%d]: %g', c, mean[0, c].mean())
    return mean
