"""Damaged LMDBs: check-db walks them in a child process and names the first unreadable record
(a crash inside liblmdb included); the Data layer names the layer, the database and the key;
a truncated file is refused before liblmdb maps it (no SIGBUS)."""
import os
import random
import shutil
import subprocess
import sys

import lmdb
import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.data.check_db import check_db
from pycaffe_ft.data.datum import array_to_datum
from pycaffe_ft.data.db import LMDBReader
from pycaffe_ft.errors import DataError
from pycaffe_ft.proto import caffe_pb2


def make_db(path, n=300, bad_at=None, empty_at=None):
    env = lmdb.open(str(path), map_size=1 << 26)
    with env.begin(write=True) as txn:
        for i in range(n):
            if i == empty_at:
                value = caffe_pb2.Datum(label=0).SerializeToString()
            elif i == bad_at:
                value = b'\xff\xff\xff not a datum'
            else:
                value = array_to_datum(np.full((1, 28, 28), i % 256, np.uint8), i % 10).SerializeToString()
            txn.put(b'%08d' % i, value)
    env.close()
    return str(path)


def net_on(db, tmp_path):
    (tmp_path / 'net.prototxt').write_text(
        'layer { name: "mnist" type: "Data" top: "data" top: "label" data_param { source: "%s" batch_size: 4 backend: LMDB } }\n'
        'layer { name: "ip" type: "InnerProduct" bottom: "data" top: "ip" inner_product_param { num_output: 2 '
        'weight_filler { type: "xavier" } } }\n' % db)
    return str(tmp_path / 'net.prototxt')


def test_a_good_database_checks_clean(tmp_path):
    report = check_db(make_db(tmp_path / 'ok'))
    assert report['status'] == 'ok' and report['records'] == 300


def test_a_bad_record_is_named_by_check_db_and_by_the_data_layer(tmp_path):
    db = make_db(tmp_path / 'bad', bad_at=5)
    report = check_db(db)
    assert (report['status'], report['records'], report['index'], bytes.fromhex(report['key'])) == \
        ('bad record', 5, 5, b'00000005')
    before = open(os.path.join(db, 'data.mdb'), 'rb').read()
    net = caffe.Net(net_on(db, tmp_path), caffe.TRAIN)
    net.forward()  # records 0-3
    with pytest.raises(DataError, match=r'layer "mnist": .*bad: record b\'00000005\' is not a serialized caffe.Datum'):
        net.forward()
    assert open(os.path.join(db, 'data.mdb'), 'rb').read() == before


def test_an_empty_first_record_is_a_data_error_not_a_filler_crash(tmp_path):
    db = make_db(tmp_path / 'empty', empty_at=0)
    with pytest.raises(caffe.CaffeError, match=r'layer "mnist".*empty: record b\'00000000\': a Datum of shape 0x0x0 holds no pixels'):
        caffe.Net(net_on(db, tmp_path), caffe.TRAIN)
    assert check_db(db)['status'] == 'bad record'


def test_a_truncated_database_is_refused_before_it_is_mapped(tmp_path):
    db = make_db(tmp_path / 'trunc')
    data = os.path.join(db, 'data.mdb')
    os.truncate(data, os.path.getsize(data) // 2)
    with pytest.raises(DataError, match='is truncated'):
        LMDBReader(db)
    code = 'import pycaffe_ft as caffe\ncaffe.Net(%r, caffe.TRAIN)' % net_on(db, tmp_path)
    proc = subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and 'pycaffe_ft.errors' in proc.stderr and 'is truncated' in proc.stderr  # not SIGBUS
    proc = subprocess.run([sys.executable, '-m', 'pycaffe_ft.cli', 'check-db', db], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and 'is truncated' in proc.stderr and 'Traceback' not in proc.stderr


def test_corrupt_pages_never_kill_the_caller(tmp_path):
    """Random byte damage in the page headers: check-db reports a bad record or a crash of its
    child (liblmdb aborts on some corrupt pages: 'Assertion IS_LEAF(mp) failed'), never 'ok'
    where the records cannot all be read, and this process lives on."""
    db = make_db(tmp_path / 'ok')
    base = open(os.path.join(db, 'data.mdb'), 'rb').read()
    outcomes = set()
    for seed in (10, 1, 2):  # seed 10 makes liblmdb abort with the lmdb wheel tested here
        damaged = bytearray(base)
        rng = random.Random(seed)
        for _ in range(20):
            page, offset = rng.randrange(2, len(base) // 4096), rng.randrange(64)
            damaged[page * 4096 + offset] = rng.randrange(256)
        d = tmp_path / ('damaged%d' % seed)
        d.mkdir()
        (d / 'data.mdb').write_bytes(bytes(damaged))
        report = check_db(str(d), timeout=60)
        outcomes.add(report['status'])
        if report['status'] == 'crashed':
            assert 'liblmdb killed the reader with SIG' in report['message'] and report['index'] == report['records']
        assert (d / 'data.mdb').read_bytes() == bytes(damaged)  # read-only: nothing rewritten
    assert outcomes <= {'ok', 'bad record', 'crashed'} and outcomes != {'ok'}
    assert open(os.path.join(db, 'data.mdb'), 'rb').read() == base
    shutil.rmtree(str(tmp_path / 'ok'))
