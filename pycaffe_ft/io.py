"""pycaffe's ``caffe.io``: BlobProto/Datum conversion, image loading and resizing, oversampling
and the input Transformer, with pycaffe's argument orders and conventions (images are
H x W x K float arrays in [0, 1], RGB; net inputs are K x H x W)."""
import numpy as np

from .data.datum import array_to_datum as _array_to_datum
from .data.datum import datum_to_array as _datum_to_array
from .proto import caffe_pb2

__all__ = ['blobproto_to_array', 'array_to_blobproto', 'arraylist_to_blobprotovector_str',
           'blobprotovector_str_to_arraylist', 'array_to_datum', 'datum_to_array', 'Transformer',
           'load_image', 'resize_image', 'oversample']


# -- protos -----------------------------------------------------------------------------------
def blobproto_to_array(blob, return_diff=False):
    """BlobProto -> ndarray: legacy (num, channels, height, width) if any of those is set, else
    its ``shape``. ``return_diff`` gives the diff instead of the data."""
    values = np.array(blob.diff if return_diff else blob.data)
    legacy = any(blob.HasField(f) for f in ('num', 'channels', 'height', 'width'))
    if legacy:
        return values.reshape(blob.num, blob.channels, blob.height, blob.width)
    return values.reshape(tuple(blob.shape.dim))


def array_to_blobproto(arr, diff=None):
    """ndarray (and optional diff of the same shape) -> BlobProto with ``shape``."""
    arr = np.asarray(arr)
    blob = caffe_pb2.BlobProto()
    blob.shape.dim.extend(arr.shape)
    blob.data.extend(arr.astype(float).flat)
    if diff is not None:
        blob.diff.extend(np.asarray(diff).astype(float).flat)
    return blob


def arraylist_to_blobprotovector_str(arraylist):
    vec = caffe_pb2.BlobProtoVector()
    vec.blobs.extend([array_to_blobproto(a) for a in arraylist])
    return vec.SerializeToString()


def blobprotovector_str_to_arraylist(s):
    vec = caffe_pb2.BlobProtoVector()
    vec.ParseFromString(s)
    return [blobproto_to_array(b) for b in vec.blobs]


def array_to_datum(arr, label=None):
    """A 3-axis (channels, height, width) array -> Datum: uint8 as bytes, others as float_data."""
    return _array_to_datum(arr, label)


def datum_to_array(datum):
    """Datum -> (channels, height, width) array (uint8 data or float_data; encoded ones decoded)."""
    return _datum_to_array(datum)


# -- images -----------------------------------------------------------------------------------
def load_image(filename, color=True):
    """Image file -> float32 H x W x 3 (RGB) or H x W x 1 in [0, 1]."""
    from PIL import Image
    with Image.open(filename) as img:
        img.load()
        rgb = np.asarray(img.convert('RGB'), dtype=np.float32) / 255.0
    if color:
        return rgb
    # luminance as scikit-image's rgb2gray (pycaffe loads grey images with skimage)
    gray = rgb @ np.array([0.2125, 0.7154, 0.0721], np.float32)
    return gray[:, :, np.newaxis].astype(np.float32)


def _interp_axis(size_in, size_out):
    """Source coordinates (half-pixel centres) of each output pixel, with neighbour weights."""
    pos = (np.arange(size_out) + 0.5) * (size_in / float(size_out)) - 0.5
    pos = np.clip(pos, 0, size_in - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, size_in - 1)
    return lo, hi, (pos - lo).astype(np.float32)


def resize_image(im, new_dims, interp_order=1):
    """Resize H x W x K ``im`` to ``new_dims`` (height, width): bilinear (order 1) or nearest
    (order 0); a constant image stays constant."""
    im = np.asarray(im, dtype=np.float32)
    new_dims = tuple(int(d) for d in new_dims)
    if im.ndim != 3:
        raise ValueError('resize_image expects an H x W x K image, got shape %s' % (im.shape,))
    if im.max() == im.min():
        return np.full(new_dims + (im.shape[-1],), im.min(), np.float32)
    if interp_order == 0:
        rows = np.minimum((np.arange(new_dims[0]) * im.shape[0] / new_dims[0]).astype(int), im.shape[0] - 1)
        cols = np.minimum((np.arange(new_dims[1]) * im.shape[1] / new_dims[1]).astype(int), im.shape[1] - 1)
        return im[rows][:, cols].astype(np.float32)
    r0, r1, rw = _interp_axis(im.shape[0], new_dims[0])
    c0, c1, cw = _interp_axis(im.shape[1], new_dims[1])
    top = im[r0][:, c0] * (1 - cw)[None, :, None] + im[r0][:, c1] * cw[None, :, None]
    bottom = im[r1][:, c0] * (1 - cw)[None, :, None] + im[r1][:, c1] * cw[None, :, None]
    return (top * (1 - rw)[:, None, None] + bottom * rw[:, None, None]).astype(np.float32)


def oversample(images, crop_dims):
    """10 crops per image: the 4 corners and the centre, and their mirrors
    (N x H x W x K -> 10N x h x w x K)."""
    im_shape = np.array(images[0].shape)
    crop_dims = np.array(crop_dims)
    center = im_shape[:2] / 2.0
    boxes = []
    for i in (0, im_shape[0] - crop_dims[0]):
        for j in (0, im_shape[1] - crop_dims[1]):
            boxes.append((i, j, i + crop_dims[0], j + crop_dims[1]))
    c = np.concatenate([center - crop_dims / 2.0, center + crop_dims / 2.0]).astype(int)
    boxes.append(tuple(c))
    crops = np.empty((10 * len(images), crop_dims[0], crop_dims[1], im_shape[-1]), dtype=np.float32)
    k = 0
    for im in images:
        for (y0, x0, y1, x1) in boxes:
            crops[k] = im[y0:y1, x0:x1, :]
            k += 1
        crops[k:k + 5] = crops[k - 5:k, :, ::-1, :]
        k += 5
    return crops


class Transformer:
    """Turns H x W x K images into net inputs (and back) for inputs {name: blob shape}.

    preprocess: resize to the input size, transpose, swap channels, raw scale, subtract the
    mean, input scale, in that order; deprocess undoes it.
    """

    def __init__(self, inputs):
        self.inputs = dict(inputs)
        self.transpose, self.channel_swap, self.raw_scale = {}, {}, {}
        self.mean, self.input_scale = {}, {}

    def _check(self, in_):
        if in_ not in self.inputs:
            raise Exception('{} is not one of the net inputs: {}'.format(in_, self.inputs))

    def set_transpose(self, in_, order):
        self._check(in_)
        if len(order) != len(self.inputs[in_]) - 1:
            raise Exception('Transpose order needs to have the same number of dimensions as the input.')
        self.transpose[in_] = order

    def set_channel_swap(self, in_, order):
        self._check(in_)
        if len(order) != self.inputs[in_][1]:
            raise Exception('Channel swap needs to have the same number of dimensions as the input channels.')
        self.channel_swap[in_] = order

    def set_raw_scale(self, in_, scale):
        self._check(in_)
        self.raw_scale[in_] = scale

    def set_mean(self, in_, mean):
        self._check(in_)
        mean = np.asarray(mean)
        if mean.ndim == 1:
            if mean.shape[0] != self.inputs[in_][1]:
                raise ValueError('Mean channels incompatible with input.')
            mean = mean[:, np.newaxis, np.newaxis]
        else:
            shape = mean.shape if mean.ndim != 2 else (1,) + mean.shape
            if len(shape) != 3:
                raise ValueError('Mean shape invalid')
            if tuple(shape) != tuple(self.inputs[in_][1:]):
                raise ValueError('Mean shape incompatible with input shape.')
        self.mean[in_] = mean

    def set_input_scale(self, in_, scale):
        self._check(in_)
        self.input_scale[in_] = scale

    def preprocess(self, in_, data):
        self._check(in_)
        x = np.asarray(data).astype(np.float32, copy=False)
        in_dims = tuple(self.inputs[in_][2:])
        if x.shape[:2] != in_dims:
            x = resize_image(x, in_dims)
        if in_ in self.transpose:
            x = x.transpose(self.transpose[in_])
        if in_ in self.channel_swap:
            x = x[self.channel_swap[in_], :, :]
        if in_ in self.raw_scale:
            x = x * self.raw_scale[in_]
        if in_ in self.mean:
            x = x - self.mean[in_]
        if in_ in self.input_scale:
            x = x * self.input_scale[in_]
        return x.astype(np.float32, copy=False)

    def deprocess(self, in_, data):
        self._check(in_)
        x = np.array(data, copy=True).squeeze()
        if in_ in self.input_scale:
            x = x / self.input_scale[in_]
        if in_ in self.mean:
            x = x + self.mean[in_]
        if in_ in self.raw_scale:
            x = x / self.raw_scale[in_]
        if in_ in self.channel_swap:
            x = x[np.argsort(self.channel_swap[in_]), :, :]
        if in_ in self.transpose:
            x = x.transpose(np.argsort(self.transpose[in_]))
        return x
