"""Reading Caffe's per-dimension kernel/pad/stride/dilation parameters (2-D)."""

__all__ = ['spatial_param']


def spatial_param(layer, param, name, default, allow_zero=False):
    """(h, w) from ``name`` (repeated, 1 or 2 values) or ``name_h``/``name_w``."""
    value = getattr(param, name)
    if hasattr(value, '__len__'):  # a repeated field
        values = list(value)
    else:
        values = [getattr(param, name)] if param.HasField(name) else []
    base = 'kernel' if name == 'kernel_size' else name
    h_field, w_field = base + '_h', base + '_w'
    has_hw = hasattr(param, h_field) and (param.HasField(h_field) or param.HasField(w_field))
    if has_hw:
        if values:
            raise layer.error('either %s or %s/%s should be specified, not both'
                              % (name, h_field, w_field))
        if name == 'kernel_size' and not (param.HasField(h_field) and param.HasField(w_field)):
            raise layer.error('both %s and %s are required' % (h_field, w_field))
        hw = (getattr(param, h_field), getattr(param, w_field))
    elif not values:
        if default is None:
            raise layer.error('%s is required (as %s or %s and %s)' % (name, name, h_field, w_field))
        hw = (default, default)
    elif len(values) == 1:
        hw = (values[0], values[0])
    elif len(values) == 2:
        hw = tuple(values)
    else:
        raise layer.error('%s must be specified once, or once per spatial dimension (2); got '
                          '%d values' % (name, len(values)))
    if not allow_zero and min(hw) <= 0:
        raise layer.error('%s must be positive, got %s' % (name, list(hw)))
    if min(hw) < 0:
        raise layer.error('%s must not be negative, got %s' % (name, list(hw)))
    return int(hw[0]), int(hw[1])
