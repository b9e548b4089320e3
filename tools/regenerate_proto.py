"""Regenerate ``pycaffe_ft/proto/caffe_descriptor.bin`` from ``proto/caffe.proto``.

The Python module ``pycaffe_ft.proto.caffe_pb2`` builds its message classes at import time
from this serialized ``FileDescriptorProto`` with protobuf's public API, so it works with any
protobuf runtime from 4.22 on (protoc-generated modules refuse older runtimes).

Usage: ``python tools/regenerate_proto.py`` (needs ``pip install grpcio-tools`` for protoc).
"""
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROTO_DIR = os.path.join(ROOT, 'proto')
OUT = os.path.join(ROOT, 'pycaffe_ft', 'proto', 'caffe_descriptor.bin')


def main():
    from google.protobuf import descriptor_pb2
    with tempfile.TemporaryDirectory() as tmp:
        descriptor_set = os.path.join(tmp, 'caffe.desc')
        subprocess.run([sys.executable, '-m', 'grpc_tools.protoc', '-I', PROTO_DIR,
                        '--descriptor_set_out=' + descriptor_set, 'caffe.proto'], check=True)
        file_set = descriptor_pb2.FileDescriptorSet()
        with open(descriptor_set, 'rb') as f:
            file_set.ParseFromString(f.read())
    (file_proto,) = file_set.file
    with open(OUT, 'wb') as f:
        f.write(file_proto.SerializeToString(deterministic=True))
    print('wrote', OUT)


if __name__ == '__main__':
    main()
