"""Reading and writing Caffe's protobuf files: prototxt text, binary protos, BlobProto arrays.

Every parse failure becomes a :class:`~pycaffe_ft.errors.PrototxtError` with file, line and
column; a field that BVLC Caffe does not have becomes a :class:`ForkFeatureError` naming it.
"""
import os
import re
import stat

import numpy as np
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from google.protobuf import text_format

from ..atomic import atomic_write_bytes
from ..errors import ForkFeatureError, PrototxtError, WeightsError, did_you_mean
from . import caffe_pb2

__all__ = ['parse_text', 'read_text', 'write_text', 'read_binary', 'write_binary',
           'layer_lines', 'blob_to_array', 'array_to_blob', 'read_blob_file',
           'message_to_text', 'read_bytes', 'read_definition_bytes', 'decode_text', 'looks_like_text',
           'first_non_finite']

_UNKNOWN_FIELD = re.compile(r'Message type "caffe\.(\w+)" has no field named "(\w+)"')
_UNKNOWN_ENUM = re.compile(r'Enum type "caffe\.([\w.]+)" has no value named (\w+)')
_LOCATION = re.compile(r'^\d+:\d+ : ')


def max_file_bytes():
    """The largest protobuf file read (``PYCAFFE_FT_MAX_FILE_BYTES``, default 2 GiB: protobuf's
    own message limit)."""
    try:
        return int(os.environ.get('PYCAFFE_FT_MAX_FILE_BYTES', 2 << 30))
    except ValueError:
        return 2 << 30


def read_bytes(path, what='file', error=PrototxtError):
    """The bytes of the regular file ``path``, bounded: a device, FIFO or directory (say
    ``/dev/zero``) and a file over :func:`max_file_bytes` are refused with ``error``."""
    try:
        with open(path, 'rb') as f:
            info = os.fstat(f.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise error('%s: the %s is not a regular file (a device, pipe or directory)' % (path, what))
            if info.st_size > max_file_bytes():
                raise error('%s: the %s has %d bytes, more than the %d a protobuf file may have '
                            '(PYCAFFE_FT_MAX_FILE_BYTES)' % (path, what, info.st_size, max_file_bytes()))
            return f.read(max_file_bytes() + 1)
    except FileNotFoundError:
        raise error('%s: %s not found' % (path, what)) from None
    except (IsADirectoryError, PermissionError) as e:
        raise error('%s: cannot read the %s (%s)' % (path, what, e.strerror)) from None
    except ValueError:  # a NUL in the name
        raise error('%r: not a file name (it holds a NUL byte)' % (path,)) from None


def read_definition_bytes(path, what='file'):
    """:func:`read_bytes` for a definition (prototxt or binary net): its errors are
    PrototxtErrors that name the path once."""
    prefix = '%s: ' % path
    return read_bytes(path, what, lambda message: PrototxtError(
        message[len(prefix):] if message.startswith(prefix) else message, path))


def looks_like_text(data):
    """True when the first 4 KB are nearly all printable text (stray bytes allowed), as a
    prototxt is and a binary protobuf (length prefixes, floats) is not."""
    head = data[:4096]
    if not head:
        return True
    texty = sum(1 for b in head if 32 <= b < 127 or b in (9, 10, 13) or b >= 128)
    return texty >= 0.95 * len(head) and head.count(10) + head.count(32) > 0


def decode_text(data, path):
    """UTF-8 text of a prototxt; a NUL or undecodable byte is a PrototxtError at its line and
    column (not a reason to read the file as binary)."""
    bad = data.find(b'\x00')
    try:
        text = data.decode('utf-8')
    except UnicodeDecodeError as e:
        bad = e.start if bad < 0 else min(bad, e.start)
        text = None
    if bad >= 0:
        line = data.count(b'\n', 0, bad) + 1
        column = bad - (data.rfind(b'\n', 0, bad) + 1) + 1
        raise PrototxtError('byte 0x%02x is not text (a NUL or a byte that is not UTF-8): a text '
                            'prototxt must be UTF-8' % data[bad], path, line, column)
    return text




def _enclosing_layer(text, line):
    """Name of the top-level layer block that contains 1-based ``line``, or None."""
    name = None
    for start, end, layer_name in _layer_blocks(text):
        if start <= line <= end:
            name = layer_name
    return name


def _names(descriptor, kind):
    return [x.name for x in getattr(descriptor, kind)] if descriptor is not None else []


def _enum(dotted):
    """The enum descriptor of ``Message.Enum`` (or a top-level ``Enum``) in caffe.proto."""
    outer, _, inner = dotted.rpartition('.')
    if not outer:
        return caffe_pb2.DESCRIPTOR.enum_types_by_name.get(inner)
    message = caffe_pb2.DESCRIPTOR.message_types_by_name.get(outer)
    return message.enum_types_by_name.get(inner) if message is not None else None


def parse_text(text, message, path=None):
    """Merge prototxt ``text`` into ``message`` (returned); raise PrototxtError on any problem."""
    try:
        text_format.Merge(text, message)
    except text_format.ParseError as e:
        line, column = e.GetLine(), e.GetColumn()
        detail = _LOCATION.sub('', str(e))
        detail = re.sub(r"^'.*?': ", '', detail, flags=re.S) if detail.startswith("'") else detail
        layer = _enclosing_layer(text, line) if line else None
        in_layer = ' (in layer "%s")' % layer if layer else ''
        unknown = _UNKNOWN_FIELD.search(detail)
        if unknown:
            fields = _names(caffe_pb2.DESCRIPTOR.message_types_by_name.get(unknown.group(1)), 'fields')
            hint = did_you_mean(unknown.group(2), fields)
            raise ForkFeatureError(
                'unknown field "%s" in %s%s%s' % (unknown.group(2), unknown.group(1), in_layer, hint or
                                                  ': BVLC Caffe has no such field (a Caffe fork\'s field?)'),
                path, line, column) from None
        enum = _UNKNOWN_ENUM.search(detail)
        if enum:
            values = _names(_enum(enum.group(1)), 'values')
            raise PrototxtError('unknown value %s for enum %s%s%s' % (
                enum.group(2), enum.group(1), in_layer, did_you_mean(enum.group(2), values) or
                '; known: %s' % ', '.join(values)), path, line, column) from None
        raise PrototxtError(detail + in_layer, path, line, column) from None
    return message


def read_text(path, message):
    """Parse the prototxt file at ``path`` into ``message`` (returned)."""
    return parse_text(decode_text(read_definition_bytes(path), path), message, path)


def message_to_text(message):
    return text_format.MessageToString(message)


def write_text(path, message):
    atomic_write_bytes(path, message_to_text(message).encode())


def read_binary(path, message):
    """Parse the binary protobuf file at ``path`` into ``message``; WeightsError if it is not one."""
    data = read_bytes(path, 'file', WeightsError) if isinstance(path, str) else path.read()
    try:
        message.ParseFromString(data)
    except _message.DecodeError as e:
        raise WeightsError('%s: not a valid binary %s (truncated or not a Caffe file: %s)' % (
            path, message.DESCRIPTOR.name, e)) from None
    return message


def write_binary(path, message, midway=None):
    """Serialize ``message`` to ``path`` atomically."""
    atomic_write_bytes(path, message.SerializeToString(), midway)


def _strip_comments(line):
    out, quote = [], None
    for ch in line:
        if quote:
            out.append(ch)
            if ch == quote:
                quote = None
        elif ch in '"\'':
            quote = ch
            out.append(ch)
        elif ch == '#':
            break
        else:
            out.append(ch)
    return ''.join(out)


def _layer_blocks(text):
    """(first line, last line, name) of each top-level ``layer``/``layers`` block, in order."""
    blocks, depth, current = [], 0, None
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = _strip_comments(raw)
        for m in re.finditer(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|[{}]|\b(layers?)\b\s*:?\s*(?=\{)'
                             r'|\bname\s*:\s*"((?:[^"\\]|\\.)*)"', line):
            tok = m.group(0)
            if m.group(1) and depth == 0:
                current = [lineno, lineno, None]
            elif tok == '{':
                depth += 1
            elif tok == '}':
                depth -= 1
                if depth == 0 and current is not None:
                    current[1] = lineno
                    blocks.append(tuple(current))
                    current = None
            elif m.group(2) is not None and depth == 1 and current is not None \
                    and current[2] is None:
                current[2] = m.group(2)
    if current is not None:
        current[1] = len(text.splitlines())
        blocks.append(tuple(current))
    return blocks


def layer_lines(text):
    """1-based line of each top-level layer block, in file order (for error messages)."""
    return [b[0] for b in _layer_blocks(text)]


def blob_to_array(blob):
    """BlobProto -> float32 ndarray (float64 if it holds double_data), with its Caffe shape.

    Uses ``shape`` if present, else the legacy num/channels/height/width.
    """
    if blob.HasField('shape'):
        shape = tuple(int(d) for d in blob.shape.dim)
    elif blob.num or blob.channels or blob.height or blob.width:
        shape = (blob.num, blob.channels, blob.height, blob.width)
    else:
        shape = (len(blob.data) or len(blob.double_data),)
    if any(d < 0 for d in shape):
        raise WeightsError('BlobProto has a negative dimension in its shape %s' % list(shape))
    if len(blob.double_data):
        values = np.asarray(blob.double_data, dtype=np.float64)
    else:
        values = np.asarray(blob.data, dtype=np.float32)
    expected = int(np.prod(shape, dtype=np.int64))
    if values.size != expected:
        raise WeightsError('BlobProto holds %d values but its shape %s needs %d'
                           % (values.size, list(shape), expected))
    return values.reshape(shape)


def array_to_blob(array, blob=None, legacy_shape=False, diff=None):
    """ndarray -> BlobProto (float data; ``legacy_shape`` writes num/channels/height/width)."""
    blob = caffe_pb2.BlobProto() if blob is None else blob
    array = np.asarray(array)
    if legacy_shape:
        dims = (1,) * (4 - array.ndim) + tuple(array.shape)
        if len(dims) != 4:
            raise ValueError('legacy BlobProto shape needs at most 4 axes, got %s' % (array.shape,))
        blob.num, blob.channels, blob.height, blob.width = dims
    else:
        blob.shape.dim.extend(int(d) for d in array.shape)
    if array.dtype == np.float64:
        blob.double_data.extend(array.ravel().tolist())
    else:
        blob.data.extend(array.astype(np.float32, copy=False).ravel().tolist())
    if diff is not None:
        blob.diff.extend(np.asarray(diff, np.float32).ravel().tolist())
    return blob


def read_blob_file(path):
    """A ``.binaryproto`` file (e.g. a mean file) -> ndarray. A file that parses but holds no
    values (an empty file, a .caffemodel, other protobufs) is refused."""
    blob = read_binary(path, caffe_pb2.BlobProto())
    if not (len(blob.data) or len(blob.double_data)):
        raise WeightsError('%s: not a BlobProto with data (empty, or another kind of file such as a '
                           '.caffemodel)' % path)
    try:
        return blob_to_array(blob)
    except WeightsError as e:
        raise WeightsError('%s: %s' % (path, e)) from None


_FLOATS = (_descriptor.FieldDescriptor.TYPE_FLOAT, _descriptor.FieldDescriptor.TYPE_DOUBLE)


def _repeated(field):
    repeated = getattr(field, 'is_repeated', None)  # protobuf >= 5; older ones have label
    return repeated if repeated is not None else field.label == field.LABEL_REPEATED


def first_non_finite(message, path=''):
    """(dotted field path, value) of the first NaN or infinite float in ``message`` (a
    parameter message such as a LayerParameter; blobs' data are not parameters and are
    skipped), or None."""
    import math
    for field, value in message.ListFields():
        is_message = field.message_type is not None
        if (is_message and field.message_type.name == 'BlobProto') or not (is_message or field.type in _FLOATS):
            continue
        repeated = _repeated(field)
        for i, item in enumerate(value if repeated else [value]):
            where = '%s%s[%d]' % (path, field.name, i) if repeated else path + field.name
            found = first_non_finite(item, where + '.') if is_message else \
                (where, item) if not math.isfinite(item) else None
            if found:
                return found
    return None
