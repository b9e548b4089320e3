"""Input and DummyData: data-source layers that need no dataset."""
from ..fillers import fill
from ..registry import LAYERS
from .base import Layer

__all__ = ['InputLayer', 'DummyDataLayer']


def _shapes(layer, shape_msgs, count, what):
    if len(shape_msgs) not in (1, count):
        raise layer.error('%s must be given once, or once per top (%d tops), got %d'
                          % (what, count, len(shape_msgs)))
    return [tuple(shape_msgs[i if len(shape_msgs) > 1 else 0].dim) for i in range(count)]


@LAYERS.register('Input')
class InputLayer(Layer):
    """Tops of fixed shapes whose data the user (or a solver) sets."""
    type = 'Input'
    exact_num_bottom = 0
    min_num_top = 1

    def layer_setup(self, bottom, top):
        shapes = self.layer_param.input_param.shape
        if len(shapes) == 0:
            return
        for t, shape in zip(top, _shapes(self, shapes, len(top), 'input_param shape')):
            t.reshape(shape)

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        pass


@LAYERS.register('DummyData', v1_name='DUMMY_DATA')
class DummyDataLayer(Layer):
    """Tops filled by ``data_filler``s: constant fillers once, others at every forward."""
    type = 'DummyData'
    uses_rng = True
    exact_num_bottom = 0
    min_num_top = 1

    def layer_setup(self, bottom, top):
        p = self.layer_param.dummy_data_param
        n = len(top)
        if len(p.shape):
            if len(p.num) or len(p.channels) or len(p.height) or len(p.width):
                raise self.error('both shape and num, channels, height or width are specified; '
                                 'use only shape')
            shapes = _shapes(self, p.shape, n, 'dummy_data_param shape')
        else:
            legacy = [list(p.num), list(p.channels), list(p.height), list(p.width)]
            for values, name in zip(legacy, ('num', 'channels', 'height', 'width')):
                if len(values) not in (1, n):
                    raise self.error('%s must be given once or once per top (%d), got %d'
                                     % (name, n, len(values)))
            shapes = [tuple(v[i if len(v) > 1 else 0] for v in legacy) for i in range(n)]
        if len(p.data_filler) not in (0, 1, n):
            raise self.error('data_filler must be given 0, 1 or %d times, got %d' % (n, len(p.data_filler)))
        if len(p.data_filler) == 0:
            from ..proto import caffe_pb2
            fillers = [caffe_pb2.FillerParameter(type='constant', value=0)] * n
        else:
            fillers = [p.data_filler[i if len(p.data_filler) > 1 else 0] for i in range(n)]
        self.fillers = fillers
        for t, shape, f in zip(top, shapes, fillers):
            t.reshape(shape)
            fill(f, t.data, self.rng)
        self.refill = [f.type != 'constant' for f in fillers]

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        for t, f, again in zip(top, self.fillers, self.refill):
            if again:
                fill(f, t.data, self.rng)

    def backward(self, top, propagate_down, bottom):
        pass
