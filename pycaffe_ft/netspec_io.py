"""Loading net and solver definitions from files or messages, upgraded, with source lines.

``load_net_param`` accepts a path to a prototxt or binary NetParameter, prototxt text, or a
NetParameter; it returns the upgraded NetParameter and a :class:`NetSource` that maps layer
indices back to file lines for error messages.
"""
import io
import os

from .errors import PrototxtError
from .proto import caffe_pb2
from .errors import WeightsError
from .proto.io import decode_text, layer_lines, looks_like_text, parse_text, read_binary, read_definition_bytes
from .proto.upgrade import upgrade_net, upgrade_solver

__all__ = ['NetSource', 'load_net_param', 'load_solver_param']


class NetSource:
    """Where a net definition came from: ``path`` (or None) and each layer's line."""

    def __init__(self, path=None, lines=()):
        self.path = path
        self.lines = list(lines)

    def where(self, layer_index=None):
        path = self.path or '<net>'
        if layer_index is not None and layer_index < len(self.lines):
            return '%s:%d' % (path, self.lines[layer_index])
        return path

    @property
    def directory(self):
        return os.path.dirname(os.path.abspath(self.path)) if self.path else os.getcwd()


def load_net_param(source):
    """(upgraded NetParameter, NetSource) from a path, prototxt text or NetParameter."""
    if isinstance(source, caffe_pb2.NetParameter):
        param = caffe_pb2.NetParameter()
        param.CopyFrom(source)
        return upgrade_net(param), NetSource()
    if isinstance(source, bytes):
        source = source.decode()
    if not isinstance(source, str):
        raise TypeError('net must be a path, prototxt text or NetParameter, not %r' % type(source))
    if not os.path.exists(source) and ('{' in source or '\n' in source):
        return _from_text(source, None)
    data = read_definition_bytes(source, 'net definition')
    if looks_like_text(data):  # text, perhaps with a stray byte: errors point into the text
        return _from_text(decode_text(data, source), source)
    try:
        param = read_binary(io.BytesIO(data), caffe_pb2.NetParameter())
    except WeightsError as e:
        raise PrototxtError('neither a text prototxt nor a binary NetParameter (%s)'
                            % str(e).split(': ', 1)[-1], source) from None
    return upgrade_net(param, source), NetSource(source)



def _from_text(text, path):
    param = parse_text(text, caffe_pb2.NetParameter(), path)
    lines = layer_lines(text)
    had_inputs = len(param.input) > 0 and (len(param.input_dim) > 0 or len(param.input_shape) > 0)
    upgrade_net(param, path or '<net>')
    if had_inputs:  # the upgrade put an Input layer first; it has no line of its own
        lines = [1] + lines
    return param, NetSource(path, lines)


def load_solver_param(source):
    """Upgraded SolverParameter from a path, prototxt text or SolverParameter."""
    if isinstance(source, caffe_pb2.SolverParameter):
        param = caffe_pb2.SolverParameter()
        param.CopyFrom(source)
        return upgrade_solver(param)
    if not os.path.exists(source) and ('{' in source or ':' in source and '\n' in source):
        return upgrade_solver(parse_text(source, caffe_pb2.SolverParameter()))
    text = decode_text(read_definition_bytes(source, 'solver file'), source)
    return upgrade_solver(parse_text(text, caffe_pb2.SolverParameter(), source), source)
