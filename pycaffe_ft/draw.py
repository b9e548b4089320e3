"""pycaffe's ``caffe.draw``: the net graph as Graphviz (layers as boxes, blobs as octagons).

``get_dot(net_param, rankdir)`` gives DOT text with no dependency; ``draw_net`` renders it with
pydot and Graphviz (the optional ``draw`` extra: pip install pydot, and the graphviz package of
your system), with a clear error when they are missing.
"""
from .errors import CaffeError
from .proto import caffe_pb2

__all__ = ['get_dot', 'get_pydot_graph', 'draw_net', 'draw_net_to_file']


def _quote(s):
    return '"%s"' % s.replace('"', '\\"')


def _layer_label(layer, rankdir):
    sep = ' ' if rankdir in ('TB', 'BT') else '\\n'
    label = '%s%s(%s)' % (layer.name, sep, layer.type)
    if layer.type in ('Convolution', 'Deconvolution'):
        p = layer.convolution_param
        k = p.kernel_size[0] if len(p.kernel_size) else p.kernel_h
        s = p.stride[0] if len(p.stride) else 1
        pad = p.pad[0] if len(p.pad) else 0
        label += '%skernel size: %d%sstride: %d%spad: %d' % (sep, k, sep, s, sep, pad)
    elif layer.type == 'Pooling':
        p = layer.pooling_param
        label += '%spool: %s%skernel size: %d%sstride: %d' % (
            sep, caffe_pb2.PoolingParameter.PoolMethod.Name(p.pool), sep, p.kernel_size, sep, p.stride)
    return label


def get_dot(net_param, rankdir='LR', label_edges=True, phase=None):
    """DOT text of ``net_param`` (layers filtered by ``phase`` if given)."""
    lines = ['digraph %s {' % _quote(net_param.name or 'net'), '  rankdir=%s;' % rankdir]
    blobs = set()
    for i, layer in enumerate(net_param.layer):
        if phase is not None:
            included = not len(layer.include) or any(r.phase == phase for r in layer.include if r.HasField('phase'))
            if any(r.HasField('phase') and r.phase == phase for r in layer.exclude) or not included:
                continue
        node = 'layer_%d' % i
        lines.append('  %s [label=%s, shape=record, style=filled, fillcolor="#6495ED"];'
                     % (node, _quote(_layer_label(layer, rankdir))))
        for b in layer.bottom:
            blobs.add(b)
            lines.append('  %s -> %s;' % (_quote('blob_' + b), node))
        for t in layer.top:
            blobs.add(t)
            lines.append('  %s -> %s;' % (node, _quote('blob_' + t)))
    for b in sorted(blobs):
        lines.append('  %s [label=%s, shape=octagon, style=filled, fillcolor="#E0E0E0"];' % (_quote('blob_' + b), _quote(b)))
    lines.append('}')
    return '\n'.join(lines) + '\n'


def get_pydot_graph(caffe_net, rankdir, label_edges=True, phase=None):
    try:
        import pydot
    except ImportError:
        raise CaffeError('drawing a net needs pydot and Graphviz: pip install pydot (or '
                         'pip install "pycaffe-ft[draw]") and install graphviz (e.g. apt-get install '
                         'graphviz)') from None
    graphs = pydot.graph_from_dot_data(get_dot(caffe_net, rankdir, label_edges, phase))
    return graphs[0]


def draw_net(caffe_net, rankdir, ext='png', phase=None):
    """The rendered image bytes (format ``ext``)."""
    graph = get_pydot_graph(caffe_net, rankdir, phase=phase)
    try:
        return graph.create(format=ext)
    except Exception as e:
        raise CaffeError('Graphviz could not render the graph (is the "dot" program installed? '
                         'apt-get install graphviz): %s' % e) from None


def draw_net_to_file(caffe_net, filename, rankdir='LR', phase=None):
    """Write the graph to ``filename``; a ``.dot`` file needs nothing installed."""
    ext = filename[filename.rfind('.') + 1:]
    if ext == 'dot':
        data = get_dot(caffe_net, rankdir, phase=phase).encode()
    else:
        data = draw_net(caffe_net, rankdir, ext, phase)
    with open(filename, 'wb') as f:
        f.write(data)
