"""pycaffe's ``caffe.net_spec``: write nets in Python (``caffe.NetSpec``, ``caffe.layers``,
``caffe.params``) and get a NetParameter (``to_proto()``).

``L.Convolution(bottom, kernel_size=5, num_output=20, weight_filler=dict(type='xavier'))``
makes a layer; keyword arguments go to the layer's ``<type>_param`` message when it has such a
field, otherwise to the LayerParameter itself (``param=[dict(lr_mult=1)]``, ``loss_weight``,
``include=dict(phase=caffe.TRAIN)``, any ``*_param`` given whole). ``ntop`` sets the number of
tops (0 for Silence), ``in_place=True`` reuses the bottom as top. Tops assigned to NetSpec
attributes get those names; the others are named after their layer type (``Convolution1``).
"""
import collections

from .proto import caffe_pb2

__all__ = ['NetSpec', 'Layers', 'Parameters', 'Top', 'Function', 'layers', 'params', 'to_proto',
           'param_name_dict']


def param_name_dict():
    """{layer type stem: param field stem}, e.g. 'Convolution' -> 'convolution'."""
    layer = caffe_pb2.LayerParameter()
    out = {}
    for field in layer.DESCRIPTOR.fields:
        if field.name.endswith('_param') and field.message_type is not None:
            out[field.message_type.name[:-len('Parameter')]] = field.name[:-len('_param')]
    return out


_PARAM_NAMES = param_name_dict()


def assign_proto(proto, name, value):
    """Set field ``name`` of ``proto`` from a Python value (scalars, lists, dicts, lists of dicts)."""
    field = getattr(proto, name)
    repeated = hasattr(field, 'extend')
    if repeated and not isinstance(value, (list, tuple)):
        value = [value]
    if isinstance(value, (list, tuple)):
        if value and isinstance(value[0], dict):
            for item in value:
                entry = field.add()
                for k, v in item.items():
                    assign_proto(entry, k, v)
        else:
            field.extend(value)
    elif isinstance(value, dict):
        for k, v in value.items():
            assign_proto(field, k, v)
    else:
        setattr(proto, name, value)


class Top:
    """One output of a Function (a layer)."""

    def __init__(self, fn, n):
        self.fn, self.n = fn, n

    def to_proto(self):
        return to_proto(self)

    def _to_proto(self, layers, names, autonames):
        return self.fn._to_proto(layers, names, autonames)


class Function:
    """A layer waiting to be written: type, input Tops and keyword parameters."""

    def __init__(self, type_name, inputs, params):
        for i, inp in enumerate(inputs):
            if not isinstance(inp, Top):
                raise TypeError('%s input %d is not a Top (type is %s)' % (type_name, i, type(inp)))
        self.type_name = type_name
        self.inputs = inputs
        params = dict(params)
        self.ntop = params.pop('ntop', 1)
        self.in_place = params.pop('in_place', False)
        self.params = params
        self.tops = tuple(Top(self, n) for n in range(self.ntop))

    def _auto(self, autonames):
        autonames[self.type_name] += 1
        return self.type_name + str(autonames[self.type_name])

    def _top_name(self, top, names, autonames):
        if top not in names:
            names[top] = top.fn._auto(autonames)
        return names[top]

    def _name(self, names, autonames):
        if self not in names:
            names[self] = self._top_name(self.tops[0], names, autonames) if self.ntop > 0 else self._auto(autonames)
        return names[self]

    def _to_proto(self, layers, names, autonames):
        if self in layers:
            return
        bottoms = []
        for inp in self.inputs:
            inp._to_proto(layers, names, autonames)
            bottoms.append(layers[inp.fn].top[inp.n])
        layer = caffe_pb2.LayerParameter(type=self.type_name)
        layer.bottom.extend(bottoms)
        if self.in_place:
            layer.top.extend(layer.bottom)
        else:
            layer.top.extend(self._top_name(t, names, autonames) for t in self.tops)
        layer.name = self._name(names, autonames)
        for key, value in self.params.items():
            if key.endswith('param'):
                assign_proto(layer, key, value)
                continue
            stem = _PARAM_NAMES.get(self.type_name)
            target = getattr(layer, stem + '_param') if stem else None
            if target is not None and key in target.DESCRIPTOR.fields_by_name:
                assign_proto(target, key, value)
            else:
                assign_proto(layer, key, value)
        layers[self] = layer


class NetSpec:
    """Named tops, in assignment order; ``to_proto()`` writes every layer they need."""

    def __init__(self):
        super().__setattr__('tops', collections.OrderedDict())

    def __setattr__(self, name, value):
        self.tops[name] = value

    def __getattr__(self, name):
        try:
            return self.tops[name]
        except KeyError:
            raise AttributeError(name) from None

    __setitem__ = __setattr__

    def __getitem__(self, name):
        return self.tops[name]

    def __delitem__(self, name):
        del self.tops[name]

    def keys(self):
        return list(self.tops.keys())

    def vals(self):
        return list(self.tops.values())

    def to_proto(self):
        names = {v: k for k, v in self.tops.items()}
        autonames = collections.Counter()
        layers = collections.OrderedDict()
        for top in self.tops.values():
            top._to_proto(layers, names, autonames)
        net = caffe_pb2.NetParameter()
        net.layer.extend(layers.values())
        return net


def to_proto(*tops):
    """NetParameter with the layers needed to compute ``tops``."""
    layers = collections.OrderedDict()
    autonames = collections.Counter()
    for top in tops:
        top.fn._to_proto(layers, {}, autonames)
    net = caffe_pb2.NetParameter()
    net.layer.extend(layers.values())
    return net


class Layers:
    """``L.<Type>(*bottoms, **params)`` -> Top, tuple of Tops (ntop > 1) or the Function (ntop 0)."""

    def __getattr__(self, name):
        def layer(*args, **kwargs):
            fn = Function(name, args, kwargs)
            if fn.ntop == 0:
                return fn
            return fn.tops[0] if fn.ntop == 1 else fn.tops
        return layer


class Parameters:
    """``P.Pooling.MAX`` -> caffe_pb2.PoolingParameter.MAX (enum values by message)."""

    def __getattr__(self, name):
        message = getattr(caffe_pb2, name + 'Parameter')

        class Param:
            def __getattr__(self, value_name):
                return getattr(message, value_name)
        return Param()


layers = Layers()
params = Parameters()
