"""``type: "Data"``: batches of Datum records from LMDB (or LevelDB with plyvel), transformed
as Caffe does, prefetched by a background thread into a bounded queue.

Record order: the layer reads position ``p = start + k`` for the k-th item it serves and maps
it to a record with ``record_of(p)`` (default: ``p mod N`` in key order, Caffe's wrapping
cursor). A parallel trainer replaces ``record_of`` so that virtual worker v reads records
v, v+V, v+2V, ...; the cursor is a pure function of the iteration.
"""
import queue
import threading

import numpy as np

from .. import caffe_runtime
from ..data.datum import datum_to_array, parse_datum
from ..data.db import open_db
from ..data.transformer import DataTransformer
from ..errors import CaffeError, DataError
from ..proto import caffe_pb2
from ..random import new_rng
from ..registry import LAYERS
from .base import Layer

__all__ = ['DataLayer']

_DB = caffe_pb2.DataParameter


@LAYERS.register('Data', v1_name='DATA')
class DataLayer(Layer):
    type = 'Data'
    exact_num_bottom = 0
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        p = self.layer_param.data_param
        if p.batch_size <= 0:
            raise self.error('data_param.batch_size must be positive')
        backend = 'lmdb' if p.backend == _DB.LMDB else 'leveldb'
        try:
            self.db = open_db(p.source, backend)
            self.transformer = DataTransformer(self.layer_param.transform_param, self.phase, self.rng)
        except DataError as e:
            raise self.error(str(e)) from None
        self.batch = p.batch_size
        try:
            key, value = self.db[0]
            first = self._image(key, value)[0]
        except DataError as e:
            raise self.error('%s: %s' % (self.db.path, e)) from None
        self.chw = first.shape
        self.transformer.check(self.chw, key)
        self.out_shape = self.transformer.output_shape(self.chw)
        self.position = int(self.rng.integers(0, p.rand_skip)) if p.rand_skip else 0
        self.initial_position = self.position
        self.record_of = self._records_of_this_solver()
        self.prefetch = max(1, p.prefetch)
        self.synchronous = False  # parallel trainers set positions per micro-batch: no prefetch
        self.serving = None  # synchronous mode: what the caller says is read now (see read_ahead)
        self._ahead = None
        self._queue = None
        self._thread = None
        self.output_labels = len(top) > 1

    def _records_of_this_solver(self):
        """position -> record: every record in turn; in the TRAIN phase of solver r of S
        (caffe.set_solver_count / set_solver_rank), records r, r + S, r + 2S, ... going round
        the database (Caffe's DataLayer::Skip)."""
        size, rank, records = caffe_runtime.solver_count(), caffe_runtime.solver_rank(), len(self.db)
        if size > 1 and self.phase == caffe_pb2.TRAIN:
            return lambda position: (position * size + rank) % records
        return lambda position: position % records

    def _image(self, key, value):
        datum = parse_datum(value, key)
        tp = self.layer_param.transform_param
        return datum_to_array(datum, key, tp.force_color, tp.force_gray), datum.label

    def reshape(self, bottom, top):
        top[0].reshape((self.batch,) + tuple(self.out_shape))
        if len(top) > 1:
            top[1].reshape((self.batch,))

    def load_batch(self, start, record_of=None):
        """Batch of records for positions start .. start+batch-1 (mapped to records by
        ``record_of``, default the layer's): (data, labels, record indices)."""
        record_of = record_of or self.record_of
        data = np.empty((self.batch,) + tuple(self.out_shape), np.float32)
        labels = np.empty(self.batch, np.float32)
        # crops and mirrors depend only on the position: reproducible on resume and on any rank
        self.transformer.rng = new_rng('transform', self.name, start)
        records, images = [], []
        for i in range(self.batch):
            index = record_of(start + i)
            try:
                key, value = self.db[index]
                image, label = self._image(key, value)
            except DataError as e:
                raise DataError('layer "%s": %s: %s' % (self.name, self.db.path, e)) from None
            if image.shape != self.chw:
                raise DataError('layer "%s": %s: record %r has shape %s, the first record %s'
                                % (self.name, self.db.path, key, list(image.shape), list(self.chw)))
            images.append(image)
            labels[i] = label
            records.append(index)
        self.transformer.transform_batch(images, data)
        return data, labels, records

    def _producer(self, start):
        position = start
        while True:
            try:
                item = self.load_batch(position)
            except Exception as e:  # handed to the consumer, raised there
                item = e
            position += self.batch
            self._queue.put(item)
            if isinstance(item, Exception):
                return
            if self._stop.is_set():
                return

    def _start(self):
        self._queue = queue.Queue(maxsize=self.prefetch)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._producer, args=(self.position,), daemon=True,
                                        name='prefetch-%s' % self.name)
        self._thread.start()

    def stop_prefetch(self):
        self._drop_ahead()
        if self._thread is not None:
            self._stop.set()
            while self._thread.is_alive():
                try:
                    self._queue.get(timeout=0.05)
                except queue.Empty:
                    pass
            self._thread = None

    def read_ahead(self, key, start, record_of):
        """Synchronous mode: load the batch at ``start`` (records through ``record_of``) in a
        background thread now; forward() takes it if ``serving`` equals ``key`` and the
        position is ``start`` by then, else drops it. At most one batch is read ahead; the
        caller's guess may be wrong (after a failure), it only costs the wasted read."""
        self._drop_ahead()
        box = {}

        def read():
            try:
                box['item'] = self.load_batch(start, record_of)
            except Exception as e:  # raised by forward() if this batch is used
                box['item'] = e
        thread = threading.Thread(target=read, daemon=True, name='read-ahead-%s' % self.name)
        thread.start()
        self._ahead = (key, start, thread, box)

    def _drop_ahead(self):
        if self._ahead is not None:
            self._ahead[2].join()
            self._ahead = None

    def _take_ahead(self):
        """The batch read ahead for (serving, position), else None (waits for the read)."""
        if self._ahead is None:
            return None
        key, start, thread, box = self._ahead
        self._ahead = None
        thread.join()
        return box['item'] if (key, start) == (self.serving, self.position) else None

    def seek(self, position):
        """Serve position ``position`` next (drops prefetched batches)."""
        self.stop_prefetch()
        self.position = position

    def forward(self, bottom, top):
        if self.synchronous:
            item = self._take_ahead()
            if item is None:
                item = self.load_batch(self.position)
        else:
            if self._thread is None:
                self._start()
            item = self._queue.get()
        if isinstance(item, Exception):
            self._thread = None
            if isinstance(item, CaffeError):
                raise item
            raise DataError('layer "%s": reading %s failed: %s' % (self.name, self.db.path, item))
        data, labels, self.last_records = item
        self.position += self.batch
        top[0].data[...] = data
        if len(top) > 1:
            top[1].data[...] = labels

    def backward(self, top, propagate_down, bottom):
        pass
