"""Caffe's protobuf messages (``from pycaffe_ft.proto import caffe_pb2``).

Built at import from ``caffe_descriptor.bin`` (compiled from ``proto/caffe.proto`` by
``tools/regenerate_proto.py``) with protobuf's public API, in a private descriptor pool so
that it never clashes with a real Caffe's ``caffe_pb2`` loaded in the same process.
"""
import os as _os

from google.protobuf import descriptor_pool as _descriptor_pool
from google.protobuf import message_factory as _message_factory
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper

_POOL = _descriptor_pool.DescriptorPool()
with open(_os.path.join(_os.path.dirname(__file__), 'caffe_descriptor.bin'), 'rb') as _f:
    _POOL.AddSerializedFile(_f.read())
DESCRIPTOR = _POOL.FindFileByName('caffe.proto')

__all__ = ['DESCRIPTOR']
for _name, _desc in DESCRIPTOR.message_types_by_name.items():
    globals()[_name] = _message_factory.GetMessageClass(_desc)
    __all__.append(_name)
for _name, _desc in DESCRIPTOR.enum_types_by_name.items():
    globals()[_name] = _enum_type_wrapper.EnumTypeWrapper(_desc)
    __all__.append(_name)
    for _value in _desc.values:
        globals()[_value.name] = _value.number
        __all__.append(_value.name)
