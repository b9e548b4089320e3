"""The ../shared/corpus/ conformance suite: real prototxts parse, upgrade and build.

* Every file needing no fork field parses and upgrades (nets and solvers).
* Every file needing a fork's field fails with an error naming that field, file and line.
* Every BVLC-only net builds in TEST phase (data layers replaced by Input layers of the
  right shape) and runs forward on random input; nets with fork layer types fail naming them.
"""
import csv
import os

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.errors import CaffeError, PrototxtError, UnknownLayerTypeError
from pycaffe_ft.netspec_io import load_net_param, load_solver_param
from pycaffe_ft.synthetic_inputs import replace_data_layers
from tests.helpers import SHARED, shared_path

# Data shapes the prototxt cannot tell (HDF5 datasets): from the BVLC examples' own data.
HDF5_SHAPES = {'data': (10, 4), 'label': (10,)}


def manifest():
    path = os.path.join(SHARED, 'corpus', 'MANIFEST.tsv')
    if not os.path.exists(path):
        return [{'local_path': '<missing>'}]
    with open(path) as f:
        return list(csv.DictReader(f, delimiter='\t'))


ROWS = manifest()
IDS = [r['local_path'] for r in ROWS]


def _load(row):
    path = shared_path('corpus', row['local_path'])
    if row['format'] == 'SolverParameter':
        return load_solver_param(path)
    return load_net_param(path)


def _fork_fields(row):
    value = row['fields_not_in_bvlc_proto']
    if value == '-':
        return []
    return [f for f in value.split(',') if not f.startswith('bad-value') and not f.startswith('(')]


@pytest.mark.parametrize('row', ROWS, ids=IDS)
def test_parse_and_upgrade(row):
    if row['local_path'] == '<missing>':
        shared_path('corpus', 'MANIFEST.tsv')
    forks = _fork_fields(row)
    if row['fields_not_in_bvlc_proto'] == '-':
        result = _load(row)
        if row['format'] != 'SolverParameter':
            param, _ = result
            assert len(param.layers) == 0 and len(param.input) == 0
            assert len(param.layer) > 0
        else:
            assert not result.HasField('solver_type')
        return
    with pytest.raises(PrototxtError) as info:
        _load(row)
    message = str(info.value)
    assert row['local_path'].split('/')[-1] in message
    assert info.value.line is not None
    if forks:
        assert any(f.split('.')[-1] in message for f in forks), message


def fill_like_golden(net):
    """Params by ../shared/golden/nets/fill_params.py's rule (scaled so deep nets stay finite,
    unlike the prototxts' own deploy fillers), inputs U(-1, 1), labels in [0, 2)."""
    fill = load_fill_module()
    layers = [{'name': n, 'type': l.type, 'num_bottoms': len(net.bottom_ids[i]),
               'param_shapes': [list(b.shape) for b in l.blobs], 'shared_with': [None] * len(l.blobs)}
              for i, (n, l) in enumerate(zip(net._layer_names, net.layers))]
    for (layer_id, j), owner in zip(net._param_layer_indices, net._param_owners):
        if owner >= 0:
            owner_layer, owner_j = net._param_layer_indices[owner]
            layers[layer_id]['shared_with'][j] = [net._layer_names[owner_layer], owner_j]
    values = fill.fill_params(layers)
    for (layer_id, j) in net._param_layer_indices:
        net.layers[layer_id].blobs[j].data[...] = values[(net._layer_names[layer_id], j)]
    rng = np.random.default_rng(0)
    for name in net.inputs:
        blob = net.blobs[name]
        blob.data[...] = rng.integers(0, 2, blob.shape) if 'label' in name else rng.uniform(-1, 1, blob.shape)


def cap_batch(param, batch=2):
    """Input shapes with the batch dimension capped (as the golden recorder did): the suite
    checks shapes and finiteness, not throughput."""
    for lp in param.layer:
        if lp.type == 'Input':
            for shape in lp.input_param.shape:
                if len(shape.dim):
                    shape.dim[0] = min(shape.dim[0], batch)
    return param


def load_fill_module():
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        'golden_fill_params', shared_path('golden', 'nets', 'fill_params.py'))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _custom_types(flag):
    """(fork layer types, Python layer module paths) named by a MANIFEST custom_layer_flag."""
    custom, python = [], []
    for part in flag.split(';') if flag != '-' else []:
        kind, _, names = part.partition(':')
        (custom if kind == 'CUSTOM' else python).extend(names.split(','))
    return custom, python


def _test_stages(param):
    """Stages to build the TEST net with: none, unless every TEST data layer needs one (Caffe's
    mnist_autoencoder: "test-on-test"); then the last such stage, as the golden recorder did."""
    stages = []
    for lp in param.layer:
        for rule in lp.include:
            if rule.phase == caffe.TEST and len(rule.stage):
                stages.append(rule.stage[0])
    needs = stages and not any(
        any(r.phase == caffe.TEST and not len(r.stage) for r in lp.include)
        for lp in param.layer if lp.type in ('Data', 'ImageData', 'HDF5Data', 'WindowData', 'MemoryData'))
    return stages[-1:] if needs else []


def _bvlc_net_rows():
    return [r for r in ROWS if r.get('format') in ('V1', 'V2') and r['fields_not_in_bvlc_proto'] == '-']


NET_ROWS = _bvlc_net_rows() or ROWS[:1]


@pytest.mark.parametrize('row', NET_ROWS, ids=[r['local_path'] for r in NET_ROWS])
def test_build_and_forward(row):
    if row['local_path'] == '<missing>':
        shared_path('corpus', 'MANIFEST.tsv')
    param, source = load_net_param(shared_path('corpus', row['local_path']))
    types = {lp.type for lp in param.layer}
    custom, python_modules = _custom_types(row['custom_layer_flag'])
    missing = sorted(t for t in types - set(custom) if t not in caffe.layer_type_list()
                     and t not in ('Data', 'ImageData', 'HDF5Data', 'WindowData', 'MemoryData'))
    if missing:
        pytest.skip('layer types not implemented yet: %s' % ', '.join(missing))
    if custom or python_modules:
        with pytest.raises(CaffeError) as info:
            net_param, _ = replace_data_layers(param, HDF5_SHAPES)
            caffe.Net(net_param, caffe.TEST)
        names = custom + [m.split('.')[0] for m in python_modules]
        assert any(n in str(info.value) for n in names), str(info.value)
        return
    net_param, _ = replace_data_layers(param, HDF5_SHAPES if 'HDF5Data' in types else None)
    net = caffe.Net(cap_batch(net_param), caffe.TEST, stages=_test_stages(param))
    fill_like_golden(net)
    net.forward()
    for name, blob in net.blobs.items():
        assert np.all(np.isfinite(blob.data)), name
