"""DataTransformer against Caffe's definition, image by image: per image, the mirror draw, then
(TRAIN) the crop offsets; crop, subtract the mean (file, cropped alike, or per-channel values),
scale, mirror; float32 throughout. A whole batch at once must give the same bits and draw the
same numbers as the definition does one image at a time."""
import numpy as np
import pytest

from pycaffe_ft.data.transformer import DataTransformer
from pycaffe_ft.proto import caffe_pb2
from pycaffe_ft.proto.io import array_to_blob, write_binary


def _reference(images, param, phase, rng, mean):
    out = []
    for image in images:
        c, h, w = image.shape
        mirror = param.mirror and rng.integers(0, 2) == 1
        h_off = w_off = 0
        size = param.crop_size
        if size and phase == caffe_pb2.TRAIN:
            h_off, w_off = int(rng.integers(0, h - size + 1)), int(rng.integers(0, w - size + 1))
        elif size:
            h_off, w_off = (h - size) // 2, (w - size) // 2
        hh, ww = (size, size) if size else (h, w)
        x = image[:, h_off:h_off + hh, w_off:w_off + ww].astype(np.float32)
        if mean is not None:
            x = x - mean[:, h_off:h_off + hh, w_off:w_off + ww]
        elif len(param.mean_value) == c:
            x = x - np.asarray(param.mean_value, np.float32).reshape(-1, 1, 1)
        elif len(param.mean_value):
            x = x - np.float32(param.mean_value[0])
        if param.scale != 1:
            x = x * np.float32(param.scale)
        out.append(x[:, :, ::-1] if mirror else x)
    return np.stack(out)


@pytest.mark.parametrize('phase', [caffe_pb2.TRAIN, caffe_pb2.TEST], ids=['TRAIN', 'TEST'])
@pytest.mark.parametrize('fields', [
    {}, {'scale': 0.00390625}, {'mirror': True}, {'crop_size': 5, 'mirror': True, 'scale': 0.017},
    {'crop_size': 4, 'mean_file': True}, {'mean_value': [104.0, 117.0, 123.0], 'mirror': True},
    {'mean_value': [110.5], 'crop_size': 6, 'scale': 0.5}])
@pytest.mark.parametrize('dtype', [np.uint8, np.float32])
def test_batch_transform_is_the_definition_image_by_image(fields, phase, dtype, tmp_path):
    rng = np.random.default_rng(7)
    images = [(rng.integers(0, 256, (3, 8, 9)) if dtype == np.uint8 else rng.standard_normal((3, 8, 9)) * 50)
              .astype(dtype) for _ in range(13)]
    param = caffe_pb2.TransformationParameter()
    mean = None
    for name, value in fields.items():
        if name == 'mean_file':
            mean = (rng.random((3, 8, 9)) * 128).astype(np.float32)
            path = tmp_path / 'mean.binaryproto'
            write_binary(str(path), array_to_blob(mean[np.newaxis]))
            param.mean_file = str(path)
        elif name == 'mean_value':
            param.mean_value.extend(value)
        else:
            setattr(param, name, value)
    transformer = DataTransformer(param, phase, np.random.default_rng(11))
    out = np.empty((len(images),) + transformer.output_shape(images[0].shape), np.float32)
    transformer.transform_batch(images, out)
    expected = _reference(images, param, phase, np.random.default_rng(11), mean)
    assert out.shape == expected.shape
    assert np.array_equal(out, expected) and np.array_equal(np.signbit(out), np.signbit(expected))
    one_by_one = DataTransformer(param, phase, np.random.default_rng(11))
    single = np.empty_like(out)
    for image, o in zip(images, single):
        one_by_one.transform(image, o)
    assert np.array_equal(single, out)
    assert one_by_one.rng.random() == transformer.rng.random()  # the same numbers drawn
