"""Kernels compiled once as C functions, for other kernels to call through a pointer.

A kernel that calls another Numba kernel directly compiles the callee's code into itself again
(LLVM inlines and optimizes it anew), and the register-blocked products and the im2col loops
take seconds to compile: two kernels calling batched_gemm directly doubled LeNet's first
training step from a cold cache (6.6 -> 13 s). Compiled as a cached C function (``cfunc``),
the callee is built once and a caller taking its address as an argument calls it there
(:func:`c_caller`). Arrays cross as (float32 pointer, size) pairs: :func:`floats` gives the
pointer of a contiguous float32 array (or view).

The address crosses as a plain integer: a C function object passed to a kernel is typed anew on
every call, with the GIL held: a call passing two took 30 us (LeNet's conv2 backward: 0.03 of
each chunk's 0.75 ms), with their addresses 1.2 us.
"""
from llvmlite import ir
from numba import cfunc, types
from numba.extending import intrinsic

__all__ = ['FLOATS', 'floats', 'c_function', 'c_function_made', 'c_caller']

FLOATS = types.CPointer(types.float32)


@intrinsic
def floats(typingctx, array):
    """The address of a contiguous float32 array's first element, as a float32 pointer."""
    if not (isinstance(array, types.Array) and array.dtype == types.float32):
        return None

    def codegen(context, builder, sig, args):
        return context.make_array(sig.args[0])(context, builder, args[0]).data
    return FLOATS(array), codegen


_made = {}  # Python function -> its C function


def c_function(function, signature):
    """``function`` (defined at a module's top level: the worker of :mod:`.tiered` finds it by
    name) compiled as a cached C function of ``signature`` on the first call, loaded from
    Numba's cache where it has it; the same object after."""
    made = _made.get(function)
    if made is None:
        made = _made[function] = cfunc(signature, cache=True)(function)
    return made


def c_caller(signature):
    """An intrinsic ``call(address, args)`` calling the C function of ``signature`` (returning
    void) at ``address`` (an integer: a C function's ``.address``) with the tuple ``args``, each
    cast to its type in ``signature``. The caller keeps the C function alive (:func:`c_function`
    keeps every one it makes)."""
    @intrinsic
    def call(typingctx, address, args):
        if not (isinstance(address, types.Integer) and isinstance(args, types.BaseTuple)
                and len(args) == len(signature.args)):
            return None

        def codegen(context, builder, sig, llargs):
            function_type = ir.FunctionType(ir.VoidType(), [context.get_value_type(t) for t in signature.args])
            pointer = builder.inttoptr(context.cast(builder, llargs[0], sig.args[0], types.intp),
                                       function_type.as_pointer())
            values = [context.cast(builder, builder.extract_value(llargs[1], i), sig.args[1][i], t)
                      for i, t in enumerate(signature.args)]
            builder.call(pointer, values)
            return context.get_dummy_value()
        return types.void(address, args), codegen
    return call


def c_function_made(function):
    """Whether :func:`c_function` has made ``function`` in this process."""
    return function in _made

