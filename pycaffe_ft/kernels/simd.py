"""Eight-float vectors in Numba kernels: LLVM's ``<8 x float>`` as a Numba type, with load,
store, splat, zero and fused multiply-add.

Numba's loop vectorizer leaves register-blocked loops (a block of outputs kept in registers
over a long reduction) scalar; these intrinsics write such loops with vectors directly. On a
CPU with AVX2 and FMA each operation is one instruction; elsewhere LLVM lowers them to what
the CPU has (same results: ``vfma`` is a fused multiply-add everywhere). Indices are in
elements of the flat float32 array and are not bounds-checked: the caller keeps
``index + 8 <= size``.
"""
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

__all__ = ['vload', 'vstore', 'vsplat', 'vzero', 'vfma', 'WIDTH']

WIDTH = 8
_VECTOR = ir.VectorType(ir.FloatType(), WIDTH)


class Float32x8(types.Type):
    """Eight float32 lanes held in one (ymm) register."""

    def __init__(self):
        super().__init__(name='float32x8')


float32x8 = Float32x8()


@register_model(Float32x8)
class _Float32x8Model(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, _VECTOR)


def _element_pointer(context, builder, array_type, array, index):
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


@intrinsic
def vload(typingctx, array, index):
    """array[index:index + 8] as a vector."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        return builder.load(builder.bitcast(pointer, _VECTOR.as_pointer()), align=4)
    return float32x8(array, index), codegen


@intrinsic
def vstore(typingctx, array, index, vector):
    """array[index:index + 8] = vector."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(pointer, _VECTOR.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(array, index, vector), codegen


@intrinsic
def vsplat(typingctx, array, index):
    """array[index] in all eight lanes."""
    def codegen(context, builder, sig, args):
        value = builder.load(_element_pointer(context, builder, sig.args[0], args[0], args[1]))
        lane0 = builder.insert_element(ir.Constant(_VECTOR, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
        zeros = ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), [0] * WIDTH)
        return builder.shuffle_vector(lane0, ir.Constant(_VECTOR, ir.Undefined), zeros)
    return float32x8(array, index), codegen


@intrinsic
def vzero(typingctx):
    """Eight zeros."""
    def codegen(context, builder, sig, args):
        return ir.Constant(_VECTOR, [0.0] * WIDTH)
    return float32x8(), codegen


@intrinsic
def vfma(typingctx, a, b, c):
    """a * b + c per lane, rounded once."""
    def codegen(context, builder, sig, args):
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VECTOR, [_VECTOR] * 3),
                                             'llvm.fma.v8f32')
        return builder.call(fma, args)
    return float32x8(a, b, c), codegen
