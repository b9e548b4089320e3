"""Split (automatic fan-out) and Silence."""
from ..registry import LAYERS
from .base import Layer

__all__ = ['SplitLayer', 'SilenceLayer']


@LAYERS.register('Split', v1_name='SPLIT')
class SplitLayer(Layer):
    """Every top shares the bottom's data; backward sums the top diffs."""
    type = 'Split'
    exact_num_bottom = 1
    min_num_top = 1

    def reshape(self, bottom, top):
        for t in top:
            if t is not bottom[0]:
                t.reshape(bottom[0].shape)
                t.share_data(bottom[0])

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        if not propagate_down[0]:
            return
        diff = bottom[0].diff
        diff[...] = top[0].diff
        for t in top[1:]:
            diff += t.diff


@LAYERS.register('Silence', v1_name='SILENCE')
class SilenceLayer(Layer):
    """Consumes bottoms, produces nothing; backward writes zero diffs."""
    type = 'Silence'
    min_num_bottom = 1
    exact_num_top = 0

    def reshape(self, bottom, top):
        pass

    def forward(self, bottom, top):
        pass

    def backward(self, top, propagate_down, bottom):
        for b, down in zip(bottom, propagate_down):
            if down:
                b.diff[...] = 0
