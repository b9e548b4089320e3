"""Caffe's upgrade path for old net and solver definitions.

V0 nets (``layers { layer { type: "conv" ... } }``, padding layers), V1 nets (``layers {
type: CONVOLUTION }``, ``blobs_lr``, ``weight_decay``), data-transformation fields inside
data params, net-level ``input``/``input_dim``/``input_shape``, old 3-param BatchNorm
definitions and the solver's ``solver_type`` enum are all rewritten to the current format,
with the same results as Caffe's ``UpgradeNetAsNeeded`` / ``UpgradeSolverAsNeeded``.
"""
from ..errors import NetError, SolverError
from . import caffe_pb2

__all__ = ['upgrade_net', 'upgrade_solver', 'net_needs_upgrade', 'V1_TYPE_NAMES',
           'V0_TYPE_NAMES']

_V1 = caffe_pb2.V1LayerParameter

# V1 enum name -> V2 type string (Caffe's UpgradeV1LayerType).
V1_TYPE_NAMES = {
    'NONE': '', 'ABSVAL': 'AbsVal', 'ACCURACY': 'Accuracy', 'ARGMAX': 'ArgMax', 'BNLL': 'BNLL',
    'CONCAT': 'Concat', 'CONTRASTIVE_LOSS': 'ContrastiveLoss', 'CONVOLUTION': 'Convolution',
    'DECONVOLUTION': 'Deconvolution', 'DATA': 'Data', 'DROPOUT': 'Dropout',
    'DUMMY_DATA': 'DummyData', 'EUCLIDEAN_LOSS': 'EuclideanLoss', 'ELTWISE': 'Eltwise',
    'EXP': 'Exp', 'FLATTEN': 'Flatten', 'HDF5_DATA': 'HDF5Data', 'HDF5_OUTPUT': 'HDF5Output',
    'HINGE_LOSS': 'HingeLoss', 'IM2COL': 'Im2col', 'IMAGE_DATA': 'ImageData',
    'INFOGAIN_LOSS': 'InfogainLoss', 'INNER_PRODUCT': 'InnerProduct', 'LRN': 'LRN',
    'MEMORY_DATA': 'MemoryData', 'MULTINOMIAL_LOGISTIC_LOSS': 'MultinomialLogisticLoss',
    'MVN': 'MVN', 'POOLING': 'Pooling', 'POWER': 'Power', 'RELU': 'ReLU', 'SIGMOID': 'Sigmoid',
    'SIGMOID_CROSS_ENTROPY_LOSS': 'SigmoidCrossEntropyLoss', 'SILENCE': 'Silence',
    'SOFTMAX': 'Softmax', 'SOFTMAX_LOSS': 'SoftmaxWithLoss', 'SPLIT': 'Split', 'SLICE': 'Slice',
    'TANH': 'TanH', 'WINDOW_DATA': 'WindowData', 'THRESHOLD': 'Threshold',
}

# V0 type string -> V1 enum name (Caffe's UpgradeV0LayerType).
V0_TYPE_NAMES = {
    'accuracy': 'ACCURACY', 'bnll': 'BNLL', 'concat': 'CONCAT', 'conv': 'CONVOLUTION',
    'data': 'DATA', 'dropout': 'DROPOUT', 'euclidean_loss': 'EUCLIDEAN_LOSS',
    'flatten': 'FLATTEN', 'hdf5_data': 'HDF5_DATA', 'hdf5_output': 'HDF5_OUTPUT',
    'im2col': 'IM2COL', 'images': 'IMAGE_DATA', 'infogain_loss': 'INFOGAIN_LOSS',
    'innerproduct': 'INNER_PRODUCT', 'lrn': 'LRN',
    'multinomial_logistic_loss': 'MULTINOMIAL_LOGISTIC_LOSS', 'pool': 'POOLING',
    'relu': 'RELU', 'sigmoid': 'SIGMOID', 'softmax': 'SOFTMAX', 'softmax_loss': 'SOFTMAX_LOSS',
    'split': 'SPLIT', 'tanh': 'TANH', 'window_data': 'WINDOW_DATA',
}

# V0 field -> {v0 type: (param field of V1LayerParameter, field there)}.
_V0_FIELDS = {
    'num_output': {'conv': ('convolution_param', 'num_output'),
                   'innerproduct': ('inner_product_param', 'num_output')},
    'biasterm': {'conv': ('convolution_param', 'bias_term'),
                 'innerproduct': ('inner_product_param', 'bias_term')},
    'weight_filler': {'conv': ('convolution_param', 'weight_filler'),
                      'innerproduct': ('inner_product_param', 'weight_filler')},
    'bias_filler': {'conv': ('convolution_param', 'bias_filler'),
                    'innerproduct': ('inner_product_param', 'bias_filler')},
    'pad': {'conv': ('convolution_param', 'pad'), 'pool': ('pooling_param', 'pad')},
    'kernelsize': {'conv': ('convolution_param', 'kernel_size'),
                   'pool': ('pooling_param', 'kernel_size')},
    'group': {'conv': ('convolution_param', 'group')},
    'stride': {'conv': ('convolution_param', 'stride'),
               'pool': ('pooling_param', 'stride')},
    'pool': {'pool': ('pooling_param', 'pool')},
    'dropout_ratio': {'dropout': ('dropout_param', 'dropout_ratio')},
    'local_size': {'lrn': ('lrn_param', 'local_size')},
    'alpha': {'lrn': ('lrn_param', 'alpha')},
    'beta': {'lrn': ('lrn_param', 'beta')},
    'k': {'lrn': ('lrn_param', 'k')},
    'source': {'data': ('data_param', 'source'),
               'hdf5_data': ('hdf5_data_param', 'source'),
               'images': ('image_data_param', 'source'),
               'window_data': ('window_data_param', 'source'),
               'infogain_loss': ('infogain_loss_param', 'source')},
    'batchsize': {'data': ('data_param', 'batch_size'),
                  'hdf5_data': ('hdf5_data_param', 'batch_size'),
                  'images': ('image_data_param', 'batch_size'),
                  'window_data': ('window_data_param', 'batch_size')},
    'rand_skip': {'data': ('data_param', 'rand_skip'),
                  'images': ('image_data_param', 'rand_skip')},
    'shuffle_images': {'images': ('image_data_param', 'shuffle')},
    'new_height': {'images': ('image_data_param', 'new_height')},
    'new_width': {'images': ('image_data_param', 'new_width')},
    'concat_dim': {'concat': ('concat_param', 'concat_dim')},
    'det_fg_threshold': {'window_data': ('window_data_param', 'fg_threshold')},
    'det_bg_threshold': {'window_data': ('window_data_param', 'bg_threshold')},
    'det_fg_fraction': {'window_data': ('window_data_param', 'fg_fraction')},
    'det_context_pad': {'window_data': ('window_data_param', 'context_pad')},
    'det_crop_mode': {'window_data': ('window_data_param', 'crop_mode')},
    'hdf5_output_param': {'hdf5_output': ('hdf5_output_param', None)},
}
_V0_TRANSFORM = {'scale': 'scale', 'meanfile': 'mean_file', 'cropsize': 'crop_size',
                 'mirror': 'mirror'}
_TRANSFORM_FIELDS = ('scale', 'mean_file', 'crop_size', 'mirror')
_DATA_PARAM_OF = {'DATA': 'data_param', 'IMAGE_DATA': 'image_data_param',
                  'WINDOW_DATA': 'window_data_param'}


def _upgrade_v0_padding(net, where):
    """Fold V0 ``padding`` layers into the pad of the conv/pool layer that reads them."""
    out = caffe_pb2.NetParameter()
    out.CopyFrom(net)
    del out.layers[:]
    last_top = {name: -1 for name in net.input}
    for i, conn in enumerate(net.layers):
        v0 = conn.layer
        if v0.type != 'padding':
            out.layers.add().CopyFrom(conn)
        for j, blob in enumerate(conn.bottom):
            if blob not in last_top:
                raise NetError('%s: unknown blob input "%s" to V0 layer "%s"' % (where, blob, v0.name))
            src = last_top[blob]
            if src == -1:
                continue
            source = net.layers[src]
            if source.layer.type == 'padding':
                if v0.type not in ('conv', 'pool'):
                    raise NetError('%s: padding layer "%s" feeds layer "%s" of type "%s"; only '
                                   'conv and pool layers can absorb padding'
                                   % (where, source.layer.name, v0.name, v0.type))
                if len(conn.bottom) != 1 or len(source.bottom) != 1 or len(source.top) != 1:
                    raise NetError('%s: padding layer "%s" must have one bottom and one top and '
                                   'feed a single-bottom layer' % (where, source.layer.name))
                target = out.layers[len(out.layers) - 1]
                target.layer.pad = source.layer.pad
                target.bottom[j] = source.bottom[0]
        for blob in conn.top:
            last_top[blob] = i
    return out


def _upgrade_v0_layer(conn, where):
    v1 = _V1()
    v1.bottom.extend(conn.bottom)
    v1.top.extend(conn.top)
    if not conn.HasField('layer'):
        return v1
    v0 = conn.layer
    if v0.HasField('name'):
        v1.name = v0.name
    t = v0.type
    if v0.HasField('type'):
        if t not in V0_TYPE_NAMES:
            raise NetError('%s: unknown V0 layer type "%s" (layer "%s"); known: %s'
                           % (where, t, v0.name, ', '.join(sorted(V0_TYPE_NAMES))))
        v1.type = _V1.LayerType.Value(V0_TYPE_NAMES[t])
    v1.blobs.extend(v0.blobs)
    v1.blobs_lr.extend(v0.blobs_lr)
    v1.weight_decay.extend(v0.weight_decay)
    for field, targets in _V0_FIELDS.items():
        if not v0.HasField(field):
            continue
        if t not in targets:
            raise NetError('%s: V0 layer "%s" of type "%s" has parameter "%s", which that type '
                           'does not take' % (where, v0.name, t, field))
        param_name, sub = targets[t]
        value = getattr(v0, field)
        param = getattr(v1, param_name)
        if sub is None:
            param.CopyFrom(value)
        elif field in ('weight_filler', 'bias_filler'):
            getattr(param, sub).CopyFrom(value)
        elif hasattr(getattr(param, sub), 'append'):  # repeated in ConvolutionParameter
            getattr(param, sub).append(value)
        else:
            setattr(param, sub, value)
    for v0_field, field in _V0_TRANSFORM.items():
        if v0.HasField(v0_field):
            setattr(v1.transform_param, field, getattr(v0, v0_field))
    return v1


def _upgrade_data_transform(net):
    for layer in net.layers:
        name = _V1.LayerType.Name(layer.type) if layer.HasField('type') else None
        if name not in _DATA_PARAM_OF:
            continue
        param = getattr(layer, _DATA_PARAM_OF[name])
        for field in _TRANSFORM_FIELDS:
            if param.HasField(field):
                setattr(layer.transform_param, field, getattr(param, field))
                param.ClearField(field)


_V1_COPIED_PARAMS = [f.name for f in _V1.DESCRIPTOR.fields
                     if f.name.endswith('_param') and f.message_type is not None]


def _upgrade_v1_layer(v1, where):
    layer = caffe_pb2.LayerParameter()
    layer.bottom.extend(v1.bottom)
    layer.top.extend(v1.top)
    if v1.HasField('name'):
        layer.name = v1.name
    layer.include.extend(v1.include)
    layer.exclude.extend(v1.exclude)
    if v1.HasField('type'):
        layer.type = V1_TYPE_NAMES[_V1.LayerType.Name(v1.type)]
    layer.blobs.extend(v1.blobs)

    def param(i):
        while len(layer.param) <= i:
            layer.param.add()
        return layer.param[i]
    for i, name in enumerate(v1.param):
        param(i).name = name
    for i, mode in enumerate(v1.blob_share_mode):
        param(i).share_mode = mode  # STRICT/PERMISSIVE have the same numbers in both enums
    for i, lr in enumerate(v1.blobs_lr):
        param(i).lr_mult = lr
    for i, decay in enumerate(v1.weight_decay):
        param(i).decay_mult = decay
    layer.loss_weight.extend(v1.loss_weight)
    for name in _V1_COPIED_PARAMS:
        if v1.HasField(name) and name in layer.DESCRIPTOR.fields_by_name:
            getattr(layer, name).CopyFrom(getattr(v1, name))
    return layer


def _upgrade_input(net):
    has_shape, has_dim = len(net.input_shape) > 0, len(net.input_dim) > 0
    if has_shape or has_dim:
        layer = caffe_pb2.LayerParameter(name='input', type='Input')
        for i, top in enumerate(net.input):
            layer.top.append(top)
            shape = layer.input_param.shape.add()
            if has_shape:
                if i >= len(net.input_shape):
                    raise NetError('net "%s": %d inputs but only %d input_shape entries'
                                   % (net.name, len(net.input), len(net.input_shape)))
                shape.CopyFrom(net.input_shape[i])
            else:
                dims = list(net.input_dim[4 * i:4 * i + 4])
                if len(dims) != 4:
                    raise NetError('net "%s": input "%s" needs 4 input_dim values, found %d'
                                   % (net.name, top, len(dims)))
                shape.dim.extend(dims)
        rest = [caffe_pb2.LayerParameter() for _ in net.layer]
        for copy, old in zip(rest, net.layer):
            copy.CopyFrom(old)
        del net.layer[:]
        net.layer.extend([layer] + rest)
    net.ClearField('input')
    net.ClearField('input_shape')
    net.ClearField('input_dim')


def net_needs_upgrade(net):
    return (len(net.layers) > 0 or len(net.input) > 0 or len(net.input_dim) > 0
            or len(net.input_shape) > 0
            or any(l.type == 'BatchNorm' and len(l.param) == 3 for l in net.layer))


def upgrade_net(net, where='<net>'):
    """Upgrade ``net`` (a NetParameter) in place to the current format; returns it."""
    if any(l.HasField('layer') for l in net.layers):
        padded = _upgrade_v0_padding(net, where)
        net.ClearField('layers')
        for conn in padded.layers:
            net.layers.add().CopyFrom(_upgrade_v0_layer(conn, where))
    _upgrade_data_transform(net)
    if len(net.layers) > 0:
        if len(net.layer) > 0:
            raise NetError('%s: the net mixes old-style "layers" and new-style "layer" '
                           'definitions; use one of them' % where)
        upgraded = [_upgrade_v1_layer(l, where) for l in net.layers]
        net.ClearField('layers')
        net.layer.extend(upgraded)
    _upgrade_input(net)
    for layer in net.layer:
        if layer.type == 'BatchNorm' and len(layer.param) == 3:
            for spec in layer.param:
                spec.lr_mult = 0.0
                spec.decay_mult = 0.0
    return net


_SOLVER_TYPES = {'SGD': 'SGD', 'NESTEROV': 'Nesterov', 'ADAGRAD': 'AdaGrad',
                 'RMSPROP': 'RMSProp', 'ADADELTA': 'AdaDelta', 'ADAM': 'Adam'}


def upgrade_solver(solver, where='<solver>'):
    """Upgrade a SolverParameter in place (``solver_type`` enum -> ``type`` string)."""
    if solver.HasField('solver_type'):
        if solver.HasField('type'):
            raise SolverError('%s: both the old solver_type (enum) and the new type (string) '
                              'are given; keep only "type"' % where)
        solver.type = _SOLVER_TYPES[caffe_pb2.SolverParameter.SolverType.Name(solver.solver_type)]
        solver.ClearField('solver_type')
    return solver
