"""The memory stand-in reads all it is given and writes all it is given."""
import numpy as np

from pycaffe_ft.kernels.stream import stream


def test_stream_writes_every_destination_element_from_what_it_read():
    rng = np.random.default_rng(0)
    for sizes in ((37, 0, 21, 5), (64, 16, 0, 8), (0, 0, 3, 0), (8, 3, 16, 17)):
        sources = [rng.standard_normal(n).astype(np.float32) for n in sizes[:2]]
        destinations = [np.full(n, np.nan, np.float32) for n in sizes[2:]]
        stream(*sources, *destinations)
        largest = max([0.0] + [float(s.max()) for s in sources if s.size])
        for d in destinations:
            assert not np.isnan(d).any()
            assert (d >= 0).all() and (d <= largest).all()

