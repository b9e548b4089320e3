"""Seeds for the random parts of pycaffe-ft (fillers, Dropout masks, data shuffling).

There is no hidden global random stream in the kernels: layers and fillers receive an
explicit ``numpy.random.Generator``. ``set_random_seed`` (pycaffe's ``caffe.set_random_seed``)
fixes the seed from which those generators are derived, so runs are reproducible.
"""
import zlib

import numpy as np

__all__ = ['set_random_seed', 'new_rng']

_state = {'seed': None, 'counter': 0}


def set_random_seed(seed):
    _state['seed'] = int(seed)
    _state['counter'] = 0


def new_rng(*keys):
    """A fresh Generator: derived from the seed and ``keys`` if a seed is set, else entropy.

    Without keys, successive calls after one ``set_random_seed`` give successive streams.
    """
    if _state['seed'] is None:
        return np.random.default_rng()
    if not keys:
        _state['counter'] += 1
        keys = ('auto', _state['counter'])
    entropy = [_state['seed'] & 0xFFFFFFFF] + [zlib.crc32(str(k).encode()) for k in keys]
    return np.random.default_rng(np.random.SeedSequence(entropy))
