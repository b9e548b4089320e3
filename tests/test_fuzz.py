"""The fuzz suite over every reader of user files (tools/fuzz_readers.py): seeded, reproducible,
each input classified in a child process; anything but a typed error or an accepted file fails.
The default run is short; ``pytest -m slow`` runs 2,000 inputs per reader."""
import importlib
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'tools'))
fuzz = importlib.import_module('fuzz_readers')


def test_inputs_are_reproducible_and_mutated():
    seed = b'layer { name: "a" type: "ReLU" bottom: "x" top: "y" relu_param { negative_slope: 0.5 } }\n'
    first = fuzz.inputs('net_text', seed, 30, 7)
    assert first == fuzz.inputs('net_text', seed, 30, 7)
    assert first != fuzz.inputs('net_text', seed, 30, 8)
    assert sum(x != seed for x in first) >= 25


def test_every_outcome_is_classified(tmp_path):
    batch = [b'typed', b'valid', b'untyped', b'abort', b'hang', b'typed again']
    outcomes = fuzz.run_reader('selfcheck', batch, str(tmp_path), timeout=3)
    assert [o[0] for o in outcomes] == ['typed', 'accepted', 'untyped', 'crash', 'hang', 'typed']
    assert 'KeyError' in outcomes[2][1] and outcomes[3][1] == 'signal 6'


def _campaign(count):
    results = fuzz.campaign(count, seed=0, log=lambda line: None)
    assert set(results) == set(fuzz.READERS)
    bad = {reader: [(i, o) for i, o in enumerate(outs) if o[0] in fuzz.BAD] for reader, outs in results.items()}
    assert not any(bad.values()), {r: b[:5] for r, b in bad.items() if b}
    for reader, outs in results.items():
        assert len(outs) == count and any(o[0] == 'typed' for o in outs), reader


def test_short_fuzz_run_finds_only_typed_errors_or_valid_files():
    _campaign(25)


@pytest.mark.slow
def test_long_fuzz_run_2000_inputs_per_reader():
    _campaign(2000)
