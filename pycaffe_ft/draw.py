"""pycaffe's ``caffe.draw``: the net graph as Graphviz, drawn as pycaffe draws it (layers as
records coloured by type, in-place neuron layers green, blobs as grey octagons, a layer's edges
to its tops labelled with its batch size or output count, ``phase`` filtering and ``display_lrm``).

``get_dot(net_param, rankdir, ...)`` gives the DOT text with no dependency, and ``.dot`` or
``.raw`` files are written from it; ``draw_net`` renders other formats with pydot and Graphviz
(the optional ``draw`` extra: pip install pydot, and the graphviz package of your system), with
a clear error when they are missing.
"""
from .errors import CaffeError
from .proto import caffe_pb2

__all__ = ['DrawError', 'get_pooling_types_dict', 'get_edge_label', 'get_layer_lr_mult', 'get_layer_label',
           'choose_color_by_layertype', 'get_dot', 'get_pydot_graph', 'draw_net', 'draw_net_to_file']

LAYER_STYLE_DEFAULT = {'shape': 'record', 'fillcolor': '#6495ED', 'style': 'filled'}
NEURON_LAYER_STYLE = {'shape': 'record', 'fillcolor': '#90EE90', 'style': 'filled'}
BLOB_STYLE = {'shape': 'octagon', 'fillcolor': '#E0E0E0', 'style': 'filled'}
_LEARNED = ('Convolution', 'Deconvolution', 'InnerProduct')


class DrawError(CaffeError, ValueError):
    """A net pycaffe's draw refuses (with a ValueError, which scripts catch)."""


def get_pooling_types_dict():
    """{pooling method number: its name} (0: 'MAX', 1: 'AVE', 2: 'STOCHASTIC')."""
    return {v.number: name for name, v in caffe_pb2.PoolingParameter.PoolMethod.DESCRIPTOR.values_by_name.items()}


def get_edge_label(layer):
    """The label of a layer's edges to its tops: 'Batch N' for Data, the output count for
    Convolution, Deconvolution and InnerProduct; None for the others."""
    if layer.type == 'Data':
        return 'Batch %d' % layer.data_param.batch_size
    if layer.type in ('Convolution', 'Deconvolution'):
        return str(layer.convolution_param.num_output)
    if layer.type == 'InnerProduct':
        return str(layer.inner_product_param.num_output)
    return None


def get_layer_lr_mult(layer):
    """'lr mult: w, b' of a learned layer's weights and bias (1 where unset, the bias only with
    one), or '' for other layers."""
    if layer.type not in _LEARNED:
        return ''
    bias = (layer.convolution_param if layer.type != 'InnerProduct' else layer.inner_product_param).bias_term
    mults = [('%g' % layer.param[i].lr_mult) if len(layer.param) > i else '1' for i in range(2 if bias else 1)]
    return 'lr mult: %s' % ', '.join(mults)


def _first(values, default):
    return values[0] if len(values) else default


def get_layer_label(layer, rankdir, display_lrm=False):
    """The node's text: name and (type); a convolution's kernel size, stride and pad (their
    first values, else 1, 1 and 0) and a pooling's method, kernel size, stride and pad; words
    apart by spaces in a vertical graph (TB, BT), by lines in a horizontal one."""
    sep = ' ' if rankdir in ('TB', 'BT') else '\n'
    if layer.type in ('Convolution', 'Deconvolution'):
        p = layer.convolution_param
        label = '%s%s(%s)%skernel size: %d%sstride: %d%spad: %d' % (
            layer.name, sep, layer.type, sep, _first(p.kernel_size, 1), sep, _first(p.stride, 1), sep,
            _first(p.pad, 0))
    elif layer.type == 'Pooling':
        p = layer.pooling_param
        label = '%s%s(%s %s)%skernel size: %d%sstride: %d%spad: %d' % (
            layer.name, sep, get_pooling_types_dict()[p.pool], layer.type, sep, p.kernel_size, sep, p.stride, sep,
            p.pad)
    else:
        label = '%s%s(%s)' % (layer.name, sep, layer.type)
    mults = get_layer_lr_mult(layer) if display_lrm else ''
    return label + sep + mults if mults else label


def choose_color_by_layertype(layertype):
    return {'Convolution': '#FF5050', 'Deconvolution': '#FF5050', 'Pooling': '#FF9900',
            'InnerProduct': '#CC33FF'}.get(layertype, LAYER_STYLE_DEFAULT['fillcolor'])


def _in_phase(layer, phase):
    """pycaffe's rule: no include rules, or one of them with this phase, and no exclude rule
    with it; a layer with both kinds of rule is an error."""
    if len(layer.include) and len(layer.exclude):
        raise DrawError('layer %s has both include and exclude specified.' % layer.name)
    included = not len(layer.include) or any(rule.phase == phase for rule in layer.include)
    return included and not any(rule.phase == phase for rule in layer.exclude)


def _quote(text):
    return '"%s"' % text.replace('\\', '\\\\').replace('"', '\\"').replace('\n', '\\n')


def _attributes(**attributes):
    return '[%s]' % ', '.join('%s=%s' % (k, _quote(v)) for k, v in attributes.items())


def get_dot(caffe_net, rankdir='LR', label_edges=True, phase=None, display_lrm=False):
    """The DOT text of NetParameter ``caffe_net`` (its layers of ``phase`` only, when given)."""
    lines = ['digraph %s {' % _quote(caffe_net.name or 'Net'), '  rankdir=%s;' % rankdir]
    blobs, edges = [], []
    for i, layer in enumerate(caffe_net.layer):
        if phase is not None and not _in_phase(layer, phase):
            continue
        node = 'layer_%d' % i
        in_place = len(layer.bottom) == 1 and len(layer.top) == 1 and layer.bottom[0] == layer.top[0]
        style = NEURON_LAYER_STYLE if in_place else dict(LAYER_STYLE_DEFAULT,
                                                          fillcolor=choose_color_by_layertype(layer.type))
        lines.append('  %s %s;' % (node, _attributes(label=get_layer_label(layer, rankdir, display_lrm), **style)))
        label = (get_edge_label(layer) if label_edges else None) or ''
        edges += ['  %s -> %s;' % (_quote('blob_' + b), node) for b in layer.bottom]
        edges += ['  %s -> %s %s;' % (node, _quote('blob_' + t), _attributes(label=label)) for t in layer.top]
        blobs += [b for b in list(layer.bottom) + list(layer.top) if b not in blobs]
    lines += ['  %s %s;' % (_quote('blob_' + b), _attributes(label=b, **BLOB_STYLE)) for b in blobs]
    return '\n'.join(lines + edges + ['}']) + '\n'


def get_pydot_graph(caffe_net, rankdir, label_edges=True, phase=None, display_lrm=False):
    try:
        import pydot
    except ImportError:
        raise CaffeError('drawing a net needs pydot and Graphviz: pip install pydot (or '
                         'pip install "pycaffe-ft[draw]") and install graphviz (e.g. apt-get install '
                         'graphviz)') from None
    return pydot.graph_from_dot_data(get_dot(caffe_net, rankdir, label_edges, phase, display_lrm))[0]


def draw_net(caffe_net, rankdir, ext='png', phase=None, display_lrm=False):
    """The rendered image bytes (format ``ext``)."""
    graph = get_pydot_graph(caffe_net, rankdir, phase=phase, display_lrm=display_lrm)
    try:
        return graph.create(format=ext)
    except Exception as e:
        raise CaffeError('Graphviz could not render the graph (is the "dot" program installed? '
                         'apt-get install graphviz): %s' % e) from None


def draw_net_to_file(caffe_net, filename, rankdir='LR', phase=None, display_lrm=False):
    """Write the graph to ``filename`` in the format of its extension; ``.dot`` and ``.raw``
    (the DOT text, as Graphviz's raw format) need nothing installed."""
    ext = filename[filename.rfind('.') + 1:]
    if ext in ('dot', 'raw'):
        data = get_dot(caffe_net, rankdir, phase=phase, display_lrm=display_lrm).encode()
    else:
        data = draw_net(caffe_net, rankdir, ext, phase, display_lrm)
    with open(filename, 'wb') as f:
        f.write(data)
