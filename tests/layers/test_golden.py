"""Every case in ../shared/golden/layers/ whose layer type is registered matches real Caffe.

Tolerance: max|ours - caffe| <= TOL * max(1, max|caffe|) per array (float32 relative 1e-4,
the target of the issue); selections and copies are compared exactly.
"""
import json
import os
import shutil

import numpy as np
import pytest

import pycaffe_ft as caffe
from tests.helpers import shared_listing, shared_path

TOL = 1e-4
EXACT_TYPES = {'Accuracy', 'ArgMax', 'Split', 'Silence', 'Concat', 'Slice', 'Flatten', 'Reshape',
               'Tile', 'Crop', 'Filter', 'BatchReindex', 'Im2col', 'Parameter'}
REGRESSION = 'regressions/'  # ../shared/golden/regressions/layers/: cases that once differed
CASES = shared_listing('golden', 'layers') + [REGRESSION + c for c in shared_listing('golden', 'regressions', 'layers')
                                              if c != '<missing>']


def case_dir(name):
    if name.startswith(REGRESSION):
        return shared_path('golden', 'regressions', 'layers', name[len(REGRESSION):])
    return shared_path('golden', 'layers', name)


def load_case(name):
    d = case_dir(name)
    with open(os.path.join(d, 'meta.json')) as f:
        meta = json.load(f)
    return d, meta, dict(np.load(os.path.join(d, 'case.npz')))


def assert_close(ours, golden, what, exact=False):
    ours = np.asarray(ours)
    assert ours.shape == golden.shape, '%s: shape %s, Caffe %s' % (what, ours.shape, golden.shape)
    if exact:
        np.testing.assert_array_equal(ours, golden, err_msg=what)
        return
    err = float(np.abs(ours.astype(np.float64) - golden).max()) if golden.size else 0.0
    scale = max(1.0, float(np.abs(golden).max()) if golden.size else 1.0)
    assert err <= TOL * scale, '%s: max abs error %.3g > %.1g * %.3g' % (what, err, TOL, scale)


def run_case(name, workdir):
    """Build the case's net in its phase, run forward/backward as the recorder did; compare.

    Runs in ``workdir``, a copy of the case directory: relative file names (InfogainLoss
    source, HDF5Output's file) are relative to it, and nothing is written into ../shared/."""
    d, meta, arrays = load_case(name)
    phase = caffe.TRAIN if meta['phase'] == 'TRAIN' else caffe.TEST
    shutil.copytree(d, workdir, dirs_exist_ok=True)
    d = str(workdir)
    cwd = os.getcwd()
    os.chdir(d)
    try:
        net = caffe.Net(os.path.join(d, 'net.prototxt'), phase)
        layer = meta['layer_name']
        params = net.params
        for b in meta['bottoms']:
            value = arrays['bottom/' + b['name']]
            if b['name'] in params and b['provider'] == 'Parameter':
                params[b['name']][0].data[...] = value
            else:
                net.blobs[b['name']].data[...] = value
        for i, p in enumerate(meta['params']):
            params[layer][i].data[...] = arrays[p['key']]
        net.forward()
        exact = meta['layer_type'] in EXACT_TYPES
        if meta['layer_type'] == 'HDF5Output':
            import h5py
            with h5py.File(os.path.join(d, 'out.h5'), 'r') as f:
                for key, value in arrays.items():
                    if key.startswith('hdf5/'):
                        np.testing.assert_array_equal(np.asarray(f[key[5:]]), value)
        for key, value in arrays.items():
            if key.startswith('top/'):
                assert_close(net.blobs[key[4:]].data, value, key, exact)
            elif key.startswith('param_after_forward/'):
                _, lname, i = key.split('/')
                assert_close(params[lname][int(i)].data, value, key)
        if not meta.get('backward_run', False):
            return
        for key, value in arrays.items():
            if key.startswith('top_diff/'):
                net.blobs[key[9:]].diff[...] = value
        net.backward()
        for key, value in arrays.items():
            if key.startswith('bottom_diff/'):
                name = key[len('bottom_diff/'):]
                blob = params[name][0] if name in params else net.blobs[name]
                assert_close(blob.diff, value, key)
            elif key.startswith('param_diff/'):
                _, lname, i = key.split('/')
                assert_close(params[lname][int(i)].diff, value, key)
    finally:
        os.chdir(cwd)


@pytest.mark.parametrize('case', CASES)
def test_golden_layer_case(case, tmp_path):
    d, meta, _ = load_case(case)
    if meta['layer_type'] not in caffe.layer_type_list():
        pytest.skip('layer type %s is not implemented yet' % meta['layer_type'])
    if case.startswith('dropout_train_rng'):
        check_dropout_consistency(case)
        return
    run_case(case, tmp_path / 'case')


def check_dropout_consistency(case):
    """Caffe's Dropout mask comes from its own RNG: check the meta.json's consistency rules on
    our run with the same bottom: top = bottom * mask / (1 - ratio), mask = (top != 0),
    bottom_diff = top_diff * mask / (1 - ratio), kept fraction plausible for 1 - ratio."""
    d, meta, arrays = load_case(case)
    net = caffe.Net(os.path.join(d, 'net.prototxt'), caffe.TRAIN)
    ratio = net.layer_dict[meta['layer_name']].layer_param.dropout_param.dropout_ratio
    x = arrays['bottom/x']
    net.blobs['x'].data[...] = x
    net.forward()
    y = net.blobs['y'].data
    mask = y != 0
    scale = np.float32(1.0 / (1.0 - ratio))
    np.testing.assert_allclose(y, x * mask * scale, rtol=1e-6)
    net.blobs['y'].diff[...] = arrays['top_diff/y']
    net.backward()
    np.testing.assert_allclose(net.blobs['x'].diff, arrays['top_diff/y'] * mask * scale, rtol=1e-6)
    n = mask.size
    sigma = np.sqrt(n * ratio * (1 - ratio))
    assert abs(mask.sum() - n * (1 - ratio)) <= 4 * sigma
    golden_mask = arrays['top/y'] != 0  # Caffe's own run obeys the same rules
    np.testing.assert_allclose(arrays['top/y'], x * golden_mask * scale, rtol=1e-6)
