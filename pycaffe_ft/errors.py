"""Typed exceptions of pycaffe-ft.

Library code raises these and never exits the process; only the ``cli`` package turns them into
messages and exit codes. Every message names what the user can act on: the file and line,
the layer name and type, expected versus actual.
"""

__all__ = ['CaffeError', 'PrototxtError', 'ForkFeatureError', 'UnknownLayerTypeError',
           'NetError', 'ShapeError', 'WeightsError', 'LayerSetupError', 'SolverError',
           'DataError', 'did_you_mean']


class CaffeError(Exception):
    """Base class of every error pycaffe-ft raises on purpose."""


class PrototxtError(CaffeError):
    """A prototxt (text protobuf) file could not be parsed.

    ``path``, ``line`` and ``column`` (1-based, or None) locate the problem.
    """

    def __init__(self, message, path=None, line=None, column=None):
        self.path, self.line, self.column = path, line, column
        where = path or '<string>'
        if line is not None:
            where += ':%d' % line
            if column is not None:
                where += ':%d' % column
        super().__init__('%s: %s' % (where, message))


class ForkFeatureError(PrototxtError):
    """The file uses a field or layer type that only exists in a fork of Caffe."""


class UnknownLayerTypeError(CaffeError):
    """A layer type that is not registered (names the layer, file and line)."""


class NetError(CaffeError):
    """A net definition that cannot be built (missing bottom, duplicate top, ...)."""


class ShapeError(NetError):
    """Blob shapes that do not fit (names both layers and both shapes)."""


class LayerSetupError(NetError):
    """A layer's parameters are invalid for its bottoms."""


class WeightsError(CaffeError):
    """A .caffemodel / .binaryproto that is truncated, foreign or does not fit the net."""


class SolverError(CaffeError):
    """A solver definition or state that cannot be used."""


class DataError(CaffeError):
    """A dataset (LMDB, image list, mean file) that cannot be read as expected."""


def did_you_mean(name, candidates):
    """' (did you mean "x"?)' for the candidate closest to a misspelt ``name``, else ''."""
    import difflib
    by_lower = {c.lower(): c for c in candidates}
    close = difflib.get_close_matches(str(name).lower(), list(by_lower), n=1, cutoff=0.6)
    return ' (did you mean "%s"?)' % by_lower[close[0]] if close else ''
