"""Flags two threads pass to each other without the GIL and without the kernel.

A flag is one int64 element of a shared array; one thread publishes a value (a release
store), another spins on it (acquire loads with the CPU's pause hint) until it changes or a
number of spins has passed. The calls release the GIL, so a thread spinning here leaves the
other free to run Python. Used by :mod:`pycaffe_ft.thread_crew` to hand tasks to worker
threads that are awake: on a virtual machine, waking a sleeping thread (a futex, and an
interrupt to a halted virtual CPU) took 30-80 us here, longer than many layers' chunks.
"""
import platform

from llvmlite import ir
from numba import njit, types
from numba.core import cgutils
from numba.extending import intrinsic

__all__ = ['publish', 'await_other', 'await_value', 'publish_then_await_other']

_X86 = platform.machine().lower() in ('x86_64', 'amd64', 'i386', 'i686')


def _flag_pointer(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index])


def _int64_array(array):
    return isinstance(array, types.Array) and array.dtype == types.int64 and array.ndim == 1


@intrinsic
def _load_acquire(typingctx, flags, index):
    if not _int64_array(flags):
        return None

    def codegen(context, builder, sig, args):
        return builder.load_atomic(_flag_pointer(context, builder, sig.args[0], *args), 'acquire', 8)
    return types.int64(flags, index), codegen


@intrinsic
def _store_release(typingctx, flags, index, value):
    if not (_int64_array(flags) and isinstance(value, types.Integer)):
        return None

    def codegen(context, builder, sig, args):
        pointer = _flag_pointer(context, builder, sig.args[0], args[0], args[1])
        builder.store_atomic(context.cast(builder, args[2], sig.args[2], types.int64), pointer, 'release', 8)
        return context.get_dummy_value()
    return types.void(flags, index, value), codegen


@intrinsic
def _pause(typingctx):
    """The spin-wait hint (x86 PAUSE: the core slows the loop down and saves power); nothing
    elsewhere."""
    def codegen(context, builder, sig, args):
        if _X86:
            builder.call(builder.module.declare_intrinsic('llvm.x86.sse2.pause',
                                                          fnty=ir.FunctionType(ir.VoidType(), [])), [])
        return context.get_dummy_value()
    return types.void(), codegen


@njit(nogil=True, cache=True)
def publish(flags, index, value):
    """flags[index] = value, seen by a spinning thread after everything written before."""
    _store_release(flags, index, value)


@njit(nogil=True, cache=True)
def await_other(flags, index, old, spins):
    """Spin until flags[index] != old, at most ``spins`` times; returns its last value."""
    for _ in range(spins):
        value = _load_acquire(flags, index)
        if value != old:
            return value
        _pause()
    return _load_acquire(flags, index)


@njit(nogil=True, cache=True)
def await_value(flags, index, value, spins):
    """Spin until flags[index] == value, at most ``spins`` times; returns whether it is."""
    for _ in range(spins):
        if _load_acquire(flags, index) == value:
            return True
        _pause()
    return _load_acquire(flags, index) == value


@njit(nogil=True, cache=True)
def publish_then_await_other(flags, index, value, watch, old, spins, linger):
    """:func:`publish` then :func:`await_other` in one call (the GIL stays released between);
    once the value has changed, ``linger`` more spins before returning."""
    _store_release(flags, index, value)
    seen = await_other(flags, watch, old, spins)
    if seen != old:
        for _ in range(linger):
            _pause()
    return seen
