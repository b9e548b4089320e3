"""Input and DummyData layers."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import LayerSetupError


def test_input_one_shape_per_top_or_shared():
    net = caffe.Net('layer { name: "i" type: "Input" top: "a" top: "b" '
                    'input_param { shape { dim: 2 dim: 3 } } }', caffe.TEST)
    assert net.blobs['a'].shape == (2, 3) and net.blobs['b'].shape == (2, 3)
    with pytest.raises(LayerSetupError):
        caffe.Net('layer { name: "i" type: "Input" top: "a" top: "b" top: "c" input_param { '
                  'shape { dim: 1 } shape { dim: 2 } } }', caffe.TEST)


def test_dummy_data_fillers_shapes_and_refill():
    net = caffe.Net('''layer { name: "d" type: "DummyData" top: "a" top: "b" top: "c"
        dummy_data_param { shape { dim: 2 dim: 3 } shape { dim: 4 } shape { dim: 1 dim: 1 }
          data_filler { type: "constant" value: 7 } data_filler { type: "gaussian" std: 1 }
          data_filler { type: "uniform" min: 2 max: 3 } } }''', caffe.TEST)
    assert net.blobs['a'].shape == (2, 3) and np.all(net.blobs['a'].data == 7)
    first = net.blobs['b'].data.copy()
    net.forward()
    assert not np.array_equal(first, net.blobs['b'].data)  # non-constant fillers refill
    assert 2 <= net.blobs['c'].data.item() <= 3


def test_dummy_data_legacy_dims_and_default_zero():
    net = caffe.Net('layer { name: "d" type: "DummyData" top: "a" dummy_data_param { '
                    'num: 2 channels: 3 height: 4 width: 5 } }', caffe.TEST)
    assert net.blobs['a'].shape == (2, 3, 4, 5) and not np.any(net.blobs['a'].data)
