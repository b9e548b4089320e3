"""Export a built Net to ONNX, layer by layer with Caffe's exact semantics.

Graph inputs are the net's input blobs (Input and DummyData tops; data layers are turned into
Input layers first by :func:`build_for_export` given their shapes); outputs are the net's output blobs; both keep the Caffe blob
names. In-place layers get fresh tensor names (ONNX is single-assignment); an output whose last
writer was in place is renamed back with an Identity. Weights become initializers.

Exact where ONNX's own defaults differ from Caffe's: pooling gets explicit begin/end pads (or a
Slice) that reproduce Caffe's output size, including its ceil rounding and the rule that the
last window must start inside the padded input; AVE pooling is corrected by a constant divisor
tensor to Caffe's divisor (the window clipped to the padded input); BatchNorm uses Caffe's
moving-average factor and is folded with a following one-bottom Scale only when that Scale is
its sole reader. A layer without a faithful mapping raises :class:`ExportError` naming the
layer and why. ``onnx`` is an optional dependency (``pip install -e '.[onnx]'``).
"""
import math

import numpy as np

from .errors import CaffeError
from .proto import caffe_pb2

__all__ = ['ExportError', 'export_onnx', 'build_for_export', 'verify', 'DEFAULT_OPSET']

DEFAULT_OPSET = 17
_P = caffe_pb2.PoolingParameter
_E = caffe_pb2.EltwiseParameter
_R = caffe_pb2.ReductionParameter
_LRN = caffe_pb2.LRNParameter

_REFUSED = {
    'Python': 'a Python layer runs arbitrary code',
    'Data': 'a data layer reads a database (give --input-shape NAME=N,C,H,W to make its tops inputs)',
    'ImageData': 'a data layer reads files (give --input-shape to make its tops inputs)',
    'WindowData': 'a data layer reads files (give --input-shape to make its tops inputs)',
    'HDF5Data': 'a data layer reads files (give --input-shape to make its tops inputs)',
    'MemoryData': 'a data layer is fed from Python (give --input-shape to make its tops inputs)',
    'HDF5Output': 'it writes files',
    'RNN': 'recurrent layers are not unrolled by the exporter',
    'LSTM': 'recurrent layers are not unrolled by the exporter',
    'LSTMUnit': 'recurrent layers are not unrolled by the exporter',
    'Accuracy': 'it compares with labels (an evaluation layer, not part of a deployed model)',
    'Silence': 'it has no outputs',
    'BatchReindex': 'it gathers by a runtime index blob with Caffe-specific checks',
    'Filter': 'its output size depends on the data',
    'Im2col': 'ONNX has no im2col operator (export the Convolution it feeds instead)',
}


class ExportError(CaffeError):
    """The net cannot be exported faithfully (names the layer and the reason)."""


def _onnx():
    try:
        import onnx
        from onnx import TensorProto, helper, numpy_helper
    except ImportError:
        raise ExportError('exporting to ONNX needs the onnx package: pip install onnx (or pip install '
                          '"pycaffe-ft[onnx]")') from None
    return onnx, TensorProto, helper, numpy_helper


class _Graph:
    """Nodes, initializers and the Caffe-blob -> tensor-name map being built."""

    def __init__(self, helper, numpy_helper):
        self.helper, self.numpy_helper = helper, numpy_helper
        self.nodes, self.initializers, self.names, self.node_names = [], [], set(), set()
        self.current = {}  # Caffe blob name -> the ONNX tensor holding its latest value

    def fresh(self, base, taken=None):
        taken = self.names if taken is None else taken
        name, k = base, 1
        while name in taken:
            k += 1
            name = '%s__%d' % (base, k)
        taken.add(name)
        return name

    def const(self, base, array, dtype=np.float32):
        name = self.fresh(base)
        self.initializers.append(self.numpy_helper.from_array(np.asarray(array, dtype=dtype), name))
        return name

    def node(self, op, inputs, outputs=None, name=None, **attrs):
        outputs = outputs or [self.fresh(name or op)]
        self.nodes.append(self.helper.make_node(op, list(inputs), list(outputs), name=self.fresh(name or op, self.node_names),
                                                **attrs))
        return outputs if len(outputs) > 1 else outputs[0]


class _Exporter:
    def __init__(self, net, opset, dynamic_batch):
        self.onnx, self.TensorProto, helper, numpy_helper = _onnx()
        self.net, self.opset, self.dynamic_batch = net, opset, dynamic_batch
        self.g = _Graph(helper, numpy_helper)
        self.graph_inputs = []
        self.readers = {}  # blob id -> number of layers reading it
        for ids in net.bottom_ids:
            for bid in ids:
                self.readers[bid] = self.readers.get(bid, 0) + 1
        self.folded = set()  # indices of Scale layers folded into the BatchNorm before them

    # -- helpers ------------------------------------------------------------------------------
    def shape(self, bid):
        return list(self.net._blob_list[bid].shape)

    def target_shape(self, shape):
        """A Reshape target for a static shape: with a dynamic batch, 0 keeps the batch axis."""
        shape = list(shape)
        if self.dynamic_batch and shape:
            shape[0] = 0
        return self.g.const('shape', shape, np.int64)

    def reshape(self, x, shape, name):
        return self.g.node('Reshape', [x, self.target_shape(shape)], name=name)

    def broadcast_param(self, array, x_ndim, axis, name):
        """A param blob laid out along axes [axis, axis + array.ndim) of an x_ndim tensor."""
        array = np.asarray(array, np.float32)
        shape = list(array.shape) + [1] * (x_ndim - axis - array.ndim)
        return self.g.const(name, array.reshape(shape) if shape else array)

    def tensor_input(self, bid):
        name = self.net._blob_names[bid]
        shape = self.shape(bid)
        dims = ['N'] + shape[1:] if self.dynamic_batch and shape else shape
        self.graph_inputs.append(self.g.helper.make_tensor_value_info(name, self.TensorProto.FLOAT, dims))
        self.g.names.add(name)
        self.g.current[name] = name

    def refuse(self, i, why):
        layer = self.net.layers[i]
        raise ExportError('layer "%s" (type %s) cannot be exported to ONNX: %s'
                          % (self.net._layer_names[i], layer.type, why))

    # -- the walk -------------------------------------------------------------------------------
    def run(self):
        net = self.net
        self.g.names.update(n for n in net.outputs if n not in net.inputs)  # kept for the outputs
        for i, layer in enumerate(net.layers):
            name = net._layer_names[i]
            if i in self.folded:
                self.alias(i)
                continue
            if layer.type in ('Input', 'DummyData'):
                for bid in net.top_ids[i]:
                    self.tensor_input(bid)
                continue
            if layer.type in _REFUSED:
                self.refuse(i, _REFUSED[layer.type])
            if layer.type.endswith('Loss'):
                self.refuse(i, 'a loss layer needs labels and is not part of a deployed model')
            handler = getattr(self, 'op_' + layer.type, None)
            if handler is None:
                self.refuse(i, 'no ONNX mapping for this layer type')
            bottoms = [self.g.current[net._blob_names[b]] for b in net.bottom_ids[i]]
            outs = handler(i, layer, layer.layer_param, bottoms, name)
            outs = outs if isinstance(outs, list) else [outs]
            for bid, tensor in zip(net.top_ids[i], outs):
                self.g.current[net._blob_names[bid]] = tensor
        outputs = []
        for name in net.outputs:
            bid = net._blob_names.index(name)
            tensor = self.g.current[name]
            if tensor != name:
                if any(v.name == name for v in self.graph_inputs):
                    raise ExportError('blob "%s" is both an input and an output of the net: ONNX needs two '
                                      'names' % name)
                self.rename(tensor, name)
            shape = self.shape(bid)
            dims = ['N'] + shape[1:] if self.dynamic_batch and shape else shape
            outputs.append(self.g.helper.make_tensor_value_info(name, self.TensorProto.FLOAT, dims))
        used = {name for node in self.g.nodes for name in node.input} | set(net.outputs)
        inputs = [v for v in self.graph_inputs if v.name in used]  # e.g. a label no layer reads
        graph = self.g.helper.make_graph(self.g.nodes, net.name or 'caffe_net', inputs, outputs,
                                         self.g.initializers)
        model = self.g.helper.make_model(graph, producer_name='pycaffe-ft',
                                         opset_imports=[self.g.helper.make_opsetid('', self.opset)])
        model.ir_version = min(model.ir_version, 9)
        return model

    def rename(self, old, new):
        """Call tensor ``old`` ``new`` everywhere (output names were kept free for this)."""
        for node in self.g.nodes:
            for field in (node.input, node.output):
                for k, value in enumerate(field):
                    if value == old:
                        field[k] = new
        for key, value in self.g.current.items():
            if value == old:
                self.g.current[key] = new

    def alias(self, i):
        """A layer already computed by the one before it (a Scale folded into BatchNorm)."""
        net = self.net
        src = self.g.current[net._blob_names[net.bottom_ids[i][0]]]
        self.g.current[net._blob_names[net.top_ids[i][0]]] = src

    # -- layers -------------------------------------------------------------------------------
    def op_Split(self, i, layer, lp, x, name):
        return [self.g.node('Identity', [x[0]], name=name) for _ in self.net.top_ids[i]]

    def op_Dropout(self, i, layer, lp, x, name):
        return self.g.node('Identity', [x[0]], name=name)

    def _conv_attrs(self, layer):
        kh, kw = layer.kernel
        ph, pw = layer.pad
        return dict(kernel_shape=[kh, kw], strides=list(layer.stride), pads=[ph, pw, ph, pw],
                    dilations=list(layer.dilation), group=layer.group)

    def op_Convolution(self, i, layer, lp, x, name):
        inputs = [x[0], self.g.const(name + '_W', layer.blobs[0].data)]
        if layer.bias_term:
            inputs.append(self.g.const(name + '_b', layer.blobs[1].data))
        return self.g.node('Conv', inputs, name=name, **self._conv_attrs(layer))

    def op_Deconvolution(self, i, layer, lp, x, name):
        inputs = [x[0], self.g.const(name + '_W', layer.blobs[0].data)]
        if layer.bias_term:
            inputs.append(self.g.const(name + '_b', layer.blobs[1].data))
        return self.g.node('ConvTranspose', inputs, name=name, **self._conv_attrs(layer))

    def op_InnerProduct(self, i, layer, lp, x, name):
        p = lp.inner_product_param
        in_shape = self.shape(self.net.bottom_ids[i][0])
        axis = p.axis % len(in_shape)
        k = int(np.prod(in_shape[axis:]))
        flat = x[0] if (axis, len(in_shape)) == (1, 2) else \
            self.g.node('Reshape', [x[0], self.g.const(name + '_2d', [-1, k], np.int64)], name=name + '_flatten')
        w = layer.blobs[0].data
        inputs = [flat, self.g.const(name + '_W', w)]
        if layer.bias_term:
            inputs.append(self.g.const(name + '_b', layer.blobs[1].data))
        y = self.g.node('Gemm', inputs, name=name, transB=0 if p.transpose else 1)
        out_shape = self.shape(self.net.top_ids[i][0])
        if len(out_shape) != 2:
            y = self.reshape(y, out_shape, name + '_unflatten')
        return y

    def op_Pooling(self, i, layer, lp, x, name):
        return self._pool(i, layer, x[0], self.shape(self.net.bottom_ids[i][0]), name)

    def _pool(self, i, layer, src, in_shape, name):
        """A Pooling layer (built, so its geometry and output size are Caffe's) over ``src``."""
        n, c, h, w = in_shape
        method = layer.method
        if method == _P.STOCHASTIC:
            self.refuse(i, 'STOCHASTIC pooling has no ONNX equivalent')
        if layer.global_pooling:
            return self.g.node('GlobalMaxPool' if method == _P.MAX else 'GlobalAveragePool', [src], name=name)
        (kh, kw), (sh, sw), (ph, pw) = layer.kernel, layer.stride, layer.pad
        oh, ow = layer.out_hw
        ends = [(o - 1) * s + k - size - pad for o, s, k, size, pad in ((oh, sh, kh, h, ph), (ow, sw, kw, w, pw))]
        if min(ends) < 0:  # Caffe's windows never reach the last rows/columns: drop them
            keep = [h + min(0, ends[0]), w + min(0, ends[1])]
            src = self.g.node('Slice', [src, self.g.const('starts', [0, 0], np.int64),
                                        self.g.const('ends', keep, np.int64),
                                        self.g.const('axes', [2, 3], np.int64)], name=name + '_crop')
            h, w = keep
            ends = [max(0, e) for e in ends]
        attrs = dict(kernel_shape=[kh, kw], strides=[sh, sw], pads=[ph, pw, ends[0], ends[1]])
        if method == _P.MAX:
            return self.g.node('MaxPool', [src], name=name, **attrs)
        avg = self.g.node('AveragePool', [src], name=name, count_include_pad=1, **attrs)
        # Caffe divides by the window clipped to the padded input (h + ph), not by kh * kw
        from .kernels.pooling import window_taps
        sizes = window_taps(h, w, kh, kw, ph, pw, sh, sw, oh, ow)[2].reshape(oh, ow)
        factor = ((kh * kw) / sizes.astype(np.float64)).astype(np.float32)
        if np.all(factor == 1):
            return avg
        return self.g.node('Mul', [avg, self.g.const(name + '_divisor', factor.reshape(1, 1, oh, ow))],
                           name=name + '_caffe_divisor')

    def op_SPP(self, i, layer, lp, x, name):
        in_shape = self.shape(self.net.bottom_ids[i][0])
        parts = []
        for level, (pool, out) in enumerate(layer.levels):
            pooled = self._pool(i, pool, x[0], in_shape, '%s_level%d' % (name, level))
            parts.append(self.g.node('Flatten', [pooled], name='%s_flat%d' % (name, level), axis=1))
        return parts[0] if len(parts) == 1 else self.g.node('Concat', parts, name=name, axis=1)

    def _reduce_mean(self, x, axis, name):
        if self.opset >= 18:
            return self.g.node('ReduceMean', [x, self.g.const(name + '_axes', [axis], np.int64)], name=name, keepdims=1)
        return self.g.node('ReduceMean', [x], name=name, axes=[axis], keepdims=1)

    def op_MVN(self, i, layer, lp, x, name):
        p = lp.mvn_param
        rows = self.g.node('Reshape', [x[0], self.g.const(name + '_rows', [layer.rows, -1], np.int64)],
                           name=name + '_rows')
        mean = self._reduce_mean(rows, 1, name + '_mean')
        y = self.g.node('Sub', [rows, mean], name=name + '_center')
        if p.normalize_variance:
            square_mean = self._reduce_mean(self.g.node('Mul', [rows, rows], name=name + '_sq'), 1, name + '_sqmean')
            var = self.g.node('Sub', [square_mean, self.g.node('Mul', [mean, mean], name=name + '_mean2')],
                              name=name + '_var')
            var = self.g.node('Max', [var, self.g.const(name + '_zero', 0.0)], name=name + '_nonneg')
            denom = self.g.node('Add', [self.g.node('Sqrt', [var], name=name + '_std'),
                                        self.g.const(name + '_eps', p.eps)], name=name + '_denom')
            y = self.g.node('Div', [y, denom], name=name + '_scale')
        return self._reshape_to_top(i, [y], name)

    def op_Embed(self, i, layer, lp, x, name):
        ids = self.g.node('Cast', [x[0]], name=name + '_ids', to=self.TensorProto.INT64)
        y = self.g.node('Gather', [self.g.const(name + '_W', layer.blobs[0].data), ids], name=name, axis=0)
        if layer.bias_term:
            y = self.g.node('Add', [y, self.g.const(name + '_b', layer.blobs[1].data)], name=name + '_bias')
        return y

    def op_ReLU(self, i, layer, lp, x, name):
        slope = lp.relu_param.negative_slope
        if slope:
            return self.g.node('LeakyRelu', [x[0]], name=name, alpha=float(slope))
        return self.g.node('Relu', [x[0]], name=name)

    def op_Sigmoid(self, i, layer, lp, x, name):
        return self.g.node('Sigmoid', [x[0]], name=name)

    def op_TanH(self, i, layer, lp, x, name):
        return self.g.node('Tanh', [x[0]], name=name)

    def op_AbsVal(self, i, layer, lp, x, name):
        return self.g.node('Abs', [x[0]], name=name)

    def op_BNLL(self, i, layer, lp, x, name):
        return self.g.node('Softplus', [x[0]], name=name)

    def op_ELU(self, i, layer, lp, x, name):
        return self.g.node('Elu', [x[0]], name=name, alpha=float(lp.elu_param.alpha))

    def _affine(self, x, scale, shift, name):
        if scale != 1:
            x = self.g.node('Mul', [x, self.g.const(name + '_scale', scale)], name=name + '_scale')
        if shift != 0:
            x = self.g.node('Add', [x, self.g.const(name + '_shift', shift)], name=name + '_shift')
        return x

    def op_Power(self, i, layer, lp, x, name):
        p = lp.power_param
        inner = self._affine(x[0], p.scale, p.shift, name)
        if p.power == 1:
            return self.g.node('Identity', [inner], name=name)
        return self.g.node('Pow', [inner, self.g.const(name + '_power', p.power)], name=name)

    def op_Exp(self, i, layer, lp, x, name):
        p = lp.exp_param
        log_base = 1.0 if p.base == -1 else math.log(p.base)
        return self.g.node('Exp', [self._affine(x[0], p.scale * log_base, p.shift * log_base, name)], name=name)

    def op_Log(self, i, layer, lp, x, name):
        p = lp.log_param
        y = self.g.node('Log', [self._affine(x[0], p.scale, p.shift, name)], name=name)
        if p.base != -1:
            y = self.g.node('Mul', [y, self.g.const(name + '_base', 1.0 / math.log(p.base))], name=name + '_base')
        return y

    def op_Threshold(self, i, layer, lp, x, name):
        above = self.g.node('Greater', [x[0], self.g.const(name + '_t', lp.threshold_param.threshold)], name=name)
        return self.g.node('Cast', [above], name=name + '_float', to=self.TensorProto.FLOAT)

    def op_Clip(self, i, layer, lp, x, name):
        p = lp.clip_param
        return self.g.node('Clip', [x[0], self.g.const(name + '_min', p.min), self.g.const(name + '_max', p.max)],
                           name=name)

    def op_Swish(self, i, layer, lp, x, name):
        beta = lp.swish_param.beta
        inner = x[0] if beta == 1 else self.g.node('Mul', [x[0], self.g.const(name + '_beta', beta)], name=name + '_b')
        return self.g.node('Mul', [x[0], self.g.node('Sigmoid', [inner], name=name + '_sigmoid')], name=name)

    def op_PReLU(self, i, layer, lp, x, name):
        slope = layer.blobs[0].data
        ndim = len(self.shape(self.net.bottom_ids[i][0]))
        slope = slope.reshape([1]) if slope.size == 1 and lp.prelu_param.channel_shared else \
            slope.reshape([-1] + [1] * (ndim - 2))
        return self.g.node('PRelu', [x[0], self.g.const(name + '_slope', slope)], name=name)

    def op_LRN(self, i, layer, lp, x, name):
        p = lp.lrn_param
        if p.norm_region == _LRN.ACROSS_CHANNELS:
            return self.g.node('LRN', [x[0]], name=name, size=int(p.local_size), alpha=float(p.alpha),
                               beta=float(p.beta), bias=float(p.k))
        # WITHIN_CHANNEL, as Caffe composes it: x * (1 + alpha * avgpool(x^2))^-beta
        pad = (p.local_size - 1) // 2
        square = self.g.node('Mul', [x[0], x[0]], name=name + '_square')
        pooled = self.g.node('AveragePool', [square], name=name + '_pool', kernel_shape=[p.local_size] * 2,
                             strides=[1, 1], pads=[pad] * 4, count_include_pad=1)
        scale = self._affine(pooled, p.alpha, 1.0, name)
        power = self.g.node('Pow', [scale, self.g.const(name + '_beta', -p.beta)], name=name + '_power')
        return self.g.node('Mul', [x[0], power], name=name)

    def op_BatchNorm(self, i, layer, lp, x, name):
        if not layer.use_global_stats:
            self.refuse(i, 'it normalizes with batch statistics (use_global_stats false): export a TEST-phase net')
        factor = layer.blobs[2].data.ravel()[0]
        scale = 0.0 if factor == 0 else 1.0 / factor
        mean = (layer.blobs[0].data * np.float32(scale)).astype(np.float32)
        var = (layer.blobs[1].data * np.float32(scale)).astype(np.float32)
        channels = mean.size
        gamma, beta = np.ones(channels, np.float32), np.zeros(channels, np.float32)
        follower = self._foldable_scale(i)
        if follower is not None:
            scale_layer = self.net.layers[follower]
            gamma = scale_layer.blobs[0].data.ravel().astype(np.float32)
            if len(scale_layer.blobs) > 1:
                beta = scale_layer.blobs[1].data.ravel().astype(np.float32)
            self.folded.add(follower)
        return self.g.node('BatchNormalization', [x[0], self.g.const(name + '_gamma', gamma),
                                                  self.g.const(name + '_beta', beta), self.g.const(name + '_mean', mean),
                                                  self.g.const(name + '_var', var)],
                           name=name, epsilon=float(layer.eps))

    def _foldable_scale(self, i):
        """The index of the one-bottom, per-channel Scale layer right after BatchNorm i when
        nothing else reads the BatchNorm output (in place, or its only reader), else None (the
        Scale is then exported on its own)."""
        net, j = self.net, i + 1
        if j >= len(net.layers) or net.layers[j].type != 'Scale' or len(net.bottom_ids[j]) != 1:
            return None
        bn_top = net.top_ids[i][0]
        shape = self.shape(bn_top)
        in_place = net.top_ids[j][0] == bn_top
        if net.bottom_ids[j][0] != bn_top or not (in_place or self.readers.get(bn_top, 0) == 1):
            return None
        p = net.layers[j].layer_param.scale_param
        if len(shape) < 2 or net.layers[j].blobs[0].data.size != shape[1] or p.axis % len(shape) != 1:
            return None
        return j

    def _operand(self, i, x, blob, axis, name):
        """Scale's and Bias's second factor laid out along ``axis`` of bottom 0: bottom 1 when
        there is one (reshaped with trailing 1s), else the param ``blob``."""
        ndim = len(self.shape(self.net.bottom_ids[i][0]))
        if len(x) == 2:
            shape = self.shape(self.net.bottom_ids[i][1])
            trailing = ndim - axis - len(shape)
            return self.reshape(x[1], shape + [1] * trailing, name + '_shape') if trailing else x[1]
        return self.broadcast_param(blob.data, ndim, axis, name)

    def op_Scale(self, i, layer, lp, x, name):
        ndim = len(self.shape(self.net.bottom_ids[i][0]))
        axis = lp.scale_param.axis % ndim if ndim else 0
        params = list(layer.blobs)
        scale = self._operand(i, x, params.pop(0) if len(x) == 1 else None, axis, name + '_scale')
        y = self.g.node('Mul', [x[0], scale], name=name)
        if params:  # the bias
            y = self.g.node('Add', [y, self.broadcast_param(params[0].data, ndim, axis, name + '_bias')],
                            name=name + '_bias')
        return y

    def op_Bias(self, i, layer, lp, x, name):
        ndim = len(self.shape(self.net.bottom_ids[i][0]))
        axis = lp.bias_param.axis % ndim if ndim else 0
        bias = self._operand(i, x, layer.blobs[0] if len(x) == 1 else None, axis, name + '_bias')
        return self.g.node('Add', [x[0], bias], name=name)

    def op_Eltwise(self, i, layer, lp, x, name):
        p = lp.eltwise_param
        if p.operation == _E.PROD:
            y = x[0]
            for k, other in enumerate(x[1:]):
                y = self.g.node('Mul', [y, other], name='%s_%d' % (name, k))
            return y
        if p.operation == _E.MAX:
            return self.g.node('Max', list(x), name=name)
        coeffs = list(p.coeff) or [1.0] * len(x)
        terms = [t if c == 1 else self.g.node('Mul', [t, self.g.const('%s_coeff%d' % (name, k), c)],
                                              name='%s_coeff%d' % (name, k))
                 for k, (t, c) in enumerate(zip(x, coeffs))]
        return self.g.node('Sum', terms, name=name)

    def op_Concat(self, i, layer, lp, x, name):
        p = lp.concat_param
        ndim = len(self.shape(self.net.bottom_ids[i][0]))
        axis = p.concat_dim if p.HasField('concat_dim') else p.axis
        return self.g.node('Concat', list(x), name=name, axis=int(axis % ndim))

    def op_Slice(self, i, layer, lp, x, name):
        p = lp.slice_param
        in_shape = self.shape(self.net.bottom_ids[i][0])
        axis = (p.slice_dim if p.HasField('slice_dim') else p.axis) % len(in_shape)
        sizes = [self.shape(b)[axis] for b in self.net.top_ids[i]]
        outs = [self.g.fresh(name + '_%d' % k) for k in range(len(sizes))]
        self.g.node('Split', [x[0], self.g.const(name + '_split', sizes, np.int64)], outs, name=name, axis=axis)
        return outs

    def _reshape_to_top(self, i, x, name):
        return self.reshape(x[0], self.shape(self.net.top_ids[i][0]), name)

    def op_Flatten(self, i, layer, lp, x, name):
        return self._reshape_to_top(i, x, name)

    def op_Reshape(self, i, layer, lp, x, name):
        return self._reshape_to_top(i, x, name)

    def op_Crop(self, i, layer, lp, x, name):
        in_shape = self.shape(self.net.bottom_ids[i][0])
        out_shape = self.shape(self.net.top_ids[i][0])
        starts = [index.start or 0 for index in layer.index]
        axes = [a for a in range(len(in_shape)) if out_shape[a] != in_shape[a] or starts[a]]
        if not axes:
            return self.g.node('Identity', [x[0]], name=name)
        return self.g.node('Slice', [x[0], self.g.const(name + '_starts', [starts[a] for a in axes], np.int64),
                                     self.g.const(name + '_ends', [starts[a] + out_shape[a] for a in axes], np.int64),
                                     self.g.const(name + '_axes', axes, np.int64)], name=name)

    def op_Softmax(self, i, layer, lp, x, name):
        ndim = len(self.shape(self.net.bottom_ids[i][0]))
        return self.g.node('Softmax', [x[0]], name=name, axis=int(lp.softmax_param.axis % ndim))

    def op_Tile(self, i, layer, lp, x, name):
        p = lp.tile_param
        ndim = len(self.shape(self.net.bottom_ids[i][0]))
        repeats = [1] * ndim
        repeats[p.axis % ndim] = p.tiles
        return self.g.node('Tile', [x[0], self.g.const(name + '_repeats', repeats, np.int64)], name=name)

    def op_ArgMax(self, i, layer, lp, x, name):
        p = lp.argmax_param
        in_shape = self.shape(self.net.bottom_ids[i][0])
        if p.HasField('axis'):
            axis = p.axis % len(in_shape)
            src = x[0]
        else:
            axis = 1
            src = self.reshape(x[0], [in_shape[0], -1], name + '_flatten')
        values, indices = self.g.fresh(name + '_values'), self.g.fresh(name + '_indices')
        self.g.node('TopK', [src, self.g.const(name + '_k', [p.top_k], np.int64)], [values, indices], name=name,
                    axis=axis, largest=1, sorted=1)
        index = self.g.node('Cast', [indices], name=name + '_float', to=self.TensorProto.FLOAT)
        if p.HasField('axis'):
            return values if p.out_max_val else index
        if not p.out_max_val:
            return self.reshape(index, self.shape(self.net.top_ids[i][0]), name + '_shape')
        both = self.g.node('Concat', [self.reshape(index, [in_shape[0], 1, p.top_k], name + '_i'),
                                      self.reshape(values, [in_shape[0], 1, p.top_k], name + '_v')],
                           name=name + '_pairs', axis=1)
        return self.reshape(both, self.shape(self.net.top_ids[i][0]), name + '_shape')

    def op_Reduction(self, i, layer, lp, x, name):
        p = lp.reduction_param
        in_shape = self.shape(self.net.bottom_ids[i][0])
        axis = p.axis % len(in_shape)
        flat = self.reshape(x[0], in_shape[:axis] + [-1], name + '_flatten')
        src = {_R.SUM: flat, _R.MEAN: flat}.get(p.operation)
        if p.operation == _R.ASUM:
            src = self.g.node('Abs', [flat], name=name + '_abs')
        elif p.operation == _R.SUMSQ:
            src = self.g.node('Mul', [flat, flat], name=name + '_square')
        op = 'ReduceMean' if p.operation == _R.MEAN else 'ReduceSum'
        axes = self.g.const(name + '_axes', [axis], np.int64)
        y = self.g.node(op, [src, axes], name=name, keepdims=0) if op == 'ReduceSum' or self.opset >= 18 else \
            self.g.node(op, [src], name=name, keepdims=0, axes=[axis])
        y = self._affine(y, p.coeff, 0.0, name + '_coeff')
        return self.reshape(y, self.shape(self.net.top_ids[i][0]), name + '_shape')


def export_onnx(net, path=None, opset=DEFAULT_OPSET, dynamic_batch=False):
    """The ONNX ModelProto of ``net`` (a built Net, e.g. TEST phase), written to ``path`` if
    given; checked with ``onnx.checker.check_model(full_check=True)``."""
    if opset < 13:
        raise ExportError('opset %d is too old: the exporter writes opset 13 or newer' % opset)
    exporter = _Exporter(net, opset, dynamic_batch)
    model = exporter.run()
    onnx = exporter.onnx
    try:
        onnx.checker.check_model(model, full_check=True)
    except onnx.checker.ValidationError as e:
        raise ExportError('the exported model does not pass the ONNX checker: %s' % e) from None
    if path is not None:
        from .atomic import atomic_write_bytes
        atomic_write_bytes(path, model.SerializeToString())
    return model


def build_for_export(model, weights=None, input_shapes=None, level=0, stages=()):
    """The TEST-phase Net of ``model`` with its data layers turned into inputs (their shapes
    from ``input_shapes`` {top: shape} or from what the layer says) and ``weights`` loaded."""
    from .net import Net
    from .netspec_io import load_net_param
    from .synthetic_inputs import DATA_LAYER_TYPES, replace_data_layers
    param, source = load_net_param(model)
    if any(lp.type in DATA_LAYER_TYPES for lp in param.layer):
        param, _ = replace_data_layers(param, input_shapes)
    elif input_shapes:
        for lp in param.layer:
            if lp.type == 'Input':
                for k, top in enumerate(lp.top):
                    if top in input_shapes:
                        while len(lp.input_param.shape) <= k:
                            lp.input_param.shape.add()
                        del lp.input_param.shape[k].dim[:]
                        lp.input_param.shape[k].dim.extend(input_shapes[top])
    return Net(param, weights=weights, phase=caffe_pb2.TEST, level=level, stages=stages,
               source=source)


def verify(net, model_path, seed=0):
    """Run the exported model in ONNX Runtime and ``net`` on the same random input (uniform in
    [-1, 1]; integer ids for Embed inputs): {output: (max abs difference, max abs reference)}."""
    try:
        import onnxruntime
    except ImportError:
        raise ExportError('--verify needs onnxruntime: pip install onnxruntime (or "pycaffe-ft[onnx]")') from None
    session = onnxruntime.InferenceSession(model_path, providers=['CPUExecutionProvider'])
    wanted = {i.name for i in session.get_inputs()}
    rng = np.random.default_rng(seed)
    for name in net.inputs:
        blob = net.blobs[name]
        readers = [layer.type for layer, ids in zip(net.layers, net.bottom_ids)
                   if net._blob_names.index(name) in ids]
        if 'Embed' in readers:
            size = min(l.layer_param.embed_param.input_dim for l in net.layers if l.type == 'Embed')
            blob.data[...] = rng.integers(0, size, blob.shape)
        else:
            blob.data[...] = rng.uniform(-1, 1, blob.shape)
    reference = net.forward()  # DummyData layers fill their tops here: ONNX Runtime gets the same
    feeds = {name: net.blobs[name].data.copy() for name in wanted}
    got = dict(zip([o.name for o in session.get_outputs()], session.run(None, feeds)))
    return {name: (float(np.abs(np.asarray(got[name], np.float64) - ref).max()) if ref.size else 0.0,
                   float(np.abs(ref).max()) if ref.size else 0.0)
            for name, ref in reference.items()}
