"""The classic pycaffe flows in examples/ run unchanged (short versions)."""
import os
import subprocess
import sys

import numpy as np

from tests.helpers import ROOT


def run_example(*args, cwd=None):
    env = dict(os.environ, GLOG_minloglevel='1')
    p = subprocess.run([sys.executable] + list(args), cwd=cwd or ROOT, env=env, capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout


def test_learning_lenet_notebook_flow(tmp_path):
    out = run_example(os.path.join(ROOT, 'examples', 'learning_lenet.py'), '60', str(tmp_path))
    last = out.strip().splitlines()[-1]
    first_loss, last_loss = float(last.split()[2].rstrip(',')), float(last.split()[5].rstrip(','))
    accuracy = float(last.split()[-1])
    assert last_loss < first_loss / 2 and accuracy > 0.7
    assert (tmp_path / 'lenet_auto_train.prototxt').exists()


def test_net_surgery_fc_to_conv(tmp_path):
    out = run_example(os.path.join(ROOT, 'examples', 'net_surgery.py'), str(tmp_path))
    assert '(1, 10, 4, 4)' in out


def test_python_euclidean_loss_trains_inside_a_net():
    out = run_example(os.path.join(ROOT, 'examples', 'pyloss', 'train_linreg.py'), '200')
    w = out.split('learned w [')[1].split(']')[0].split()
    assert np.allclose([float(v) for v in w], [1.5, -2.0, 0.5], atol=0.05)


def test_opt_in_caffe_alias(tmp_path):
    from pycaffe_ft.alias import install_alias
    install_alias(str(tmp_path))
    code = ('import sys; sys.path.insert(0, %r); import caffe; from caffe.proto import caffe_pb2; '
            'import caffe.io; net = caffe.Net("layer { name: \\"i\\" type: \\"Input\\" top: \\"x\\" '
            'input_param { shape { dim: 1 } } }", caffe.TEST); print(caffe.__version__, caffe_pb2.TEST, '
            'caffe.io.Transformer.__name__, net.inputs)' % str(tmp_path))
    out = run_example('-c', code)
    assert "Transformer ['x']" in out
    real = tmp_path / 'other'
    (real / 'caffe').mkdir(parents=True)
    (real / 'caffe' / '__init__.py').write_text('# a real caffe\n')
    import pytest
    from pycaffe_ft.errors import CaffeError
    with pytest.raises(CaffeError, match='not touching'):
        install_alias(str(real))
