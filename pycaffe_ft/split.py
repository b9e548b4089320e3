"""Caffe's InsertSplits: a Split layer for every blob consumed by more than one layer
(a loss use of a top counts as a consumer), with Caffe's layer and blob names."""
from .errors import NetError
from .proto import caffe_pb2

__all__ = ['insert_splits', 'split_layer_name', 'split_blob_name']


def split_layer_name(layer_name, blob_name, blob_idx):
    return '%s_%s_%d_split' % (blob_name, layer_name, blob_idx)


def split_blob_name(layer_name, blob_name, blob_idx, split_idx):
    return '%s_%s_%d_split_%d' % (blob_name, layer_name, blob_idx, split_idx)


def _split_layer(layer_name, blob_name, blob_idx, count, loss_weight):
    lp = caffe_pb2.LayerParameter(name=split_layer_name(layer_name, blob_name, blob_idx),
                                  type='Split')
    lp.bottom.append(blob_name)
    for k in range(count):
        lp.top.append(split_blob_name(layer_name, blob_name, blob_idx, k))
        if loss_weight:
            lp.loss_weight.append(loss_weight if k == 0 else 0.0)
    return lp


def insert_splits(param, where='<net>'):
    """(NetParameter with Split layers, origin) where origin[i] is the index of new layer i in
    ``param.layer`` or None for an inserted Split layer."""
    last_top, source_of, bottom_count, loss_weight, split_idx = {}, {}, {}, {}, {}
    for i, lp in enumerate(param.layer):
        for j, name in enumerate(lp.bottom):
            if name not in last_top:
                raise NetError('%s: unknown bottom blob "%s" (layer "%s", bottom index %d): no '
                               'earlier layer produces it' % (where, name, lp.name, j))
            top = last_top[name]
            source_of[(i, j)] = top
            bottom_count[top] = bottom_count.get(top, 0) + 1
        for j, name in enumerate(lp.top):
            last_top[name] = (i, j)
        for j in range(min(len(lp.loss_weight), len(lp.top))):
            top = last_top[lp.top[j]]
            loss_weight[top] = lp.loss_weight[j]
            if loss_weight[top]:
                bottom_count[top] = bottom_count.get(top, 0) + 1
    out = caffe_pb2.NetParameter()
    out.CopyFrom(param)
    del out.layer[:]
    origin = []
    for i, original in enumerate(param.layer):
        lp = out.layer.add()
        lp.CopyFrom(original)
        origin.append(i)
        for j, name in enumerate(lp.bottom):
            top = source_of[(i, j)]
            if bottom_count.get(top, 0) > 1:
                k = split_idx.get(top, 0)
                split_idx[top] = k + 1
                lp.bottom[j] = split_blob_name(param.layer[top[0]].name, name, top[1], k)
        splits = []
        for j, name in enumerate(lp.top):
            top = (i, j)
            count = bottom_count.get(top, 0)
            if count > 1:
                weight = loss_weight.get(top, 0.0)
                splits.append(_split_layer(lp.name, name, j, count, weight))
                if weight:
                    del lp.loss_weight[:]
                    split_idx[top] = split_idx.get(top, 0) + 1
        for s in splits:
            out.layer.add().CopyFrom(s)
            origin.append(None)
    return out, origin
