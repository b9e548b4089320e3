"""pycaffe's ``caffe.Detector``: classify windows of images (R-CNN style), with context
padding around each window."""
import numpy as np

from . import io as caffe_io
from .errors import CaffeError
from .classifier import input_transformer
from .net import Net
from .proto import caffe_pb2

__all__ = ['Detector']


class Detector(Net):
    def __init__(self, model_file, pretrained_file, mean=None, input_scale=None, raw_scale=None,
                 channel_swap=None, context_pad=None):
        super().__init__(model_file, pretrained_file, caffe_pb2.TEST)
        self.transformer = input_transformer(self, mean, input_scale, raw_scale, channel_swap)
        self.configure_crop(context_pad)

    def detect_windows(self, images_windows):
        """[(image filename, [(ymin, xmin, ymax, xmax), ...]), ...] -> one dict per window:
        {'window', 'prediction', 'filename'}."""
        crops = []
        for filename, windows in images_windows:
            image = caffe_io.load_image(filename).astype(np.float32)
            for window in windows:
                crops.append(self.crop(image, window))
        in_ = self.inputs[0]
        batch = np.zeros((len(crops),) + tuple(self.blobs[in_].shape[1:]), np.float32)
        for i, crop in enumerate(crops):
            batch[i] = self.transformer.preprocess(in_, crop)
        out = self.forward_all(**{in_: batch})
        predictions = out[self.outputs[0]]
        predictions = predictions.reshape(len(predictions), -1)
        detections, i = [], 0
        for filename, windows in images_windows:
            for window in windows:
                detections.append({'window': window, 'prediction': predictions[i], 'filename': filename})
                i += 1
        return detections

    def detect_selective_search(self, image_fnames):
        raise CaffeError('detect_selective_search needs the selective_search_ijcv_with_python '
                         'package (MATLAB based), which is not available; compute windows yourself and '
                         'call detect_windows')

    def crop(self, im, window):
        """The window of ``im``, with ``context_pad`` pixels of context (warped to the input
        size), as R-CNN crops; the part outside the image is filled with the mean."""
        crop = im[window[0]:window[2], window[1]:window[3]]
        if self.context_pad:
            box = np.array(window, dtype=float)
            crop_size = self.blobs[self.inputs[0]].width
            scale = crop_size / (1.0 * crop_size - self.context_pad * 2)
            half_h = (box[2] - box[0] + 1) / 2.0
            half_w = (box[3] - box[1] + 1) / 2.0
            center = (box[0] + half_h, box[1] + half_w)
            box = np.round(np.array((center[0] - half_h * scale, center[1] - half_w * scale,
                                     center[0] + half_h * scale, center[1] + half_w * scale)))
            full_h, full_w = box[2] - box[0] + 1, box[3] - box[1] + 1
            scale_h, scale_w = crop_size / full_h, crop_size / full_w
            pad_y = int(round(max(0, -box[0]) * scale_h))
            pad_x = int(round(max(0, -box[1]) * scale_w))
            im_h, im_w = im.shape[:2]
            box = np.clip(box, 0., [im_h, im_w, im_h, im_w])
            clip_h, clip_w = box[2] - box[0] + 1, box[3] - box[1] + 1
            crop_h = int(round(clip_h * scale_h))
            crop_w = int(round(clip_w * scale_w))
            if pad_y + crop_h > crop_size:
                crop_h = crop_size - pad_y
            if pad_x + crop_w > crop_size:
                crop_w = crop_size - pad_x
            context = im[int(box[0]):int(box[2]), int(box[1]):int(box[3])]
            context = caffe_io.resize_image(context, (crop_h, crop_w))
            crop = np.ones(self.crop_dims, dtype=np.float32) * self.crop_mean
            crop[pad_y:pad_y + crop_h, pad_x:pad_x + crop_w] = context
        return crop

    def configure_crop(self, context_pad):
        in_ = self.inputs[0]
        tpose = self.transformer.transpose.get(in_, (0, 1, 2))
        inv = np.argsort(tpose)
        self.crop_dims = np.array(self.blobs[in_].data.shape[1:])[inv]
        self.context_pad = context_pad
        if self.context_pad:
            mean = self.transformer.mean.get(in_)
            if mean is not None:
                inv_swap = np.argsort(self.transformer.channel_swap.get(in_, np.arange(mean.shape[0])))
                crop_mean = mean[inv_swap].transpose(inv)
                raw = self.transformer.raw_scale.get(in_)
                self.crop_mean = crop_mean / raw if raw else crop_mean
            else:
                self.crop_mean = np.zeros(self.crop_dims, dtype=np.float32)
