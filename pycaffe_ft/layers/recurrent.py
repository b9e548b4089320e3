"""Recurrent layers: LSTM, RNN (Caffe's unrolled-net semantics, computed directly) and LSTMUnit.

Bottoms: x (T, N, ...), cont (T, N) (0 starts a new sequence), [x_static (N, ...)],
[h_0 (1, N, H) [, c_0 (1, N, H)] with expose_hidden]. Tops: h or o (T, N, H) [, h_T [, c_T]].
LSTM gates are ordered [i, f, o, g]; c_t = cont_t f c_{t-1} + i g, h_t = o tanh(c_t), and
h_{t-1} is multiplied by cont_t before W_hc. RNN: h_t = tanh(W_hh (cont_t h_{t-1}) + W_xh x_t
+ b_h), o_t = tanh(W_ho h_t + b_o).

With expose_hidden, Caffe shares only the *data* of h_0/c_0 and h_T/c_T with its unrolled net
(``ShareData``, not ``ShareDiff``): diffs written into the h_T/c_T tops do not flow back, and
the h_0/c_0 bottoms receive no diff (left as they are). This matches it.
"""
import numpy as np

from ..registry import LAYERS
from .base import Layer

__all__ = ['LSTMLayer', 'RNNLayer', 'LSTMUnitLayer']


def _sigmoid(x):
    return np.float32(0.5) * np.tanh(np.float32(0.5) * x) + np.float32(0.5)


class _RecurrentLayer(Layer):
    min_num_bottom = 2
    max_num_bottom = 5
    min_num_top = 1
    n_states = 1  # recurrent state blobs (h; LSTM also c)

    def allow_force_backward(self, bottom_index):
        return bottom_index != 1  # never to the sequence continuation markers

    def layer_setup(self, bottom, top):
        p = self.layer_param.recurrent_param
        self.hidden = p.num_output
        if self.hidden <= 0:
            raise self.error('recurrent_param.num_output must be positive')
        self.expose_hidden = p.expose_hidden
        extra = len(bottom) - 2 - (self.n_states if self.expose_hidden else 0)
        if extra not in (0, 1):
            raise self.error('expects bottoms x, cont, [x_static]%s; got %d bottoms' % (
                ', ' + ', '.join(self.state_names('0')) if self.expose_hidden else '', len(bottom)))
        self.static = extra == 1
        want_tops = 1 + (self.n_states if self.expose_hidden else 0)
        if len(top) != want_tops:
            raise self.error('expects %d tops, got %d' % (want_tops, len(top)))
        x = bottom[0]
        if x.num_axes < 2:
            raise self.error('x must have at least 2 axes (T, N, ...), got %s' % (list(x.shape),))
        self.input_dim = x.count_range(2)
        self.static_dim = bottom[2].count_range(1) if self.static else 0
        self.init_params(*self.param_shapes_and_fillers(p))

    def state_names(self, suffix):
        return ['h_' + suffix]

    def reshape(self, bottom, top):
        x, cont = bottom[0], bottom[1]
        self.T, self.N = x.shape[0], x.shape[1]
        if cont.shape != (self.T, self.N):
            raise self.error('cont must have shape (T, N) = %s, got %s' % ([self.T, self.N], list(cont.shape)))
        if x.count_range(2) != self.input_dim:
            raise self.error('input dimension changed from %d to %d' % (self.input_dim, x.count_range(2)))
        first_state = 3 if self.static else 2
        for b in bottom[first_state:]:
            if b.shape != (1, self.N, self.hidden):
                raise self.error('state bottoms must have shape %s, got %s' % ([1, self.N, self.hidden], list(b.shape)))
        top[0].reshape((self.T, self.N, self.hidden))
        for t in top[1:]:
            t.reshape((1, self.N, self.hidden))

    def _inputs(self, bottom):
        x = bottom[0].data.reshape(self.T, self.N, self.input_dim)
        cont = bottom[1].data.reshape(self.T, self.N, 1)
        static = bottom[2].data.reshape(self.N, self.static_dim) if self.static else None
        states = bottom[3 if self.static else 2:]
        return x, cont, static, states

    def _diff_inputs(self, bottom, propagate_down, dx, dstatic):
        """x and x_static diffs; never cont's, and (as Caffe) none into exposed h_0/c_0."""
        if propagate_down[1]:
            raise self.error('cannot backpropagate to the sequence continuation indicators')
        if propagate_down[0]:
            bottom[0].diff.reshape(self.T, self.N, self.input_dim)[...] = dx
        if self.static and propagate_down[2]:
            bottom[2].diff.reshape(self.N, self.static_dim)[...] = dstatic


@LAYERS.register('LSTM')
class LSTMLayer(_RecurrentLayer):
    """Params: W_xc (4H, I), b_c (4H), [W_xc_x_static (4H, S)], W_hc (4H, H)."""
    type = 'LSTM'
    n_states = 2

    def state_names(self, suffix):
        return ['h_' + suffix, 'c_' + suffix]

    def param_shapes_and_fillers(self, p):
        H = self.hidden
        shapes = [(4 * H, self.input_dim), (4 * H,)]
        fillers = [p.weight_filler, p.bias_filler]
        if self.static:
            shapes.append((4 * H, self.static_dim))
            fillers.append(p.weight_filler)
        shapes.append((4 * H, H))
        fillers.append(p.weight_filler)
        return shapes, fillers

    def forward(self, bottom, top):
        H, T, N = self.hidden, self.T, self.N
        x, cont, static, states = self._inputs(bottom)
        W_hc = self.blobs[-1].data
        pre_x = x @ self.blobs[0].data.T + self.blobs[1].data
        if static is not None:
            pre_x = pre_x + (static @ self.blobs[2].data.T)[None]
        h = states[0].data.reshape(N, H) if self.expose_hidden else np.zeros((N, H), np.float32)
        c = states[1].data.reshape(N, H) if self.expose_hidden else np.zeros((N, H), np.float32)
        self.cache = []
        out = top[0].data.reshape(T, N, H)
        for t in range(T):
            hc = cont[t] * h
            pre = pre_x[t] + hc @ W_hc.T
            i, f, o = _sigmoid(pre[:, :H]), _sigmoid(pre[:, H:2 * H]), _sigmoid(pre[:, 2 * H:3 * H])
            g = np.tanh(pre[:, 3 * H:])
            c_new = cont[t] * f * c + i * g
            tc = np.tanh(c_new)
            h = o * tc
            self.cache.append((hc, c, i, f, o, g, tc))
            c = c_new
            out[t] = h
        if self.expose_hidden:
            top[1].data.reshape(N, H)[...] = h
            top[2].data.reshape(N, H)[...] = c

    def backward(self, top, propagate_down, bottom):
        H, T, N = self.hidden, self.T, self.N
        x, cont, static, _ = self._inputs(bottom)
        W_hc = self.blobs[-1].data
        dy = top[0].diff.reshape(T, N, H)
        dh = np.zeros((N, H), np.float32)  # h_T/c_T top diffs do not flow back (module docstring)
        dc = np.zeros((N, H), np.float32)
        dpre_all = np.empty((T, N, 4 * H), np.float32)
        dW_hc = np.zeros_like(W_hc, dtype=np.float64)
        for t in range(T - 1, -1, -1):
            hc, c_prev, i, f, o, g, tc = self.cache[t]
            dh = dh + dy[t]
            do = dh * tc
            dc = dc + dh * o * (1 - tc * tc)
            dpre = dpre_all[t]
            dpre[:, :H] = dc * g * i * (1 - i)
            dpre[:, H:2 * H] = dc * cont[t] * c_prev * f * (1 - f)
            dpre[:, 2 * H:3 * H] = do * o * (1 - o)
            dpre[:, 3 * H:] = dc * i * (1 - g * g)
            dc = dc * cont[t] * f
            dW_hc += dpre.T @ hc
            dh = (dpre @ W_hc) * cont[t]
        flat = dpre_all.reshape(T * N, 4 * H)
        if self.param_propagate_down[0]:
            self.blobs[0].diff[...] += flat.T @ x.reshape(T * N, -1)
        if self.param_propagate_down[1]:
            self.blobs[1].diff[...] += flat.sum(axis=0)
        dstatic = None
        if self.static:
            dsum = dpre_all.sum(axis=0)
            if self.param_propagate_down[2]:
                self.blobs[2].diff[...] += dsum.T @ static
            dstatic = dsum @ self.blobs[2].data
        if self.param_propagate_down[-1]:
            self.blobs[-1].diff[...] += dW_hc
        dx = dpre_all @ self.blobs[0].data
        self._diff_inputs(bottom, propagate_down, dx, dstatic)


@LAYERS.register('RNN')
class RNNLayer(_RecurrentLayer):
    """Params: W_xh (H, I), b_h (H), [W_xh_x_static (H, S)], W_hh (H, H), W_ho (H, H), b_o (H)."""
    type = 'RNN'

    def param_shapes_and_fillers(self, p):
        H = self.hidden
        shapes = [(H, self.input_dim), (H,)]
        fillers = [p.weight_filler, p.bias_filler]
        if self.static:
            shapes.append((H, self.static_dim))
            fillers.append(p.weight_filler)
        shapes += [(H, H), (H, H), (H,)]
        fillers += [p.weight_filler, p.weight_filler, p.bias_filler]
        return shapes, fillers

    def _params(self):
        b = self.blobs
        k = 3 if self.static else 2
        return b[0], b[1], (b[2] if self.static else None), b[k], b[k + 1], b[k + 2]

    def forward(self, bottom, top):
        H, T, N = self.hidden, self.T, self.N
        x, cont, static, states = self._inputs(bottom)
        W_xh, b_h, W_s, W_hh, W_ho, b_o = self._params()
        pre_x = x @ W_xh.data.T + b_h.data
        if static is not None:
            pre_x = pre_x + (static @ W_s.data.T)[None]
        h = states[0].data.reshape(N, H) if self.expose_hidden else np.zeros((N, H), np.float32)
        out = top[0].data.reshape(T, N, H)
        self.cache = []
        for t in range(T):
            hc = cont[t] * h
            h = np.tanh(pre_x[t] + hc @ W_hh.data.T)
            o = np.tanh(h @ W_ho.data.T + b_o.data)
            self.cache.append((hc, h, o))
            out[t] = o
        if self.expose_hidden:
            top[1].data.reshape(N, H)[...] = h

    def backward(self, top, propagate_down, bottom):
        H, T, N = self.hidden, self.T, self.N
        x, cont, static, _ = self._inputs(bottom)
        W_xh, b_h, W_s, W_hh, W_ho, b_o = self._params()
        dy = top[0].diff.reshape(T, N, H)
        dh_next = np.zeros((N, H), np.float32)  # the h_T top diff does not flow back (module docstring)
        da_all = np.empty((T, N, H), np.float32)
        dW_hh = np.zeros((H, H)); dW_ho = np.zeros((H, H)); db_o = np.zeros(H)
        for t in range(T - 1, -1, -1):
            hc, h, o = self.cache[t]
            do = dy[t] * (1 - o * o)
            dW_ho += do.T @ h
            db_o += do.sum(axis=0)
            dh = do @ W_ho.data + dh_next
            da = dh * (1 - h * h)
            da_all[t] = da
            dW_hh += da.T @ hc
            dh_next = (da @ W_hh.data) * cont[t]
        flat = da_all.reshape(T * N, H)
        pd = self.param_propagate_down
        k = 3 if self.static else 2
        if pd[0]:
            W_xh.diff[...] += flat.T @ x.reshape(T * N, -1)
        if pd[1]:
            b_h.diff[...] += flat.sum(axis=0)
        dstatic = None
        if self.static:
            dsum = da_all.sum(axis=0)
            if pd[2]:
                W_s.diff[...] += dsum.T @ static
            dstatic = dsum @ W_s.data
        if pd[k]:
            W_hh.diff[...] += dW_hh
        if pd[k + 1]:
            W_ho.diff[...] += dW_ho
        if pd[k + 2]:
            b_o.diff[...] += db_o
        self._diff_inputs(bottom, propagate_down, da_all @ W_xh.data, dstatic)


@LAYERS.register('LSTMUnit')
class LSTMUnitLayer(Layer):
    """One LSTM step: bottoms c_prev (1, N, D), gates (1, N, 4D) pre-activations [i, f, o, g],
    cont (1, N); tops c, h (1, N, D)."""
    type = 'LSTMUnit'
    exact_num_bottom = 3
    exact_num_top = 2

    def allow_force_backward(self, bottom_index):
        return bottom_index != 2

    def reshape(self, bottom, top):
        c_prev, gates = bottom[0], bottom[1]
        self.D = c_prev.shape[-1]
        if gates.shape[:-1] != c_prev.shape[:-1] or gates.shape[-1] != 4 * self.D:
            raise self.error('gates must have shape %s, got %s' % (list(c_prev.shape[:-1]) + [4 * self.D], list(gates.shape)))
        self.rows = c_prev.count // self.D
        if bottom[2].count != self.rows:
            raise self.error('cont must hold one value per sequence, shape %s' % (list(bottom[2].shape),))
        top[0].reshape(c_prev.shape)
        top[1].reshape(c_prev.shape)

    def forward(self, bottom, top):
        D = self.D
        c_prev = bottom[0].data.reshape(self.rows, D)
        X = bottom[1].data.reshape(self.rows, 4 * D)
        cont = bottom[2].data.reshape(self.rows, 1)
        i, f, o = _sigmoid(X[:, :D]), _sigmoid(X[:, D:2 * D]), _sigmoid(X[:, 2 * D:3 * D])
        g = np.tanh(X[:, 3 * D:])
        c = cont * f * c_prev + i * g
        tc = np.tanh(c)
        top[0].data.reshape(self.rows, D)[...] = c
        top[1].data.reshape(self.rows, D)[...] = o * tc
        self.cache = (i, f, o, g, tc)

    def backward(self, top, propagate_down, bottom):
        if propagate_down[2]:
            raise self.error('cannot backpropagate to the sequence continuation indicators')
        D = self.D
        i, f, o, g, tc = self.cache
        c_prev = bottom[0].data.reshape(self.rows, D)
        cont = bottom[2].data.reshape(self.rows, 1)
        dc_top = top[0].diff.reshape(self.rows, D)
        dh = top[1].diff.reshape(self.rows, D)
        dc = dc_top + dh * o * (1 - tc * tc)
        if propagate_down[0]:
            bottom[0].diff.reshape(self.rows, D)[...] = dc * cont * f
        if propagate_down[1]:
            dX = bottom[1].diff.reshape(self.rows, 4 * D)
            dX[:, :D] = dc * g * i * (1 - i)
            dX[:, D:2 * D] = dc * cont * c_prev * f * (1 - f)
            dX[:, 2 * D:3 * D] = dh * tc * o * (1 - o)
            dX[:, 3 * D:] = dc * i * (1 - g * g)
