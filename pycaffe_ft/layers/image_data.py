"""``type: "ImageData"``: images listed in a text file ("path label", the label after the last
space), read like Caffe (OpenCV, BGR, optional resize to new_height x new_width), transformed,
with optional shuffling per epoch. ``type: "WindowData"`` is reported as unsupported."""
import os

import numpy as np

from ..data.convert import read_image_list
from ..data.transformer import DataTransformer
from ..errors import DataError
from ..random import new_rng
from ..registry import LAYERS
from .base import Layer

__all__ = ['ImageDataLayer', 'WindowDataLayer']


@LAYERS.register('ImageData', v1_name='IMAGE_DATA')
class ImageDataLayer(Layer):
    type = 'ImageData'
    exact_num_bottom = 0
    min_num_top = 1
    max_num_top = 2

    def layer_setup(self, bottom, top):
        p = self.layer_param.image_data_param
        if p.batch_size <= 0:
            raise self.error('image_data_param.batch_size must be positive')
        if (p.new_height > 0) != (p.new_width > 0):
            raise self.error('current implementation requires new_height and new_width to be set at the same time')
        try:
            self.lines = read_image_list(p.source)
        except DataError as e:
            raise self.error(str(e)) from None
        if not self.lines:
            raise self.error('image list "%s" is empty' % p.source)
        self.batch = p.batch_size
        self.order = np.arange(len(self.lines))
        self.epoch = 0
        if p.shuffle:
            new_rng('imagedata', self.name, 0).shuffle(self.order)
        self.position = int(self.rng.integers(0, p.rand_skip)) if p.rand_skip else 0
        self.transformer = DataTransformer(self.layer_param.transform_param, self.phase, self.rng)
        first = self._read(0)
        self.chw = first.shape
        self.transformer.check(self.chw, self.lines[0][0])
        self.out_shape = self.transformer.output_shape(self.chw)

    def _read(self, index):
        import cv2
        p = self.layer_param.image_data_param
        path = os.path.join(p.root_folder, self.lines[index][0])
        img = cv2.imread(path, cv2.IMREAD_COLOR if p.is_color else cv2.IMREAD_GRAYSCALE)
        if img is None:
            raise DataError('layer "%s": could not load image %s' % (self.name, path))
        if p.new_height > 0:
            img = cv2.resize(img, (p.new_width, p.new_height))
        return img[None] if img.ndim == 2 else img.transpose(2, 0, 1)

    def _index(self, position):
        epoch, i = divmod(position, len(self.lines))
        if self.layer_param.image_data_param.shuffle and epoch != self.epoch:
            self.order = np.arange(len(self.lines))
            new_rng('imagedata', self.name, epoch).shuffle(self.order)
            self.epoch = epoch
        return self.order[i]

    def reshape(self, bottom, top):
        top[0].reshape((self.batch,) + tuple(self.out_shape))
        if len(top) > 1:
            top[1].reshape((self.batch,))

    def forward(self, bottom, top):
        self.transformer.rng = new_rng('transform', self.name, self.position)
        for i in range(self.batch):
            index = self._index(self.position + i)
            image = self._read(index)
            if image.shape != self.chw:
                raise DataError('layer "%s": image %s has shape %s, the first %s (set new_height/new_width)'
                                % (self.name, self.lines[index][0], list(image.shape), list(self.chw)))
            self.transformer.transform(image, top[0].data[i])
            if len(top) > 1:
                top[1].data[i] = self.lines[index][1]
        self.position += self.batch

    def backward(self, top, propagate_down, bottom):
        pass


@LAYERS.register('WindowData', v1_name='WINDOW_DATA')
class WindowDataLayer(Layer):
    """R-CNN's window file reader: not supported here (a clear error at construction)."""
    type = 'WindowData'

    def layer_setup(self, bottom, top):
        raise self.error('WindowData (R-CNN window files) is not supported by pycaffe-ft; convert '
                         'the windows to an LMDB (convert-imageset) or an ImageData list instead')

    def reshape(self, bottom, top):
        pass
