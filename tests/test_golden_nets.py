"""Whole nets recorded with real Caffe (../shared/golden/nets/): same layer list (auto Split
layers included), blob and param shapes, fill, and forward/backward statistics within the
tolerances its README suggests. Nets whose forward took Caffe over 0.5 s are marked slow."""
import hashlib
import importlib.util
import json
import os

import numpy as np
import pytest

import pycaffe_ft as caffe
from tests.helpers import SHARED, shared_path

NETS_DIR = os.path.join(SHARED, 'golden', 'nets')


def _net_ids():
    index = os.path.join(NETS_DIR, 'index.tsv')
    if not os.path.exists(index):  # a fresh clone: these skip with the reason (fail under CI)
        return [pytest.param('<missing>'), pytest.param('<missing, slow>', marks=[pytest.mark.slow])]
    params = []
    with open(index) as f:
        header = f.readline().rstrip('\n').split('\t')
        for line in f:
            row = dict(zip(header, line.rstrip('\n').split('\t')))
            slow = float(row['forward_s'] or 0) > 0.5 or float(row['backward_s'] or 0) > 0.5
            params.append(pytest.param(row['id'], marks=[pytest.mark.slow] if slow else []))
    return params


def _fill_module():
    spec = importlib.util.spec_from_file_location('golden_fill_params',
                                                  shared_path('golden', 'nets', 'fill_params.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _json(d, name):
    with open(os.path.join(d, name)) as f:
        return json.load(f)


def _check_stats(ours, ref, what, rel, softmax=False):
    """Compare recorded statistics of one blob (values / diffs)."""
    ours = np.asarray(ours, np.float64).ravel()
    std = ref['std'] if ref['std'] else abs(ref['mean'])
    scale = max(abs(ref['min']), abs(ref['max']))
    tol = (2e-3 if softmax else rel) * std + 1e-7 * scale
    count = ref['count']
    sampled = list(ours[:16]) + [ours[(k * count) // 16] for k in range(16)] if count >= 16 else list(ours)
    ref_sampled = ref['first16'] + ref['strided16'] if count >= 16 else ref['first16']
    problems = []
    for name, a, b in (('mean', ours.mean(), ref['mean']), ('std', ours.std(), ref['std']),
                       ('min', ours.min(), ref['min']), ('max', ours.max(), ref['max'])):
        if abs(a - b) > tol:
            problems.append('%s %s: %.9g vs Caffe %.9g (tol %.3g)' % (what, name, a, b, tol))
    errors = np.abs(np.asarray(sampled) - np.asarray(ref_sampled))
    if errors.size and errors.max() > tol:
        problems.append('%s values: max error %.3g (tol %.3g)' % (what, errors.max(), tol))
    return problems


def _check_stats_loose(ours, ref, what, errors_out):
    """Deep nets' backward (README): mean/std within 5e-2 std per blob; the sampled values of
    the whole net within 1e-3 std for >= 85% of them (collected in ``errors_out``), all 0.3."""
    ours = np.asarray(ours, np.float64).ravel()
    std = ref['std'] if ref['std'] else abs(ref['mean']) or 1e-30
    problems = []
    if abs(ours.mean() - ref['mean']) > 5e-2 * std or abs(ours.std() - ref['std']) > 5e-2 * std:
        problems.append('%s mean/std %.6g/%.6g vs %.6g/%.6g' % (what, ours.mean(), ours.std(), ref['mean'], ref['std']))
    count = ref['count']
    sampled = list(ours[:16]) + [ours[(k * count) // 16] for k in range(16)] if count >= 16 else list(ours)
    ref_sampled = ref['first16'] + ref['strided16'] if count >= 16 else ref['first16']
    errors = np.abs(np.asarray(sampled) - np.asarray(ref_sampled)) / std
    errors_out.extend(errors.tolist())
    if errors.size and errors.max() > 0.3:
        problems.append('%s sampled value off by %.3g std' % (what, errors.max()))
    return problems


@pytest.mark.parametrize('net_id', _net_ids())
def test_golden_net(net_id):
    d = shared_path('golden', 'nets', 'nets', net_id)
    meta, shapes, fwd = _json(d, 'meta.json'), _json(d, 'shapes.json'), _json(d, 'forward.json')
    types = {l['type'] for l in shapes['layers']}
    missing = sorted(t for t in types if t not in caffe.layer_type_list())
    if missing:
        pytest.skip('layer types not implemented yet: %s' % ', '.join(missing))
    net = caffe.Net(os.path.join(d, 'net.prototxt'), caffe.TEST, stages=meta.get('stages') or ())
    # structure
    names = lambda ids: [net._blob_names[i] for i in ids]  # noqa: E731 (layer names may repeat)
    ours = [(n, l.type, names(b), names(t)) for n, l, b, t in
            zip(net._layer_names, net.layers, net.bottom_ids, net.top_ids)]
    theirs = [(l['name'], l['type'], l['bottoms'], l['tops']) for l in shapes['layers']]
    assert ours == theirs
    for layer, l in zip(net.layers, shapes['layers']):
        assert [list(b.shape) for b in layer.blobs] == l['param_shapes'], l['name']
    assert [(n, list(b.shape)) for n, b in net.blobs.items()] == \
        [(b['name'], b['shape']) for b in shapes['blobs']]
    assert net.inputs == shapes['inputs'] and net.outputs == shapes['outputs']
    # fill exactly as recorded
    fill = _fill_module()
    values = fill.fill_params(shapes['layers'])
    by_name = {}
    for name, layer in zip(net._layer_names, net.layers):
        by_name.setdefault(name, layer)
    for p in shapes['params']:
        arr = values[(p['layer'], p['index'])]
        assert hashlib.sha256(arr.tobytes()).hexdigest() == p['fill_sha256']
        by_name[p['layer']].blobs[p['index']].data[...] = arr
    for name, arr in fill.fill_inputs(meta['inputs']).items():
        net.blobs[name].data[...] = arr
    loss = net.forward_from_to()
    softmax_blobs = {b['name'] for b in shapes['blobs']
                     if b.get('last_written_by') and by_name[b['last_written_by']].type == 'Softmax'}
    problems = []
    for name, ref in fwd['blobs'].items():
        problems += _check_stats(net.blobs[name].data, ref, 'forward %s' % name, 1e-4,
                                 softmax=name in softmax_blobs)
    if fwd.get('loss') is not None:
        assert abs(loss - fwd['loss']) <= 1e-4 * max(1.0, abs(fwd['loss']))
    assert not problems, '\n'.join(problems[:20])
    if not os.path.exists(os.path.join(d, 'backward.json')):
        return
    bwd = _json(d, 'backward.json')
    for start, end in bwd['segments']:
        net.backward_from_to(start, end)
    small = 'BatchNorm' not in types and len(shapes['layers']) <= 30
    errors = []
    check = (lambda a, r, w: _check_stats(a, r, w, 1e-4)) if small else \
        (lambda a, r, w: _check_stats_loose(a, r, w, errors))
    for p, ref in zip(shapes['params'], bwd['param_diffs']):
        problems += check(by_name[p['layer']].blobs[p['index']].diff, ref,
                          'param diff %s/%d' % (p['layer'], p['index']))
    for name, ref in bwd['blob_diffs'].items():
        problems += check(net.blobs[name].diff, ref, 'diff %s' % name)
    if errors:
        share = np.mean(np.asarray(errors) <= 1e-3)
        if share < 0.85:
            problems.append('only %.0f%% of sampled diff values within 1e-3 std' % (100 * share))
    assert not problems, '\n'.join(problems[:20])
