"""``extract-features``: Caffe's extract_features tool (blob values into LMDBs of Datums)."""
from ..log import logger
from ..net import Net
from ..proto import caffe_pb2
from .db import DBWriter

__all__ = ['extract_features']


def extract_features(weights, model, blob_names, db_paths, num_batches, backend='lmdb'):
    """For each batch, each item of each named blob becomes a float Datum (C=count, H=W=1),
    keyed by a running index (%010d), as Caffe writes them."""
    if len(blob_names) != len(db_paths):
        from ..errors import CaffeError
        raise CaffeError('give one output database per blob (%d blobs, %d databases)'
                         % (len(blob_names), len(db_paths)))
    net = Net(model, weights=weights, phase=caffe_pb2.TEST)
    for name in blob_names:
        if name not in net.blobs:
            from ..errors import NetError
            raise NetError('unknown feature blob name %s in the network %s' % (name, model))
    writers = [DBWriter(p, backend) for p in db_paths]
    index = [0] * len(writers)
    try:
        for batch in range(num_batches):
            net.forward_from_to()
            for k, (name, writer) in enumerate(zip(blob_names, writers)):
                blob = net.blobs[name]
                per_item = blob.data.reshape(blob.shape[0], -1)
                for item in per_item:
                    datum = caffe_pb2.Datum(channels=item.size, height=1, width=1)
                    datum.float_data.extend(item.tolist())
                    writer.put('%010d' % index[k], datum.SerializeToString())
                    index[k] += 1
            logger.info('Extracted features of %d query images for feature blob %s',
                        (batch + 1) * net.blobs[blob_names[0]].shape[0], ','.join(blob_names))
    except BaseException:
        for w in writers:
            w.abort()
        raise
    for w in writers:
        w.close()
    logger.info('Successfully extracted the features!')
