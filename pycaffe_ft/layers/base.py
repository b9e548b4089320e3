"""The Layer interface: Caffe's template method.

A subclass declares its blob counts as class attributes and implements ``reshape``,
``forward`` and (if differentiable) ``backward``. :meth:`Layer.setup` is final.
"""
import numpy as np

from ..blob import Blob
from ..errors import LayerSetupError
from ..fillers import fill
from ..kernels.relu import relu_backward, relu_forward
from ..proto.io import blob_to_array
from ..random import new_rng

__all__ = ['Layer', 'LossLayer', 'NeuronLayer']


class Layer:
    """Base of every layer.

    Class attributes a subclass may set:

    * ``exact_num_bottom`` / ``min_num_bottom`` / ``max_num_bottom`` and the same for tops:
      checked by :meth:`setup` (None = unchecked).
    * ``auto_top_blobs``: the Net creates anonymous tops up to the minimum/exact count.
    * ``is_loss``: a LossLayer (first top gets loss_weight 1 unless given).

    Instance state: ``layer_param`` (the LayerParameter), ``phase`` (0 TRAIN, 1 TEST),
    ``blobs`` (learnable/stored param blobs; the Net may re-bind their storage, so a layer
    must always go through ``self.blobs[i].data`` and never keep the arrays), ``param_propagate_down``.
    """
    type = None
    exact_num_bottom = min_num_bottom = max_num_bottom = None
    exact_num_top = min_num_top = max_num_top = None
    auto_top_blobs = False
    is_loss = False
    uses_rng = False  # forward draws random numbers: the Net reseeds self.rng per iteration
    # Set by the Net: a later layer picks among values by comparing them (see selects_by_value),
    # so this layer's forward must keep Caffe's exact arithmetic (True outside a Net)
    before_value_selection = True
    # A layer that can apply the in-place ReLU after it (negative slope 0) while it writes its
    # top sets ``fuses_relu``; the Net sets ``relu_on_top`` for one forward call when it runs
    # that ReLU in the same pass (the ReLU's own pass, idempotent, is then skipped)
    fuses_relu = False
    relu_on_top = False
    # A layer whose backward overwrites its bottom diffs sets ``fuses_relu_backward``: it can
    # multiply one of them by the mask of the in-place ReLU below it (bottom data > 0) as it
    # writes it; the Net sets ``relu_below`` (that bottom's index, else -1) for one backward call
    fuses_relu_backward = False
    relu_below = -1

    @property
    def selects_by_value(self):
        """Whether forward picks among values by comparing them (max pooling's argmax,
        Eltwise MAX, ArgMax): a result that differs from Caffe's in its last bits could then
        pick another element. Layers with faster, not bit-identical arithmetic (Winograd
        convolution) use it only when no later layer of the net selects by value."""
        return False

    def relu_on_top_of(self, y):
        """y (a C-contiguous range of this layer's top) through the ReLU the Net fused into
        this forward (``relu_on_top``), as the ReLU layer's own pass computes it; else nothing."""
        if self.relu_on_top:
            flat = y.reshape(-1)
            relu_forward(flat, flat)

    def mask_relu_below(self, bottom, index, lo, hi):
        """Images lo..hi of bottom ``index``'s diff times (its data > 0), if the Net fused the
        ReLU below into this backward there (``relu_below``); else nothing."""
        if index == self.relu_below:
            x, dx = bottom[index].data, bottom[index].diff
            relu_backward(x[lo:hi].reshape(-1), dx[lo:hi].reshape(-1), dx[lo:hi].reshape(-1))

    def __init__(self, layer_param, phase=1):
        self.layer_param = layer_param
        self.phase = phase
        self.blobs = []
        self.loss_weights = []
        self.param_propagate_down = []
        self.param_diffs_to_overwrite = set()  # set by the Net (see overwritable_param_diffs)
        # Generator for fillers and random layers: reproducible after caffe.set_random_seed.
        self.rng = new_rng('layer', layer_param.name, layer_param.type)
        for bp in layer_param.blobs:  # blobs stored in the definition (e.g. a binary net)
            array = blob_to_array(bp)
            self.add_param_blob(array.shape).data[...] = array

    @property
    def name(self):
        return self.layer_param.name

    def error(self, message):
        """A LayerSetupError naming this layer."""
        return LayerSetupError('layer "%s" (type %s): %s' % (self.name, self.layer_param.type, message))

    # -- the template method (final) ----------------------------------------------------------
    def setup(self, bottom, top):
        """Check blob counts, then ``layer_setup``, ``reshape`` and the loss weights. Final."""
        self.check_blob_counts(bottom, top)
        self.layer_setup(bottom, top)
        self.reshape(bottom, top)
        self.set_loss_weights(top)
        while len(self.param_propagate_down) < len(self.blobs):
            self.param_propagate_down.append(True)

    def check_blob_counts(self, bottom, top):
        for what, blobs in (('bottom', bottom), ('top', top)):
            n = len(blobs)
            exact = getattr(self, 'exact_num_' + what)
            low = getattr(self, 'min_num_' + what)
            high = getattr(self, 'max_num_' + what)
            if exact is not None and n != exact:
                raise self.error('takes exactly %d %s blob(s), got %d' % (exact, what, n))
            if low is not None and n < low:
                raise self.error('takes at least %d %s blob(s), got %d' % (low, what, n))
            if high is not None and n > high:
                raise self.error('takes at most %d %s blob(s), got %d' % (high, what, n))

    def set_loss_weights(self, top):
        weights = list(self.layer_param.loss_weight)
        if self.is_loss and not weights:
            weights = [1.0]
        self.loss_weights = [0.0] * len(top)
        if not weights:
            return
        if len(weights) != len(top):
            raise self.error('loss_weight must be unspecified or given once per top blob '
                             '(%d tops, %d loss_weight values)' % (len(top), len(weights)))
        for i, w in enumerate(weights):
            if w != 0:
                self.loss_weights[i] = float(np.float32(w))
                top[i].diff[...] = w

    def loss(self, top_index):
        return self.loss_weights[top_index] if top_index < len(self.loss_weights) else 0.0

    # -- hooks ------------------------------------------------------------------------------
    def layer_setup(self, bottom, top):
        """One-time setup: read parameters, create and fill ``self.blobs``. Must not assume
        final bottom shapes beyond what ``reshape`` re-checks."""

    def reshape(self, bottom, top):
        """Set top shapes (and internal buffers) from bottom shapes. Called before every
        forward. Must not touch data values."""
        raise NotImplementedError

    def forward(self, bottom, top):
        """Compute top data from bottom data (and ``self.blobs``). Must not write diffs,
        except where Caffe does (HingeLoss)."""
        raise NotImplementedError

    def backward(self, top, propagate_down, bottom):
        """Compute bottom diffs (overwrite) for bottoms with ``propagate_down[i]`` and
        *accumulate* param diffs for params with ``param_propagate_down[i]``."""
        raise self.error('backward is not implemented for this layer type (as in Caffe)')

    def overwritable_param_diffs(self):
        """Indexes of ``self.blobs`` whose diffs this layer's ``backward`` can write whole, not
        add to, after the solver clears them: for each such index in
        ``self.param_diffs_to_overwrite`` (which the Net fills before a solver's pass, and only
        for blobs this layer alone uses and propagates to), the next ``backward`` must write that
        diff (what adding to zeros would give), not read it, and discard the index. Default:
        none."""
        return ()

    def backward_compiles(self):
        """The kernel compiles this layer's first ``backward`` will need, as (kernel, args)
        pairs for :func:`pycaffe_ft.kernels.tiered.ahead`. A Net building a training net hands
        them to the compile worker, so that they compile on the other core while the first
        forward passes run. Called once the net is built (``param_propagate_down`` set); must
        not compile, allocate large buffers or depend on data. Default: none."""
        return []

    def allow_force_backward(self, bottom_index):
        return True

    def set_iteration(self, iteration, worker=0, pass_index=0):
        """Key this layer's random stream by (seed, layer, worker, iteration, pass): results do
        not depend on which process computes what, and a resumed run repeats them exactly."""
        if self.uses_rng:
            self.rng = new_rng('layer', self.layer_param.name, self.layer_param.type, worker,
                               iteration, pass_index)

    # -- helpers for subclasses ------------------------------------------------------------
    def add_param_blob(self, shape):
        blob = Blob(shape)
        self.blobs.append(blob)
        return blob

    def init_params(self, shapes, fillers):
        """Create and fill param blobs of ``shapes`` with ``fillers`` (FillerParameters, or
        None to leave zeros); if the definition already carried blobs, check their shapes."""
        if self.blobs:
            if len(self.blobs) != len(shapes):
                raise self.error('the definition carries %d param blobs, expected %d'
                                 % (len(self.blobs), len(shapes)))
            for i, (blob, shape) in enumerate(zip(self.blobs, shapes)):
                if tuple(blob.shape) != tuple(shape):
                    raise self.error('param blob %d has shape %s, expected %s'
                                     % (i, list(blob.shape), list(shape)))
            return
        for shape, filler in zip(shapes, fillers):
            blob = self.add_param_blob(shape)
            if filler is not None:
                fill(filler, blob.data, self.rng)

    def run_forward(self, bottom, top):
        """Reshape, forward and return this layer's weighted loss (Caffe's Layer::Forward)."""
        self.reshape(bottom, top)
        self.forward(bottom, top)
        loss = 0.0
        for i, w in enumerate(self.loss_weights):
            if w:
                loss += float(np.dot(top[i].data.ravel().astype(np.float64),
                                     top[i].diff.ravel().astype(np.float64)))
        return loss


class LossLayer(Layer):
    """Loss layers: two bottoms (prediction, target) by default; top 0 gets loss_weight 1; a
    missing top is created anonymously."""
    is_loss = True
    auto_top_blobs = True
    exact_num_bottom = 2
    exact_num_top = 1

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1

    def reshape(self, bottom, top):
        if bottom[0].shape[0] != bottom[1].shape[0]:
            raise self.error('the data and label should have the same first dimension '
                             '(%s vs %s)' % (list(bottom[0].shape), list(bottom[1].shape)))
        top[0].reshape(())


class NeuronLayer(Layer):
    """Elementwise layers: one bottom, one top of the same shape (may be in place)."""
    exact_num_bottom = 1
    exact_num_top = 1

    def reshape(self, bottom, top):
        if top[0] is not bottom[0]:
            top[0].reshape(bottom[0].shape)
