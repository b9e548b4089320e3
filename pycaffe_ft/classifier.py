"""pycaffe's ``caffe.Classifier``: a Net that classifies H x W x K images (center crop or 10-crop
oversampling) with Transformer preprocessing."""
import numpy as np

from . import io as caffe_io
from .net import Net
from .proto import caffe_pb2

__all__ = ['Classifier', 'input_transformer']


def input_transformer(net, mean=None, input_scale=None, raw_scale=None, channel_swap=None):
    """A Transformer for the net's first input taking H x W x K images (pycaffe's setup)."""
    in_ = net.inputs[0]
    transformer = caffe_io.Transformer({in_: net.blobs[in_].data.shape})
    transformer.set_transpose(in_, (2, 0, 1))
    if mean is not None:
        transformer.set_mean(in_, mean)
    if input_scale is not None:
        transformer.set_input_scale(in_, input_scale)
    if raw_scale is not None:
        transformer.set_raw_scale(in_, raw_scale)
    if channel_swap is not None:
        transformer.set_channel_swap(in_, channel_swap)
    return transformer


class Classifier(Net):
    def __init__(self, model_file, pretrained_file, image_dims=None, mean=None, input_scale=None,
                 raw_scale=None, channel_swap=None):
        super().__init__(model_file, pretrained_file, caffe_pb2.TEST)
        in_ = self.inputs[0]
        self.transformer = input_transformer(self, mean, input_scale, raw_scale, channel_swap)
        self.crop_dims = np.array(self.blobs[in_].data.shape[2:])
        self.image_dims = np.array(image_dims if image_dims is not None and len(image_dims) else self.crop_dims)

    def predict(self, inputs, oversample=True):
        """Class scores (N x classes) of a list of H x W x K images; with ``oversample`` the mean
        over 10 crops (corners, centre, mirrored)."""
        dims = tuple(int(d) for d in self.image_dims)
        images = np.zeros((len(inputs),) + dims + (inputs[0].shape[2],), np.float32)
        for i, image in enumerate(inputs):
            images[i] = caffe_io.resize_image(image, dims)
        if oversample:
            images = caffe_io.oversample(images, self.crop_dims)
        else:
            center = np.array(dims) / 2.0
            box = np.concatenate([center - self.crop_dims / 2.0, center + self.crop_dims / 2.0]).astype(int)
            images = images[:, box[0]:box[2], box[1]:box[3], :]
        in_ = self.inputs[0]
        batch = np.zeros((len(images),) + tuple(self.blobs[in_].shape[1:]), np.float32)
        for i, image in enumerate(images):
            batch[i] = self.transformer.preprocess(in_, image)
        predictions = self.forward_all(**{in_: batch})[self.outputs[0]]
        if oversample:
            predictions = predictions.reshape((len(predictions) // 10, 10, -1)).mean(1)
        return predictions
