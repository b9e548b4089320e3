"""Replacing data-source layers by Input layers of the right shape (for ``pycaffe-ft time``,
shape checking, and building nets whose datasets are not at hand).

Shapes come from, in order: explicit ``overrides`` {top name: shape}; the layer's own
parameters (MemoryData; crop_size, new_height/new_width); the well-known datasets named in
the source path (MNIST 1x28x28, its siamese pairs 2x28x28, CIFAR 3x32x32). Anything else is an error asking for the
shape, never a guess.
"""
from .errors import NetError
from .proto import caffe_pb2

__all__ = ['DATA_LAYER_TYPES', 'data_top_shapes', 'replace_data_layers']

DATA_LAYER_TYPES = ('Data', 'ImageData', 'HDF5Data', 'WindowData', 'MemoryData')


def _known_dataset(source):
    s = source.lower()
    if 'siamese' in s:  # Caffe's siamese example: image pairs stacked as 2 channels
        return (2, 28, 28)
    if 'mnist' in s:
        return (1, 28, 28)
    if 'cifar' in s:
        return (3, 32, 32)
    return None


def data_top_shapes(lp, overrides=None):
    """Shapes of the tops of data layer ``lp`` (LayerParameter); NetError if unknowable."""
    overrides = overrides or {}
    tops = list(lp.top)
    if all(t in overrides for t in tops):
        return [tuple(overrides[t]) for t in tops]
    if len(tops) == 2 and tops[0] in overrides and lp.type != 'HDF5Data':  # data and one label per item
        return [tuple(overrides[tops[0]]), tuple(overrides.get(tops[1], overrides[tops[0]][:1]))]
    tp = lp.transform_param
    channels_from_transform = 1 if tp.force_gray else (3 if tp.force_color else None)
    if lp.type == 'MemoryData':
        p = lp.memory_data_param
        batch, chw = p.batch_size, (p.channels, p.height, p.width)
    elif lp.type == 'Data':
        batch = lp.data_param.batch_size
        chw = _known_dataset(lp.data_param.source)
        if tp.crop_size:
            chw = ((chw or (channels_from_transform or 3,))[0], tp.crop_size, tp.crop_size)
    elif lp.type == 'ImageData':
        p = lp.image_data_param
        batch = p.batch_size
        channels = 3 if p.is_color else 1
        chw = (channels, p.new_height, p.new_width) if p.new_height and p.new_width else None
        if tp.crop_size:
            chw = (channels, tp.crop_size, tp.crop_size)
    elif lp.type == 'WindowData':
        batch = lp.window_data_param.batch_size
        chw = (3, tp.crop_size, tp.crop_size) if tp.crop_size else None
    else:
        batch, chw = lp.hdf5_data_param.batch_size, None
    if chw is None:
        raise NetError('cannot tell the shape of data layer "%s" (type %s) without its dataset; '
                       'give it (e.g. --input-shape %s=N,C,H,W)' % (lp.name, lp.type, tops[0]))
    shapes = [(batch,) + tuple(chw)]
    if len(tops) > 1:
        shapes.append((batch,))
    shapes += [None] * (len(tops) - len(shapes))
    result = []
    for t, shape in zip(tops, shapes):
        if t in overrides:
            shape = tuple(overrides[t])
        if shape is None:
            raise NetError('data layer "%s": no shape known for top "%s"' % (lp.name, t))
        result.append(shape)
    return result


def replace_data_layers(net_param, overrides=None):
    """Copy of ``net_param`` with each data-source layer replaced by an Input layer.

    Returns (new NetParameter, names of the replaced layers).
    """
    out = caffe_pb2.NetParameter()
    out.CopyFrom(net_param)
    replaced = []
    for lp in out.layer:
        if lp.type not in DATA_LAYER_TYPES:
            continue
        shapes = data_top_shapes(lp, overrides)
        new = caffe_pb2.LayerParameter(name=lp.name, type='Input')
        new.top.extend(lp.top)
        new.include.extend(lp.include)
        new.exclude.extend(lp.exclude)
        for shape in shapes:
            new.input_param.shape.add().dim.extend(shape)
        lp.CopyFrom(new)
        replaced.append(lp.name)
    return out, replaced
