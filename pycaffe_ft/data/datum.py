"""Datum <-> array, as Caffe stores images: uint8 (or float) C x H x W, channels BGR.

Encoded Datums (PNG/JPEG bytes) are decoded with Pillow and turned to BGR like OpenCV's
imdecode (IMREAD_COLOR, or IMREAD_GRAYSCALE with force_gray).
"""
import io

import numpy as np

from ..errors import DataError
from ..proto import caffe_pb2

__all__ = ['parse_datum', 'datum_to_array', 'array_to_datum', 'decode_image_bytes']


def parse_datum(value, key=None):
    datum = caffe_pb2.Datum()
    try:
        datum.ParseFromString(value)
    except Exception:
        raise DataError('record %r is not a serialized caffe.Datum' % (key,)) from None
    return datum


def decode_image_bytes(data, color=True, key=None):
    """Encoded image bytes -> uint8 (C, H, W), BGR for color (OpenCV's channel order)."""
    from PIL import Image
    try:
        img = Image.open(io.BytesIO(data))
        img.load()
    except Exception as e:
        raise DataError('record %r: cannot decode the encoded image (%s)' % (key, e)) from None
    if color:
        rgb = np.asarray(img.convert('RGB'), dtype=np.uint8)
        return np.ascontiguousarray(rgb[:, :, ::-1].transpose(2, 0, 1))
    gray = np.asarray(img.convert('L') if img.mode not in ('L', 'I;16') else img, dtype=np.uint8)
    return gray[None]


def datum_to_array(datum, key=None, force_color=False, force_gray=False):
    """(C, H, W) array of the datum's pixels: uint8 for byte data, float32 for float_data."""
    if datum.encoded:
        color = not force_gray
        return decode_image_bytes(datum.data, color=color or force_color, key=key)
    c, h, w = datum.channels, datum.height, datum.width
    if min(c, h, w) <= 0:
        raise DataError('record %r: a Datum of shape %dx%dx%d holds no pixels (channels, height and '
                        'width must be positive)' % (key, c, h, w))
    if len(datum.data):
        if len(datum.data) != c * h * w:
            raise DataError('record %r: %d data bytes for shape %dx%dx%d' % (key, len(datum.data), c, h, w))
        return np.frombuffer(datum.data, dtype=np.uint8).reshape(c, h, w)
    if len(datum.float_data) != c * h * w:
        raise DataError('record %r: %d float values for shape %dx%dx%d' % (key, len(datum.float_data), c, h, w))
    return np.asarray(datum.float_data, dtype=np.float32).reshape(c, h, w)


def array_to_datum(arr, label=None):
    """pycaffe's caffe.io.array_to_datum: uint8 -> data bytes, otherwise float_data."""
    arr = np.asarray(arr)
    if arr.ndim != 3:
        raise ValueError('Incorrect array shape: expected (channels, height, width), got %s' % (arr.shape,))
    datum = caffe_pb2.Datum(channels=arr.shape[0], height=arr.shape[1], width=arr.shape[2])
    if arr.dtype == np.uint8:
        datum.data = arr.tobytes()
    else:
        datum.float_data.extend(arr.astype(float).flat)
    if label is not None:
        datum.label = int(label)
    return datum
