"""Datasets: LMDB Datum databases, Caffe's data transformer, dataset converters."""
