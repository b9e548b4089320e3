"""Gradient buckets: the plan covers the flat gradient buffer in reverse layer order, a bucket
is ready only after every layer that writes it, and a failed attempt still posts every request
(so no rank waits in a collective another skipped)."""
import numpy as np
import pytest

import pycaffe_ft as caffe
from pycaffe_ft.parallel.buckets import BucketedReduction, plan_buckets
from pycaffe_ft.parallel.comm import ProcessFailure, SerialComm

NET = '''name: "shared" force_backward: true
layer { name: "data" type: "Input" top: "data" input_param { shape { dim: 2 dim: 3 } } }
layer { name: "ip1" type: "InnerProduct" bottom: "data" top: "ip1"
        param { name: "shared_w" } inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
layer { name: "ip2" type: "InnerProduct" bottom: "ip1" top: "ip2" inner_product_param { num_output: 40
        weight_filler { type: "xavier" } } }
layer { name: "ip3" type: "InnerProduct" bottom: "ip2" top: "ip3" inner_product_param { num_output: 3
        weight_filler { type: "xavier" } } }
layer { name: "ip4" type: "InnerProduct" bottom: "ip3" top: "ip4"
        param { name: "shared_w" } inner_product_param { num_output: 3 weight_filler { type: "xavier" } } }
'''


@pytest.fixture
def net(tmp_path):
    path = tmp_path / 'net.prototxt'
    path.write_text(NET)
    return caffe.Net(str(path), caffe.TRAIN)


@pytest.mark.parametrize('elements', [1, 50, 10 ** 6])
def test_plan_covers_the_buffer_last_layers_first(net, elements):
    buckets = plan_buckets(net, elements)
    bounds = [(lo, hi) for lo, hi, _ in buckets]
    assert bounds[0][1] == net.param_diff.size and bounds[-1][0] == 0
    assert all(a[0] == b[1] for a, b in zip(bounds, bounds[1:]))  # contiguous, descending
    offsets = set(net.param_offsets.tolist())
    assert all(lo in offsets and hi in offsets for lo, hi in bounds)  # whole blobs only
    ready = [r for _, _, r in buckets]
    assert ready == sorted(ready, reverse=True)  # posted in the order backward completes them


def test_a_shared_blob_is_ready_only_after_its_first_layer(net):
    """ip4 reuses ip1's weights: their bucket waits for ip1's backward, not ip4's."""
    shared = net.layer_dict['ip1'].blobs[0]
    lid = next(i for i, b in enumerate(net.learnable_params) if b is shared)
    lo = int(net.param_offsets[lid])
    ip1 = list(net._layer_names).index('ip1')
    holding = [ready for b_lo, b_hi, ready in plan_buckets(net, 1) if b_lo <= lo < b_hi]
    assert holding == [ip1]


class FailingComm(SerialComm):
    """Fails the second request; records every request posted."""
    def __init__(self):
        self.posted = []

    def iallreduce_sum(self, buf, out):
        self.posted.append(buf.size)
        if len(self.posted) == 2:
            raise ProcessFailure('rank 1 died')
        out[...] = buf


def test_a_failed_attempt_still_posts_every_request_then_raises(net):
    local = np.arange(net.param_diff.size, dtype=np.float32)
    kept = local.copy()
    buckets = plan_buckets(net, 1)
    comm = FailingComm()
    reduction = BucketedReduction(comm, buckets, local)
    with pytest.raises(ProcessFailure):
        reduction.finish(np.zeros(3))
    assert len(comm.posted) == len(buckets) + 1  # every bucket and the extras
    assert np.array_equal(local, kept)  # the kept local sum survives for the retry


def test_overlapped_buckets_sum_the_last_gradient_into_the_local_sum(net):
    rng = np.random.default_rng(0)
    local = rng.standard_normal(net.param_diff.size).astype(np.float32)
    diff = rng.standard_normal(net.param_diff.size).astype(np.float32)
    expected = local + diff
    reduction = BucketedReduction(SerialComm(), plan_buckets(net, 1), local, diff)
    for i in reversed(range(len(net.layers))):
        reduction.layer_done(i)
    assert reduction.posted == len(reduction.buckets)
    result, extras = reduction.finish(np.array([1.0, 2.0]))
    assert np.array_equal(result, expected) and extras.tolist() == [1.0, 2.0]
