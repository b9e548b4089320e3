"""Registries of named classes and functions: layers, solvers, fillers, lr policies.

Unknown or duplicate names are errors that list the known names; nothing is skipped.
"""
__all__ = ['Registry', 'LAYERS', 'SOLVERS', 'FILLERS', 'LR_POLICIES']


class Registry:
    def __init__(self, kind):
        self.kind = kind
        self._entries = {}
        self.v1_names = {}

    def register(self, name, v1_name=None):
        """Decorator: register the decorated object under ``name`` (and its V1 enum name)."""
        def decorate(obj):
            if name in self._entries:
                raise ValueError('%s "%s" registered twice' % (self.kind, name))
            self._entries[name] = obj
            if v1_name is not None:
                self.v1_names[name] = v1_name
            return obj
        return decorate

    def get(self, name, error=KeyError, context=''):
        try:
            return self._entries[name]
        except KeyError:
            from .errors import did_you_mean
            raise error('%sunknown %s "%s"%s; known: %s' % (
                context, self.kind, name, did_you_mean(name, self._entries),
                ', '.join(sorted(self._entries)))) from None

    def __contains__(self, name):
        return name in self._entries

    def names(self):
        return sorted(self._entries)


LAYERS = Registry('layer type')
SOLVERS = Registry('solver type')
FILLERS = Registry('filler type')
LR_POLICIES = Registry('lr policy')
