"""caffe.Classifier and caffe.Detector on a small deploy net; caffe.draw."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from tests.helpers import shared_path

DEPLOY = '''name: "tiny"
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 4 dim: 3 dim: 8 dim: 8 } } }
layer { name: "conv" type: "Convolution" bottom: "data" top: "conv" convolution_param { num_output: 4 kernel_size: 3 weight_filler { type: "gaussian" std: 0.3 } } }
layer { name: "pool" type: "Pooling" bottom: "conv" top: "pool" pooling_param { pool: AVE global_pooling: true } }
layer { name: "ip" type: "InnerProduct" bottom: "pool" top: "ip" inner_product_param { num_output: 5 weight_filler { type: "gaussian" std: 0.5 } } }
layer { name: "prob" type: "Softmax" bottom: "ip" top: "prob" }
'''


@pytest.fixture
def model(tmp_path):
    (tmp_path / 'deploy.prototxt').write_text(DEPLOY)
    caffe.set_random_seed(3)
    net = caffe.Net(str(tmp_path / 'deploy.prototxt'), caffe.TEST)
    net.save(str(tmp_path / 'w.caffemodel'))
    return str(tmp_path / 'deploy.prototxt'), str(tmp_path / 'w.caffemodel')


def test_classifier_predicts_with_and_without_oversampling(model):
    clf = caffe.Classifier(*model, image_dims=(10, 10), mean=np.array([0.5, 0.4, 0.3]), raw_scale=1.0,
                           channel_swap=(2, 1, 0))
    images = [np.random.default_rng(i).random((12, 14, 3)).astype(np.float32) for i in range(3)]
    p = clf.predict(images)
    assert p.shape == (3, 5) and np.allclose(p.sum(1), 1, atol=1e-5)
    q = clf.predict(images, oversample=False)
    assert q.shape == (3, 5)
    # the centre crop by hand through the same transformer
    im = caffe.io.resize_image(images[0], (10, 10))[1:9, 1:9]
    x = clf.transformer.preprocess('data', im)
    ref = caffe.Net(*model, caffe.TEST)
    ref.blobs['data'].reshape(1, 3, 8, 8)
    ref.reshape()
    assert np.allclose(ref.forward(data=x[None])['prob'][0], q[0], atol=1e-5)


def test_detector_scores_windows(model, tmp_path):
    det = caffe.Detector(*model, raw_scale=1.0, context_pad=1, mean=np.array([0.5, 0.5, 0.5]))
    image = shared_path('golden', 'formats', 'images', 'img_00.png')
    out = det.detect_windows([(image, [(0, 0, 10, 10), (5, 6, 20, 25)])])
    assert len(out) == 2 and out[1]['window'] == (5, 6, 20, 25) and out[0]['prediction'].shape == (5,)
    with pytest.raises(caffe.CaffeError, match='selective_search'):
        det.detect_selective_search([image])


def test_draw_net_dot_and_clear_error_without_graphviz(model, tmp_path):
    from pycaffe_ft.netspec_io import load_net_param
    param, _ = load_net_param(model[0])
    out = tmp_path / 'net.dot'
    caffe.draw.draw_net_to_file(param, str(out), 'TB')
    text = out.read_text()
    assert 'digraph' in text and '(Convolution)' in text and 'blob_prob' in text
    try:
        import pydot  # noqa: F401
    except ImportError:
        with pytest.raises(caffe.CaffeError, match='pydot'):
            caffe.draw.draw_net_to_file(param, str(tmp_path / 'net.png'))
