"""Net: the layer graph built from a NetParameter, with Caffe's Net semantics.

Filtering by NetStateRule, automatic Split layers for fan-out, in-place layers, parameter
sharing by ParamSpec name, the which-layers-need-backward analysis, forward/backward over a
layer range, copying trained weights and saving. Learnable blobs are views into one flat
``param_data`` / ``param_diff`` buffer pair.
"""
import collections
import itertools

import numpy as np

from .aligned import aligned_zeros
from .blob import Blob
from .errors import NetError, ShapeError, UnknownLayerTypeError, WeightsError
from .kernels import tiered
from .log import logger
from .netspec_io import load_net_param
from .proto import caffe_pb2
from .proto.io import array_to_blob, blob_to_array, first_non_finite, read_binary
from .proto.upgrade import upgrade_net
from .registry import LAYERS
from .split import insert_splits

LARGE_BLOB_BYTES = 1 << 30  # a blob this large gets a warning naming its layer

__all__ = ['Net', 'filter_net', 'state_meets_rule']

TRAIN, TEST = caffe_pb2.TRAIN, caffe_pb2.TEST


def state_meets_rule(state, rule):
    """Caffe's Net::StateMeetsRule."""
    if rule.HasField('phase') and rule.phase != state.phase:
        return False
    if rule.HasField('min_level') and state.level < rule.min_level:
        return False
    if rule.HasField('max_level') and state.level > rule.max_level:
        return False
    if any(stage not in state.stage for stage in rule.stage):
        return False
    if any(stage in state.stage for stage in rule.not_stage):
        return False
    return True


def filter_net(param, state, source=None):
    """Copy of ``param`` keeping the layers whose include/exclude rules admit ``state``.

    Returns (filtered NetParameter, list of kept original layer indices).
    """
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layer[:]
    kept = []
    for i, layer in enumerate(param.layer):
        if len(layer.include) and len(layer.exclude):
            where = source.where(i) if source else '<net>'
            raise NetError('%s: layer "%s": specify either include rules or exclude rules, not '
                           'both' % (where, layer.name))
        included = len(layer.include) == 0
        if any(state_meets_rule(state, rule) for rule in layer.exclude):
            included = False
        if any(state_meets_rule(state, rule) for rule in layer.include):
            included = True
        if included:
            out.layer.add().CopyFrom(layer)
            kept.append(i)
    return out, kept


def _phase_value(phase):
    if isinstance(phase, str):
        return {'TRAIN': TRAIN, 'TEST': TEST}[phase.upper()]
    return int(phase)


class Net:
    """A Caffe net.

    ``Net(model, phase)``, ``Net(model, weights, phase)`` (pycaffe's forms, also with
    keywords ``weights=``, ``phase=``, ``level=``, ``stages=``). ``model`` is a prototxt path,
    prototxt text or NetParameter.
    """

    def __init__(self, model, *args, weights=None, phase=None, level=0, stages=(), source=None):
        args = list(args)
        if args and isinstance(args[0], (str, bytes)):  # Net(model, weights, phase)
            weights = args.pop(0)
        if args:
            phase = args.pop(0)
        if args:
            raise TypeError('Net(model, [weights,] phase): too many positional arguments')
        if phase is None:
            phase = TEST
        self.phase = _phase_value(phase)
        param, self.source = load_net_param(model)
        if source is not None:  # where a NetParameter given here was read from
            self.source = source
        state = caffe_pb2.NetState()
        state.CopyFrom(param.state)
        state.phase = self.phase
        state.level = level if level else state.level
        state.stage.extend(s for s in stages if s not in state.stage)
        self._init(param, state)
        if weights:
            self.copy_from(weights)
        self._hooks = {'before_forward': [], 'after_forward': [], 'before_backward': [],
                       'after_backward': []}

    # -- construction ---------------------------------------------------------------------------
    def _init(self, param, state):
        self.name = param.name
        self.debug_info = param.debug_info
        filtered, kept = filter_net(param, state, self.source)
        lines = [self.source.lines[i] if i < len(self.source.lines) else None for i in kept]
        split_param, origin = insert_splits(filtered, self.source.where())
        self._layer_lines = [lines[o] if o is not None else None for o in origin]
        self.param = split_param
        self.layers, self._layer_names = [], []
        self.blobs = collections.OrderedDict()
        self._blob_list, self._blob_names = [], []
        self.bottom_vecs, self.top_vecs = [], []
        self.bottom_ids, self.top_ids = [], []
        self.bottom_need_backward, self.layer_need_backward = [], []
        blob_need_backward = []
        available, name_to_id = set(), {}
        self.input_ids = []
        self._producer = {}
        self._params, self._param_owners, self._param_layer_indices = [], [], []
        self._param_names_index = {}
        self.learnable_params, self.learnable_param_ids = [], []
        self.params_lr, self.params_weight_decay = [], []
        self._has_params_lr, self._has_params_decay = [], []
        for layer_id, lp in enumerate(split_param.layer):
            if not lp.HasField('phase'):
                lp.phase = self.phase
            where = self._where(layer_id)
            if len(lp.propagate_down) and len(lp.propagate_down) != len(lp.bottom):
                raise NetError('%s: layer "%s": propagate_down param must be specified either 0 '
                               'or bottom_size times' % (where, lp.name))
            bad = first_non_finite(lp)
            if bad:
                raise NetError('%s: layer "%s" (type %s): %s is %s; it must be a finite number'
                               % (where, lp.name, lp.type, bad[0], bad[1]))
            cls = LAYERS.get(lp.type, UnknownLayerTypeError,
                             '%s: layer "%s": ' % (where, lp.name))
            layer_param = caffe_pb2.LayerParameter()
            layer_param.CopyFrom(lp)
            layer = cls(layer_param, self.phase)
            layer.net_source = self.source
            self.layers.append(layer)
            self._layer_names.append(lp.name)
            bottoms, bottom_ids, bottom_nb = [], [], []
            need_backward = False
            for j, name in enumerate(lp.bottom):
                if name not in available:
                    raise NetError('%s: layer "%s" (type %s): unknown bottom blob "%s" (no earlier '
                                   'layer produces it, or it was already consumed in place)'
                                   % (where, lp.name, lp.type, name))
                bid = name_to_id[name]
                bottoms.append(self._blob_list[bid])
                bottom_ids.append(bid)
                nb = blob_need_backward[bid]
                if len(lp.propagate_down):
                    nb = lp.propagate_down[j]
                bottom_nb.append(bool(nb))
                available.discard(name)
                need_backward |= blob_need_backward[bid]
            tops, top_ids = [], []
            for j, name in enumerate(lp.top):
                if j < len(lp.bottom) and name == lp.bottom[j]:
                    bid = name_to_id[name]
                elif name in name_to_id:
                    raise NetError('%s: layer "%s": top blob "%s" produced by multiple sources'
                                   % (where, lp.name, name))
                else:
                    bid = self._new_blob(name, blob_need_backward)
                    name_to_id[name] = bid
                tops.append(self._blob_list[bid])
                top_ids.append(bid)
                available.add(name)
                if lp.type == 'Input':
                    self.input_ids.append(bid)
            wanted = max(layer.exact_num_top or 0, layer.min_num_top or 0)
            while layer.auto_top_blobs and len(tops) < wanted:
                # anonymous tops (e.g. a loss layer's without a top): not usable as bottoms
                bid = self._new_blob('(automatic)', blob_need_backward)
                tops.append(self._blob_list[bid])
                top_ids.append(bid)
            for bid in top_ids:
                self._producer[bid] = lp.name
            self.bottom_vecs.append(bottoms)
            self.top_vecs.append(tops)
            self.bottom_ids.append(bottom_ids)
            self.top_ids.append(top_ids)
            self.bottom_need_backward.append(bottom_nb)
            try:
                layer.setup(bottoms, tops)
            except NetError as e:
                raise type(e)('%s: %s%s' % (where, self._named(e, layer_id), self._describe_bottoms(layer_id))) from None
            logger.debug('Setting up %s', lp.name)
            for blob in list(tops) + list(layer.blobs):
                if blob.count * 8 >= LARGE_BLOB_BYTES:
                    logger.warning('%s: layer "%s": a blob of shape %s takes %.3g GB with its diff', where,
                                   lp.name, list(blob.shape), blob.count * 8 / 1e9)
            n_blobs = len(layer.blobs)
            if len(lp.param) > n_blobs:
                raise NetError('%s: layer "%s": too many params specified (%d param specs, the '
                               'layer has %d param blobs)' % (where, lp.name, len(lp.param), n_blobs))
            for pid in range(n_blobs):
                spec = lp.param[pid] if pid < len(lp.param) else caffe_pb2.ParamSpec()
                pnb = spec.lr_mult != 0
                need_backward |= pnb
                layer.param_propagate_down[pid] = pnb
            for pid in range(n_blobs):
                self._append_param(layer_id, pid)
            self.layer_need_backward.append(need_backward)
            if need_backward:
                for bid in top_ids:
                    blob_need_backward[bid] = True
        self._random_layers = [l for l in self.layers if l.uses_rng]
        selection_below = False
        for layer in reversed(self.layers):
            layer.before_value_selection = selection_below
            selection_below = selection_below or layer.selects_by_value
        self._analyse_backward(split_param, blob_need_backward)
        self._blob_need_backward = blob_need_backward
        self._relu_fuses_into = [self._fuses_next_relu(i) for i in range(len(self.layers))]
        self._relu_masked_by = [self._masks_relu_below(i) for i in range(len(self.layers))]
        self.output_ids = [name_to_id[n] for n in sorted(available)]
        self._build_flat_params()
        self._overwritable = self._overwritable_diffs()
        if self.phase == caffe_pb2.TRAIN:  # the last layer first: the backward's order
            for layer, need_backward in reversed(list(zip(self.layers, self.layer_need_backward))):
                for kernel, args in layer.backward_compiles() if need_backward else ():
                    tiered.ahead(kernel, args)
        self.blob_loss_weights = collections.OrderedDict((n, 0.0) for n in self._blob_names)
        for layer, top_ids in zip(self.layers, self.top_ids):
            for j, bid in enumerate(top_ids):
                if layer.loss(j):
                    self.blob_loss_weights[self._blob_names[bid]] = layer.loss(j)

    def _new_blob(self, name, blob_need_backward):
        bid = len(self._blob_list)
        blob = Blob()
        self._blob_list.append(blob)
        self._blob_names.append(name)
        blob_need_backward.append(False)
        self.blobs[name] = blob
        return bid

    def _describe_bottoms(self, layer_id):
        parts = ['"%s" %s from layer "%s"' % (self._blob_names[bid], list(self._blob_list[bid].shape),
                                              self._producer.get(bid, '?'))
                 for bid in self.bottom_ids[layer_id]]
        return ' [bottoms: %s]' % '; '.join(parts) if parts else ''

    def _named(self, error, layer_id):
        """The error's text, led by the layer's name and type unless it names the layer already."""
        name, kind = self._layer_names[layer_id], self.layers[layer_id].type
        text = str(error)
        return text if 'layer "%s"' % name in text else 'layer "%s" (type %s): %s' % (name, kind, text)

    def _where(self, layer_id):
        line = self._layer_lines[layer_id] if layer_id < len(self._layer_lines) else None
        path = self.source.where()
        return '%s:%d' % (path, line) if line else path

    def _append_param(self, layer_id, pid):
        layer = self.layers[layer_id]
        lp = layer.layer_param
        spec = lp.param[pid] if pid < len(lp.param) else caffe_pb2.ParamSpec()
        net_pid = len(self._params)
        self._params.append(layer.blobs[pid])
        self._param_layer_indices.append((layer_id, pid))
        name = spec.name
        if not name or name not in self._param_names_index:
            self._param_owners.append(-1)
            if name:
                self._param_names_index[name] = net_pid
            self.learnable_param_ids.append(len(self.learnable_params))
            self.learnable_params.append(layer.blobs[pid])
            self._has_params_lr.append(spec.HasField('lr_mult'))
            self._has_params_decay.append(spec.HasField('decay_mult'))
            self.params_lr.append(spec.lr_mult)
            self.params_weight_decay.append(spec.decay_mult)
            return
        owner_pid = self._param_names_index[name]
        self._param_owners.append(owner_pid)
        owner_layer, owner_index = self._param_layer_indices[owner_pid]
        this, owner = layer.blobs[pid], self.layers[owner_layer].blobs[owner_index]
        where = self._where(layer_id)
        if spec.share_mode == caffe_pb2.ParamSpec.PERMISSIVE:
            if this.count != owner.count:
                raise ShapeError('%s: cannot share param "%s" owned by layer "%s" with layer "%s": '
                                 'count mismatch (owner shape %s, sharing shape %s)' % (
                                     where, name, self._layer_names[owner_layer], lp.name,
                                     list(owner.shape), list(this.shape)))
        elif tuple(this.shape) != tuple(owner.shape):
            raise ShapeError('%s: cannot share param "%s" owned by layer "%s" with layer "%s": '
                             'shape mismatch (owner shape %s, sharing shape %s; use '
                             'share_mode: PERMISSIVE to check counts only)' % (
                                 where, name, self._layer_names[owner_layer], lp.name,
                                 list(owner.shape), list(this.shape)))
        lid = self.learnable_param_ids[owner_pid]
        self.learnable_param_ids.append(lid)
        for has, values, field in ((self._has_params_lr, self.params_lr, 'lr_mult'),
                                   (self._has_params_decay, self.params_weight_decay, 'decay_mult')):
            if spec.HasField(field):
                if has[lid]:
                    if getattr(spec, field) != values[lid]:
                        raise NetError('%s: shared param "%s" has mismatched %s' % (where, name, field))
                else:
                    has[lid] = True
                    values[lid] = getattr(spec, field)

    def _analyse_backward(self, param, blob_need_backward):
        """Caffe's pass from the last layer back: skip layers that do not feed a loss."""
        under_loss, skip_backp = set(), set()
        for lid in range(len(self.layers) - 1, -1, -1):
            layer = self.layers[lid]
            contributes, skip = False, True
            for j, bid in enumerate(self.top_ids[lid]):
                name = self._blob_names[bid]
                if layer.loss(j) or name in under_loss:
                    contributes = True
                if name not in skip_backp:
                    skip = False
                if contributes and not skip:
                    break
            if self.layer_need_backward[lid] and skip:
                self.layer_need_backward[lid] = False
                self.bottom_need_backward[lid] = [False] * len(self.bottom_ids[lid])
            if not contributes:
                self.layer_need_backward[lid] = False
            for j, bid in enumerate(self.bottom_ids[lid]):
                name = self._blob_names[bid]
                if contributes:
                    under_loss.add(name)
                else:
                    self.bottom_need_backward[lid][j] = False
                if not self.bottom_need_backward[lid][j]:
                    skip_backp.add(name)
        if param.force_backward:
            for lid, layer in enumerate(self.layers):
                self.layer_need_backward[lid] = True
                for j, bid in enumerate(self.bottom_ids[lid]):
                    nb = self.bottom_need_backward[lid][j] or layer.allow_force_backward(j)
                    self.bottom_need_backward[lid][j] = nb
                    blob_need_backward[bid] = blob_need_backward[bid] or nb
                layer.param_propagate_down = [True] * len(layer.blobs)

    def _build_flat_params(self):
        """Move every learnable blob into one flat data/diff buffer; sharers view their owner's slice."""
        counts = [b.count for b in self.learnable_params]
        offsets = np.concatenate([[0], np.cumsum(counts, dtype=np.int64)]).astype(np.int64)
        self.param_data = aligned_zeros(int(offsets[-1]))
        self.param_diff = aligned_zeros(int(offsets[-1]))
        self.param_offsets = offsets
        for i, blob in enumerate(self.learnable_params):
            lo, hi = offsets[i], offsets[i + 1]
            self.param_data[lo:hi] = blob.data.ravel()
            self.param_diff[lo:hi] = blob.diff.ravel()
            blob.bind(self.param_data[lo:hi], self.param_diff[lo:hi])
        for net_pid, owner in enumerate(self._param_owners):
            if owner >= 0:
                lid = self.learnable_param_ids[net_pid]
                lo, hi = offsets[lid], offsets[lid + 1]
                self._params[net_pid].bind(self.param_data[lo:hi], self.param_diff[lo:hi])

    # -- pycaffe's introspection -----------------------------------------------------------
    @property
    def params(self):
        return collections.OrderedDict((name, layer.blobs) for name, layer
                                       in zip(self._layer_names, self.layers) if layer.blobs)

    @property
    def layer_dict(self):
        return collections.OrderedDict(zip(self._layer_names, self.layers))

    @property
    def inputs(self):
        return [self._blob_names[i] for i in self.input_ids]

    @property
    def outputs(self):
        return [self._blob_names[i] for i in self.output_ids]

    # pycaffe's private views (its pycaffe.py builds the public ones on them; scripts read them too)
    @property
    def _inputs(self):
        return list(self.input_ids)

    @property
    def _outputs(self):
        return list(self.output_ids)

    @property
    def _blob_loss_weights(self):
        return list(self.blob_loss_weights.values())

    def _top_ids(self, i):
        return list(self.top_ids[i])

    def _bottom_ids(self, i):
        return list(self.bottom_ids[i])

    @property
    def top_names(self):
        return collections.OrderedDict(
            (name, [self._blob_names[i] for i in ids]) for name, ids in zip(self._layer_names, self.top_ids))

    @property
    def bottom_names(self):
        return collections.OrderedDict(
            (name, [self._blob_names[i] for i in ids]) for name, ids in zip(self._layer_names, self.bottom_ids))

    # -- hooks -------------------------------------------------------------------------------
    def before_forward(self, fn):
        """Call ``fn(layer_index)`` before each layer's forward."""
        self._hooks['before_forward'].append(fn)

    def after_forward(self, fn):
        self._hooks['after_forward'].append(fn)

    def before_backward(self, fn):
        self._hooks['before_backward'].append(fn)

    def after_backward(self, fn):
        self._hooks['after_backward'].append(fn)

    # -- running -----------------------------------------------------------------------------
    def _layer_index(self, name, default):
        if name is None:
            return default
        try:
            return self._layer_names.index(name)
        except ValueError:
            raise NetError('net "%s" has no layer "%s"' % (self.name, name)) from None

    def _fuses_next_relu(self, i):
        """Whether layer i can apply the ReLU layer after it (see Layer.fuses_relu): that
        ReLU (negative slope 0) runs in place on layer i's only top, and neither has a loss
        weight (the loss would read the top between the two)."""
        if i + 1 >= len(self.layers) or not self.layers[i].fuses_relu:
            return False
        relu, tops = self.layers[i + 1], self.top_ids[i]
        return (relu.layer_param.type == 'ReLU' and relu.layer_param.relu_param.negative_slope == 0
                and len(tops) == 1 and self.bottom_ids[i + 1] == tops and self.top_ids[i + 1] == tops
                and not any(self.layers[i].loss_weights) and not any(relu.loss_weights))

    def _masks_relu_below(self, i):
        """The bottom of layer i whose diff layer i's backward can multiply by the mask of
        the ReLU just below it (see Layer.fuses_relu_backward), else -1: that ReLU (negative
        slope 0, no loss weight) runs in place on the blob, which layer i reads once and
        propagates a diff to."""
        if i < 1 or not self.layers[i].fuses_relu_backward or not self.layer_need_backward[i - 1]:
            return -1
        relu, blob = self.layers[i - 1], self.top_ids[i - 1]
        if (relu.layer_param.type != 'ReLU' or relu.layer_param.relu_param.negative_slope != 0
                or self.bottom_ids[i - 1] != blob or len(blob) != 1 or any(relu.loss_weights)
                or not self.bottom_need_backward[i - 1][0] or self.bottom_ids[i].count(blob[0]) != 1):
            return -1
        index = self.bottom_ids[i].index(blob[0])
        return index if self.bottom_need_backward[i][index] else -1

    def forward_from_to(self, start=0, end=None):
        """Run layers ``start..end`` (inclusive); returns the summed weighted loss.

        A layer followed in place by a ReLU it can apply (see :meth:`_fuses_next_relu`) writes
        its top through that ReLU when the ReLU runs in this pass too and nothing looks at
        the top in between (no debug_info, no forward hooks); the ReLU's own pass, which
        would change nothing more, is skipped. A pass that ends at the layer leaves its
        output as it is."""
        end = len(self.layers) - 1 if end is None else end
        loss = 0.0
        hooks = self._hooks
        fusing = not (self.debug_info or hooks['before_forward'] or hooks['after_forward'])
        skip = -1
        for i in range(start, end + 1):
            if i == skip:
                continue
            for fn in hooks['before_forward']:
                fn(i)
            layer = self.layers[i]
            layer.relu_on_top = fusing and i < end and self._relu_fuses_into[i]
            if layer.relu_on_top:
                skip = i + 1
            try:
                loss += layer.run_forward(self.bottom_vecs[i], self.top_vecs[i])
            except NetError as e:
                raise type(e)('%s: %s%s' % (self._where(i), self._named(e, i), self._describe_bottoms(i))) from None
            finally:
                layer.relu_on_top = False
            if self.debug_info:
                self._forward_debug_info(i)
            for fn in hooks['after_forward']:
                fn(i)
        return loss

    def backward_from_to(self, start=None, end=0):
        """Backward through layers ``start`` down to ``end`` (inclusive).

        A layer just above an in-place ReLU it can mask for (see :meth:`_masks_relu_below`)
        multiplies that diff by the ReLU's mask as it writes it, when the ReLU runs in this
        pass too and nothing looks in between (no debug_info, no before-backward hooks); the
        ReLU's own backward is then skipped, its after-backward hooks still called."""
        start = len(self.layers) - 1 if start is None else start
        hooks = self._hooks
        fusing = not (self.debug_info or hooks['before_backward'])
        skip = -1
        for i in range(start, end - 1, -1):
            if i != skip:
                for fn in hooks['before_backward']:
                    fn(i)
            if self.layer_need_backward[i] and i != skip:
                layer = self.layers[i]
                layer.relu_below = self._relu_masked_by[i] if fusing and i > end else -1
                if layer.relu_below >= 0:
                    skip = i - 1
                try:
                    layer.backward(self.top_vecs[i], self.bottom_need_backward[i], self.bottom_vecs[i])
                finally:
                    layer.relu_below = -1
                if self.debug_info:
                    self._backward_debug_info(i)
            for fn in hooks['after_backward']:
                fn(i)

    def _forward(self, start, end):
        return self.forward_from_to(start, end)

    def _backward(self, start, end):
        self.backward_from_to(start, end)

    def forward(self, blobs=None, start=None, end=None, **kwargs):
        """pycaffe's forward: set inputs from kwargs, run, return {output name: data}."""
        blobs = list(blobs or [])
        start_ind = self._layer_index(start, 0)
        end_ind = self._layer_index(end, len(self.layers) - 1)
        if end is not None:
            outputs = set(blobs + ([end] if end in self.blobs else self.top_names[end]))
        else:
            outputs = set(self.outputs + blobs)
        if kwargs:
            if set(kwargs) != set(self.inputs):
                raise NetError('input blob arguments %s do not match net inputs %s'
                               % (sorted(kwargs), self.inputs))
            for name, value in kwargs.items():
                value = np.asarray(value)
                if value.shape[:1] != self.blobs[name].shape[:1]:
                    raise ShapeError('input "%s" is not batch sized: shape %s, blob shape %s'
                                     % (name, list(value.shape), list(self.blobs[name].shape)))
                self.blobs[name].data[...] = value
        self.loss = self.forward_from_to(start_ind, end_ind)
        return {out: self.blobs[out].data for out in outputs}

    def backward(self, diffs=None, start=None, end=None, **kwargs):
        """pycaffe's backward: set output diffs from kwargs, run, return {name: diff}."""
        diffs = list(diffs or [])
        start_ind = self._layer_index(start, len(self.layers) - 1)
        end_ind = self._layer_index(end, 0)
        if end is not None:
            outputs = set(diffs + ([end] if end in self.blobs else self.bottom_names[end]))
        else:
            outputs = set(self.inputs + diffs)
        if kwargs:
            if set(kwargs) != set(self.outputs):
                raise NetError('top diff arguments %s do not match net outputs %s'
                               % (sorted(kwargs), self.outputs))
            for name, value in kwargs.items():
                value = np.asarray(value)
                if value.shape[:1] != self.blobs[name].shape[:1]:
                    raise ShapeError('diff "%s" is not batch sized' % name)
                self.blobs[name].diff[...] = value
        self.backward_from_to(start_ind, end_ind)
        return {out: self.blobs[out].diff for out in outputs}

    def forward_backward(self):
        """One forward and backward pass over the whole net; returns the loss."""
        loss = self.forward_from_to()
        self.backward_from_to()
        return loss

    def _batches(self, arrays):
        """(count, batches): ``arrays`` ({blob name: array}) cut into the net's batches (the
        first input's batch size), the last padded with zeros; one empty batch without arrays."""
        batch = self.blobs[self.inputs[0]].shape[0] if self.inputs else 1
        if not arrays:
            return batch, [{}]
        n = len(next(iter(arrays.values())))
        batches = []
        for lo in range(0, n, batch):
            chunk = {}
            for name, value in arrays.items():
                part = np.asarray(value[lo:lo + batch])
                if len(part) < batch:
                    pad = np.zeros((batch - len(part),) + part.shape[1:], part.dtype)
                    part = np.concatenate([part, pad])
                chunk[name] = part
            batches.append(chunk)
        return n, batches

    @staticmethod
    def _collect(collected, results):
        for name, value in results.items():
            if value.ndim == 0:  # a scalar output (a loss) per batch
                collected[name].append(value.copy())
            else:
                collected[name].extend(value.copy())

    def forward_all(self, blobs=None, **kwargs):
        """pycaffe's forward_all: run the inputs through in batches; concatenated outputs."""
        all_outs = {out: [] for out in set(self.outputs + list(blobs or []))}
        n, batches = self._batches(kwargs)
        for chunk in batches:
            self._collect(all_outs, self.forward(blobs=blobs, **chunk))
        return {name: np.asarray(values[:n]) for name, values in all_outs.items()}

    def forward_backward_all(self, blobs=None, diffs=None, **kwargs):
        """pycaffe's forward_backward_all: the inputs among ``kwargs`` forward and the output
        diffs among them backward, batch by batch (a pass with no arrays of its kind runs on
        what the blobs hold); returns (outputs and ``blobs``, input diffs and ``diffs``), each
        concatenated over the batches, padding dropped."""
        unknown = sorted(set(kwargs) - set(self.inputs) - set(self.outputs))
        if unknown:
            raise NetError('forward_backward_all: %s are neither inputs %s nor outputs %s of net "%s"'
                           % (unknown, self.inputs, self.outputs, self.name))
        all_outs = {out: [] for out in set(self.outputs + list(blobs or []))}
        all_diffs = {diff: [] for diff in set(self.inputs + list(diffs or []))}
        _, forward = self._batches({k: v for k, v in kwargs.items() if k in self.inputs})
        _, backward = self._batches({k: v for k, v in kwargs.items() if k in self.outputs})
        for chunk_in, chunk_out in itertools.zip_longest(forward, backward, fillvalue={}):
            self._collect(all_outs, self.forward(blobs=blobs, **chunk_in))
            self._collect(all_diffs, self.backward(diffs=diffs, **chunk_out))
        n = max((len(v) for v in kwargs.values()), default=None)  # the padding dropped
        return ({name: np.asarray(values[:n]) for name, values in all_outs.items()},
                {name: np.asarray(values[:n]) for name, values in all_diffs.items()})

    def set_input_arrays(self, data, labels):
        """Give a MemoryData layer (the first one) the arrays it serves."""
        for layer in self.layers:
            if layer.type == 'MemoryData':
                layer.set_arrays(data, labels)
                return
        raise NetError('net "%s" has no MemoryData layer for set_input_arrays' % self.name)

    def set_iteration(self, iteration, worker=0, pass_index=0):
        """Reseed the random layers for this (worker, iteration, pass): see Layer.set_iteration."""
        for layer in self._random_layers:
            layer.set_iteration(iteration, worker, pass_index)

    def data_layers(self):
        return [l for l in self.layers if hasattr(l, 'seek')]

    def reshape(self):
        for i, layer in enumerate(self.layers):
            layer.reshape(self.bottom_vecs[i], self.top_vecs[i])

    def clear_param_diffs(self, overwrite_next=False):
        """Zero every learnable param's diff (pycaffe's clear_param_diffs). With
        ``overwrite_next`` (a solver, before its forward/backward passes) the diffs the next
        backward writes whole (:meth:`Layer.overwritable_param_diffs`) are left to it: zeroing
        them and reading the zeros back as it adds were a pass over memory each (AlexNet's fc
        layers: 234 MB). A pass that ends before writing them zeroes them
        (:meth:`settle_param_diffs`)."""
        if not overwrite_next or not self._overwritable:
            self.param_diff[...] = 0
            for layer, _, _, _ in self._overwritable:
                layer.param_diffs_to_overwrite.clear()
            return
        start = 0
        for layer, j, lo, hi in self._overwritable:
            self.param_diff[start:lo] = 0
            layer.param_diffs_to_overwrite.add(j)
            start = hi
        self.param_diff[start:] = 0

    def settle_param_diffs(self):
        """Zero the diffs :meth:`clear_param_diffs` left to a backward that has not written
        them (a pass that stopped early): after it, every diff holds what Caffe's would."""
        for layer, j, lo, hi in self._overwritable:
            if j in layer.param_diffs_to_overwrite:
                self.param_diff[lo:hi] = 0
                layer.param_diffs_to_overwrite.discard(j)

    def _overwritable_diffs(self):
        """[(layer, blob index, lo, hi)] in ``param_diff`` order: the learnable params whose
        diff their layer's backward can write whole (see :meth:`clear_param_diffs`), used by
        that layer alone and propagated to in every backward."""
        users = collections.Counter(self.learnable_param_ids)
        found = []
        for net_pid, (layer_id, j) in enumerate(self._param_layer_indices):
            lid, layer = self.learnable_param_ids[net_pid], self.layers[layer_id]
            if (users[lid] == 1 and self.layer_need_backward[layer_id] and layer.param_propagate_down[j]
                    and j in layer.overwritable_param_diffs()):
                found.append((layer, j, int(self.param_offsets[lid]), int(self.param_offsets[lid + 1])))
        return sorted(found, key=lambda entry: entry[2])

    def share_with(self, other):
        """Make this net's learnable params the same memory as ``other``'s (test nets)."""
        self.copy_trained_layers_from_net(other, share=True)

    # -- weights -----------------------------------------------------------------------------
    def copy_from(self, weights):
        """Copy trained layers from a .caffemodel path(s) (comma-separated) or NetParameter.

        Like Caffe's CopyTrainedLayersFrom: layers absent from this net are skipped; a
        same-name layer whose blob count or shapes differ is an error naming both.
        """
        if isinstance(weights, str) and ',' in weights:
            for w in weights.split(','):
                self.copy_from(w.strip())
            return
        if isinstance(weights, str) and weights.endswith('.h5'):
            from .hdf5 import copy_from_hdf5
            copy_from_hdf5(self, weights)
            return
        if isinstance(weights, caffe_pb2.NetParameter):
            source, where = weights, '<NetParameter>'
        else:
            source = read_binary(weights, caffe_pb2.NetParameter())
            where = weights
            if not len(source.layer) and not len(source.layers):
                raise WeightsError('%s: no layers in this file: not a .caffemodel?' % where)
            upgrade_net(source, where)
        by_name = self.layer_dict
        for src in source.layer:
            target = by_name.get(src.name)
            if target is None:
                logger.info('Ignoring source layer %s', src.name)
                continue
            if len(src.blobs) != len(target.blobs):
                raise WeightsError('%s: incompatible number of blobs for layer "%s": the weights '
                                   'have %d, the net has %d' % (where, src.name, len(src.blobs),
                                                               len(target.blobs)))
            for j, (bp, blob) in enumerate(zip(src.blobs, target.blobs)):
                try:
                    array = blob_to_array(bp)
                except WeightsError as e:
                    raise WeightsError('%s: layer "%s", param %d: %s' % (where, src.name, j, e)) from None
                if tuple(array.shape) != tuple(blob.shape):
                    legacy = not bp.HasField('shape') and array.size == blob.count and blob.num_axes <= 4 \
                        and (1,) * (4 - blob.num_axes) + tuple(blob.shape) == tuple(array.shape)
                    if not legacy:
                        raise WeightsError(
                            '%s: cannot copy param %d weights from layer "%s"; shape mismatch. '
                            'Source param shape is %s; target param shape is %s. To learn this '
                            'layer\'s parameters from scratch rather than copying from a saved '
                            'net, rename the layer.' % (where, j, src.name, list(array.shape),
                                                        list(blob.shape)))
                blob.data[...] = array.reshape(blob.shape)

    def copy_trained_layers_from_net(self, other, share=False):
        by_name = other.layer_dict
        for name, layer in zip(self._layer_names, self.layers):
            src = by_name.get(name)
            if src is None or not layer.blobs:
                continue
            for blob, sblob in zip(layer.blobs, src.blobs):
                if tuple(blob.shape) != tuple(sblob.shape):
                    raise ShapeError('layer "%s": cannot share param of shape %s with %s'
                                     % (name, list(sblob.shape), list(blob.shape)))
                if share:
                    blob.share_data(sblob)
                else:
                    blob.data[...] = sblob.data

    def to_proto(self, write_diff=False):
        """NetParameter with every layer's definition and blobs (Caffe's Net::ToProto)."""
        param = caffe_pb2.NetParameter(name=self.name)
        for layer in self.layers:
            lp = param.layer.add()
            lp.CopyFrom(layer.layer_param)
            del lp.blobs[:]
            for blob in layer.blobs:
                array_to_blob(blob.data, lp.blobs.add(), diff=blob.diff if write_diff else None)
        return param

    def save(self, path):
        """Write the weights as a binary .caffemodel (atomically)."""
        from .proto.io import write_binary
        write_binary(path, self.to_proto())

    def to_onnx(self, path=None, opset=None, dynamic_batch=False):
        """Export this net (build it in the TEST phase; data layers refused: see
        ``pycaffe-ft export-onnx --input-shape``) to ONNX; returns the ModelProto and writes it to
        ``path`` if given. Needs the optional onnx package."""
        from .onnx_export import DEFAULT_OPSET, export_onnx
        return export_onnx(self, path, opset or DEFAULT_OPSET, dynamic_batch)

    def save_hdf5(self, path):
        """Write the weights as a Caffe HDF5 model (needs h5py)."""
        from .hdf5 import save_hdf5
        save_hdf5(self, path)

    def load_hdf5(self, path):
        """pycaffe's Net.load_hdf5: copy the layers of a Caffe HDF5 model (``data/<layer>/<i>``,
        as save_hdf5 and Caffe's Net::ToHDF5 write) into this net; absent layers are skipped."""
        from .hdf5 import copy_from_hdf5
        copy_from_hdf5(self, path)

    # -- debug info --------------------------------------------------------------------------
    def first_non_finite(self):
        """Where NaN or inf first appears, in Caffe's debug_info order: the first layer whose
        top data is not finite (forward), else the first layer, going backward, whose bottom
        or param diff is not; a phrase naming layer, type and blob, or None."""
        for i, layer in enumerate(self.layers):
            for bid in self.top_ids[i]:
                if not np.isfinite(self._blob_list[bid].data).all():
                    return 'forward, layer "%s" (type %s), top blob "%s" data' % (
                        self._layer_names[i], layer.type, self._blob_names[bid])
        for i in reversed(range(len(self.layers))):
            layer = self.layers[i]
            for j, blob in enumerate(layer.blobs):
                if not np.isfinite(blob.diff).all():
                    return 'backward, layer "%s" (type %s), param blob %d diff' % (self._layer_names[i], layer.type, j)
            for j, bid in enumerate(self.bottom_ids[i]):
                if self.bottom_need_backward[i][j] and not np.isfinite(self._blob_list[bid].diff).all():
                    return 'backward, layer "%s" (type %s), bottom blob "%s" diff' % (
                        self._layer_names[i], layer.type, self._blob_names[bid])
        return None

    def _forward_debug_info(self, i):
        for bid in self.top_ids[i]:
            logger.info('    [Forward] Layer %s, top blob %s data: %.6g', self._layer_names[i],
                        self._blob_names[bid], np.abs(self._blob_list[bid].data).mean())
        for j, blob in enumerate(self.layers[i].blobs):
            logger.info('    [Forward] Layer %s, param blob %d data: %.6g', self._layer_names[i], j,
                        np.abs(blob.data).mean())

    def _backward_debug_info(self, i):
        for j, bid in enumerate(self.bottom_ids[i]):
            if self.bottom_need_backward[i][j]:
                logger.info('    [Backward] Layer %s, bottom blob %s diff: %.6g',
                            self._layer_names[i], self._blob_names[bid],
                            np.abs(self._blob_list[bid].diff).mean())
        for j, blob in enumerate(self.layers[i].blobs):
            if self.layers[i].param_propagate_down[j]:
                logger.info('    [Backward] Layer %s, param blob %d diff: %.6g',
                            self._layer_names[i], j, np.abs(blob.diff).mean())
