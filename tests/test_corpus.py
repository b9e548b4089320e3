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


def _custom_types(flag):
    """(fork layer types, Python layer module paths) named by a MANIFEST custom_layer_flag."""
    custom, python = [], []
    for part in flag.split(';') if flag != '-' else []:
        kind, _, names = part.partition(':')
        (custom if kind == 'CUSTOM' else python).extend(names.split(','))
    return custom, python


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
    net = caffe.Net(net_param, caffe.TEST)
    rng = np.random.default_rng(0)
    for name in net.inputs:
        blob = net.blobs[name]
        blob.data[...] = rng.integers(0, 2, blob.shape) if 'label' in name else rng.standard_normal(blob.shape)
    net.forward()
    for name, blob in net.blobs.items():
        assert np.all(np.isfinite(blob.data)), name
