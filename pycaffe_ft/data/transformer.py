"""Caffe's DataTransformer: scale, mean file / mean values, crop (random in TRAIN, centred in
TEST), mirror (random), force_color / force_gray. Randomness from an explicit Generator."""
import numpy as np

from ..errors import DataError
from ..proto import caffe_pb2
from ..proto.io import read_blob_file

__all__ = ['DataTransformer']


class DataTransformer:
    def __init__(self, param, phase, rng):
        self.param, self.phase, self.rng = param, phase, rng
        self.mean = None
        if param.mean_file and len(param.mean_value):
            raise DataError('transform_param: specify either mean_file or mean_value, not both')
        if param.mean_file:
            mean = read_blob_file(param.mean_file)
            self.mean = mean.reshape(mean.shape[-3:]).astype(np.float32) if mean.ndim >= 3 else mean
        self.mean_values = np.asarray(param.mean_value, np.float32)

    def output_shape(self, chw):
        c, h, w = chw
        crop = self.param.crop_size
        if crop:
            if crop > h or crop > w:
                raise DataError('crop_size %d is larger than the data (%dx%d)' % (crop, h, w))
            return (c, crop, crop)
        return (c, h, w)

    def check(self, chw, key=None):
        c = chw[0]
        if self.mean is not None and tuple(self.mean.shape) != tuple(chw):
            raise DataError('mean file %s has shape %s but the data (record %r) is %s'
                            % (self.param.mean_file, list(self.mean.shape), key, list(chw)))
        if len(self.mean_values) not in (0, 1, c):
            raise DataError('give 1 or %d mean_value entries (one per channel), got %d'
                            % (c, len(self.mean_values)))

    def transform(self, image, out):
        """image (C, H, W) uint8/float -> out (C, h, w) float32, written in place."""
        self.transform_batch([image], out[np.newaxis])

    def transform_batch(self, images, out):
        """Each of ``images`` ((C, H, W), one shape) -> out[i] (out: (N, C, h, w) float32,
        computed in place): the crops and mirrors drawn image by image (the same draws, in the
        same order, as one image at a time), the arithmetic done once for the batch (the same
        float32 operations on every element, so the same bits)."""
        p = self.param
        c, h, w = images[0].shape
        crop = p.crop_size
        hh, ww = (crop, crop) if crop else (h, w)
        placed = []  # (mirror, h_off, w_off) per image
        for _ in images:
            mirror = p.mirror and self.rng.integers(0, 2) == 1
            h_off = w_off = 0
            if crop and self.phase == caffe_pb2.TRAIN:
                h_off = int(self.rng.integers(0, h - crop + 1))
                w_off = int(self.rng.integers(0, w - crop + 1))
            elif crop:
                h_off, w_off = (h - crop) // 2, (w - crop) // 2
            placed.append((mirror, h_off, w_off))
        for image, o, (_, h_off, w_off) in zip(images, out, placed):
            o[...] = image[:, h_off:h_off + hh, w_off:w_off + ww]
        if self.mean is not None:
            for o, (_, h_off, w_off) in zip(out, placed):
                o -= self.mean[:, h_off:h_off + hh, w_off:w_off + ww]
        elif len(self.mean_values):
            out -= self.mean_values.reshape(-1, 1, 1) if len(self.mean_values) == c else self.mean_values[0]
        if p.scale != 1:
            out *= np.float32(p.scale)
        mirrored = np.array([m for m, _, _ in placed], bool)
        if mirrored.any():
            out[mirrored] = out[mirrored][..., ::-1]
