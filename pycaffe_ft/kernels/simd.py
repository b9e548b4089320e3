"""Eight-float vectors in Numba kernels: LLVM's ``<8 x float>`` as a Numba type, with load
(also of the even elements of 16, or the even and the odd ones, in swizzled lane order; of four
elements each in two lanes), store, splat, ramp, zero, fused multiply-add, lane-wise
arithmetic, compare-and-select, compare-and-add, a bitwise keep-or-zero and an 8 x 8
transpose; and cache prefetch hints (to read, to write).
Sixteen-float vectors (``wload``, ``wload_even``, ``whalves``, ``wstore``, ``wsplat``,
``wfull``, ``wramp``, ``wzero``, and two rows of eight in one vector: ``wload_rows``,
``wload_even_rows``, ``wramp_rows``; sixteen lanes picked by a table from four vectors or two:
``wpick``, ``wpick2``; masked loads and stores of some lanes: ``wload_lanes``, ``wstore_lanes``;
two vectors' lanes interleaved: ``winterleave``; one zmm register; ``vfma``, ``vstore``,
``vwhere_gt``, ``vadd_if_eq``, ``vrelu`` and the lane-wise arithmetic take either width) for
kernels that have a wide variant, used where :data:`WIDE` says the CPU has AVX-512.

Numba's loop vectorizer leaves register-blocked loops (a block of outputs kept in registers
over a long reduction) scalar; these intrinsics write such loops with vectors directly. On a
CPU with AVX2 and FMA each operation is one instruction; elsewhere LLVM lowers them to what
the CPU has (same results: ``vfma`` is a fused multiply-add everywhere). Indices are in
elements of the flat float32 array and are not bounds-checked: the caller keeps
``index + 8 <= size``.
"""
from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import config
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model

__all__ = ['vload', 'vload_even_swizzled', 'vload_evens_odds_swizzled', 'vunswizzle', 'vload_pairs', 'vstore', 'vsplat',
           'vfull', 'vramp', 'vzero', 'vfma', 'vadd', 'vsub', 'vmul', 'vdiv', 'vwhere_gt', 'vadd_where_eq',
           'vadd_if_eq', 'vkeep', 'vrelu', 'vtranspose',
           'prefetch', 'prefetch_to_write', 'WIDTH',
           'wload', 'wload_even', 'wload_rows', 'wload_even_rows', 'wramp_rows', 'whalves', 'wstore', 'wsplat', 'wfull',
           'wramp', 'wzero', 'wpick', 'wpick2', 'wpermute2', 'wpermute4', 'wstore_past_caches', 'store_fence',
           'wload_lanes', 'wload_halves', 'wstore_lanes', 'winterleave', 'WIDE',
           'WIDE_AT_HALF_RATE']

WIDTH = 8
_VECTOR = ir.VectorType(ir.FloatType(), WIDTH)
_WIDE_VECTOR = ir.VectorType(ir.FloatType(), 2 * WIDTH)
_WIDE_INDEX = ir.VectorType(ir.IntType(32), 2 * WIDTH)


def _host_has_avx512():
    """Whether Numba compiles for this CPU (no NUMBA_CPU_NAME override) and it has AVX-512F."""
    if config.CPU_NAME not in (None, 'host'):
        return False
    features = llvm.get_host_cpu_features()
    return bool(features.get('avx512f', False))


WIDE = _host_has_avx512()
"""Whether kernels with a sixteen-lane variant take it: on a CPU without AVX-512 LLVM would
split each sixteen-lane vector into two and the wide register blocks would spill."""

WIDE_AT_HALF_RATE = WIDE and llvm.get_host_cpu_name() == 'znver4'
"""Whether the CPU runs each sixteen-lane operation as two eight-lane ones (AMD Zen 4: AVX-512
on 256-bit units): sixteen lanes then compute no faster than eight, and a kernel whose rows
leave fewer lanes idle in eight-lane vectors takes those (see
:func:`~.direct_conv.direct_forward`)."""


class _FloatVector(types.Type):
    """float32 lanes held in one vector register (``lanes`` of them)."""
    lanes = None

    def __init__(self):
        super().__init__(name='float32x%d' % self.lanes)


class Float32x8(_FloatVector):
    """Eight float32 lanes held in one (ymm) register."""
    lanes = WIDTH


class Float32x16(_FloatVector):
    """Sixteen float32 lanes held in one (zmm) register: only where :data:`WIDE`."""
    lanes = 2 * WIDTH


float32x8, float32x16 = Float32x8(), Float32x16()


class _FloatVectorModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        super().__init__(dmm, fe_type, ir.VectorType(ir.FloatType(), fe_type.lanes))


register_model(Float32x8)(_FloatVectorModel)
register_model(Float32x16)(_FloatVectorModel)


def _element_pointer(context, builder, array_type, array, index):
    data = context.make_array(array_type)(context, builder, array).data
    return builder.gep(data, [index])


def _load_codegen(vector):
    """Codegen of a load of ``vector`` (an LLVM vector type) from array[index]."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        return builder.load(builder.bitcast(pointer, vector.as_pointer()), align=4)
    return codegen


@intrinsic
def vload(typingctx, array, index):
    """array[index:index + 8] as a vector."""
    return float32x8(array, index), _load_codegen(_VECTOR)


def _sixteen(context, builder, sig, args):
    """array[index:index + 8] and array[index + 8:index + 16] (the intrinsic's first two
    arguments) as two vectors."""
    pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
    low = builder.load(builder.bitcast(pointer, _VECTOR.as_pointer()), align=4)
    high_pointer = builder.gep(pointer, [ir.Constant(ir.IntType(64), WIDTH)])
    return low, builder.load(builder.bitcast(high_pointer, _VECTOR.as_pointer()), align=4)


_EVENS_SWIZZLED, _ODDS_SWIZZLED = [0, 2, 8, 10, 4, 6, 12, 14], [1, 3, 9, 11, 5, 7, 13, 15]


@intrinsic
def vload_even_swizzled(typingctx, array, index):
    """array[index + 2 * k] for k = 0, 1, 4, 5, 2, 3, 6, 7 (lane order): the even elements of
    array[index:index + 16] with one in-lane shuffle (no lane crossing); lane-wise work on
    them is put back in order by :func:`vunswizzle`."""
    def codegen(context, builder, sig, args):
        return _shuffle(builder, *_sixteen(context, builder, sig, args), _EVENS_SWIZZLED)
    return float32x8(array, index), codegen


@intrinsic
def vload_evens_odds_swizzled(typingctx, array, index):
    """(the even elements, the odd elements) of array[index:index + 16], both in
    :func:`vload_even_swizzled`'s lane order: two loads and two in-lane shuffles."""
    def codegen(context, builder, sig, args):
        low, high = _sixteen(context, builder, sig, args)
        return context.make_tuple(builder, sig.return_type, [_shuffle(builder, low, high, _EVENS_SWIZZLED),
                                                             _shuffle(builder, low, high, _ODDS_SWIZZLED)])
    return types.UniTuple(float32x8, 2)(array, index), codegen


@intrinsic
def vunswizzle(typingctx, vector):
    """Lanes 0, 1, 4, 5, 2, 3, 6, 7 of ``vector``: the lane order of
    :func:`vload_even_swizzled` back to k = 0 .. 7 (and the other way round)."""
    def codegen(context, builder, sig, args):
        return _shuffle(builder, args[0], ir.Constant(_VECTOR, ir.Undefined), [0, 1, 4, 5, 2, 3, 6, 7])
    return float32x8(vector), codegen


@intrinsic
def vload_pairs(typingctx, array, index):
    """array[index], array[index], array[index + 1], array[index + 1], ... array[index + 3] (each
    of four elements in two lanes: one 4-element load and a shuffle; index + 4 <= size)."""
    def codegen(context, builder, sig, args):
        quad = ir.VectorType(ir.FloatType(), 4)
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        four = builder.load(builder.bitcast(pointer, quad.as_pointer()), align=4)
        return _shuffle(builder, four, ir.Constant(quad, ir.Undefined), [0, 0, 1, 1, 2, 2, 3, 3])
    return float32x8(array, index), codegen


@intrinsic
def vstore(typingctx, array, index, vector):
    """array[index:index + 8] = vector (index + 16 for a wide one)."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        builder.store(args[2], builder.bitcast(pointer, args[2].type.as_pointer()), align=4)
        return context.get_dummy_value()
    return types.void(array, index, vector), codegen


def _splat_codegen(vector):
    """Codegen of array[index] in every lane of ``vector``."""
    def codegen(context, builder, sig, args):
        value = builder.load(_element_pointer(context, builder, sig.args[0], args[0], args[1]))
        return _splat(builder, value, vector)
    return codegen


@intrinsic
def vsplat(typingctx, array, index):
    """array[index] in all eight lanes."""
    return float32x8(array, index), _splat_codegen(_VECTOR)


def _splat(builder, value, vector=_VECTOR):
    lane0 = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    zeros = ir.Constant(ir.VectorType(ir.IntType(32), vector.count), [0] * vector.count)
    return builder.shuffle_vector(lane0, ir.Constant(vector, ir.Undefined), zeros)


def _full_codegen(vector):
    """Codegen of a float32 value in every lane of ``vector``."""
    def codegen(context, builder, sig, args):
        return _splat(builder, args[0], vector)
    return codegen


@intrinsic
def vfull(typingctx, value):
    """The float32 ``value`` in all eight lanes."""
    return float32x8(types.float32), _full_codegen(_VECTOR)


def _ramp_codegen(vector):
    """Codegen of start + lane * step over the lanes of ``vector`` (float32 arithmetic)."""
    def codegen(context, builder, sig, args):
        lanes = ir.Constant(vector, [float(i) for i in range(vector.count)])
        return builder.fadd(_splat(builder, args[0], vector), builder.fmul(lanes, _splat(builder, args[1], vector)))
    return codegen


@intrinsic
def vramp(typingctx, start, step):
    """start + lane * step for lanes 0 .. 7 (float32 arithmetic)."""
    return float32x8(types.float32, types.float32), _ramp_codegen(_VECTOR)


@intrinsic
def vwhere_gt(typingctx, x, y, a, b):
    """Per lane: a where x > y (ordered: never for a NaN), else b."""
    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered('>', args[0], args[1]), args[2], args[3])
    return a(x, y, a, b), codegen


@intrinsic
def vadd_where_eq(typingctx, total, a, b, v):
    """Per lane: total + v where a == b (ordered), else total + (+0)."""
    def codegen(context, builder, sig, args):
        zero = ir.Constant(args[3].type, [0.0] * args[3].type.count)
        return builder.fadd(args[0], builder.select(builder.fcmp_ordered('==', args[1], args[2]), args[3], zero))
    return total(total, a, b, v), codegen


@intrinsic
def vadd_if_eq(typingctx, total, a, b, v):
    """Per lane: total + v where a == b (ordered), else total: one masked add. The bits of
    :func:`vadd_where_eq` for every total but -0 (-0 + +0 is +0), so for sums begun at +0."""
    def codegen(context, builder, sig, args):
        return builder.select(builder.fcmp_ordered('==', args[1], args[2]), builder.fadd(args[0], args[3]), args[0])
    return total(total, a, b, v), codegen


@intrinsic
def vrelu(typingctx, x):
    """Per lane: x where x > 0 or x is a NaN, else +0 (:func:`~.relu.relu_forward`'s rule),
    on eight or sixteen lanes."""
    def codegen(context, builder, sig, args):
        zero = ir.Constant(args[0].type, [0.0] * args[0].type.count)
        return builder.select(builder.fcmp_unordered('>', args[0], zero), args[0], zero)
    return x(x), codegen


def _zero_codegen(vector):
    def codegen(context, builder, sig, args):
        return ir.Constant(vector, [0.0] * vector.count)
    return codegen


@intrinsic
def vzero(typingctx):
    """Eight zeros."""
    return float32x8(), _zero_codegen(_VECTOR)


@intrinsic
def vfma(typingctx, a, b, c):
    """a * b + c per lane, rounded once (eight lanes or, for wide vectors, sixteen)."""
    def codegen(context, builder, sig, args):
        vector = args[0].type
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3),
                                             f'llvm.fma.v{vector.count}f32')
        return builder.call(fma, args)
    return a(a, b, c), codegen


wstore = vstore


@intrinsic
def wstore_past_caches(typingctx, array, index, vector):
    """array[index:index + 16] = vector by a non-temporal store, which writes the line to memory
    without reading it first and without keeping it in the caches: for outputs written whole and
    too large to stay there. array[index] must lie on a 64-byte boundary, and the writer must
    call :func:`store_fence` before another thread reads what it wrote."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        store = builder.store(args[2], builder.bitcast(pointer, args[2].type.as_pointer()), align=64)
        store.set_metadata('nontemporal', builder.module.add_metadata([ir.Constant(ir.IntType(32), 1)]))
        return context.get_dummy_value()
    return types.void(array, index, vector), codegen


@intrinsic
def store_fence(typingctx):
    """sfence: the non-temporal stores before it reach memory before any store after it."""
    def codegen(context, builder, sig, args):
        fence = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), []),
                                               'llvm.x86.sse.sfence')
        builder.call(fence, [])
        return context.get_dummy_value()
    return types.void(), codegen


@intrinsic
def wload(typingctx, array, index):
    """array[index:index + 16] as a wide vector."""
    return float32x16(array, index), _load_codegen(_WIDE_VECTOR)


def _evens_of_two(builder, pointer, offset, vector):
    """The even elements of the ``vector``-wide spans at pointer and pointer + offset (an LLVM
    i64 value), the first span's in the low half of the result: two loads, one permute."""
    lanes = vector.count
    low = builder.load(builder.bitcast(pointer, vector.as_pointer()), align=4)
    high = builder.load(builder.bitcast(builder.gep(pointer, [offset]), vector.as_pointer()), align=4)
    return builder.shuffle_vector(low, high, ir.Constant(ir.VectorType(ir.IntType(32), lanes),
                                                         list(range(0, 2 * lanes, 2))))


def _lanes_within(builder, first, end):
    """<16 x i1>: lanes first <= lane < end (i64 values, compared as int32 clamped to
    [-1, 16]: one 16-lane compare each)."""
    lanes = ir.Constant(_WIDE_INDEX, list(range(2 * WIDTH)))
    undefined, zeros = ir.Constant(_WIDE_INDEX, ir.Undefined), ir.Constant(_WIDE_INDEX, [0] * (2 * WIDTH))

    def splat(bound):
        low, high = ir.Constant(bound.type, -1), ir.Constant(bound.type, 2 * WIDTH)
        bound = builder.select(builder.icmp_signed('<', bound, low), low, bound)
        bound = builder.trunc(builder.select(builder.icmp_signed('>', bound, high), high, bound), ir.IntType(32))
        return builder.shuffle_vector(builder.insert_element(undefined, bound, ir.Constant(ir.IntType(32), 0)),
                                      undefined, zeros)
    return builder.and_(builder.icmp_signed('>=', lanes, splat(first)), builder.icmp_signed('<', lanes, splat(end)))


# LLVM's masked load and store by their typed-pointer names (LLVM 14, numba 0.58's), which later
# LLVMs upgrade to their opaque-pointer ones.
def _masked_load(builder, pointer, within, fill):
    """LLVM's masked load of ``fill``'s lane count of floats (8 or 16) at ``pointer``: lanes
    ``within``, else ``fill``'s."""
    vector = fill.type
    pointer = builder.bitcast(pointer, vector.as_pointer())
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(vector, [pointer.type, ir.IntType(32), within.type, vector]),
        'llvm.masked.load.v%df32.p0v%df32' % (vector.count, vector.count))
    return builder.call(function, [pointer, ir.Constant(ir.IntType(32), 4), within, fill])


def _masked_store(builder, vector, pointer, within):
    """LLVM's masked store of the lanes ``within`` of sixteen floats at ``pointer``."""
    pointer = builder.bitcast(pointer, _WIDE_VECTOR.as_pointer())
    function = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(ir.VoidType(), [_WIDE_VECTOR, pointer.type, ir.IntType(32), within.type]),
        'llvm.masked.store.v16f32.p0v16f32')
    builder.call(function, [vector, pointer, ir.Constant(ir.IntType(32), 4), within])


@intrinsic
def wload_lanes(typingctx, array, index, first, end, fill):
    """Lane l is array[index + l] for first <= l < end, else ``fill``'s lane l: a masked load,
    which reads nothing of the other lanes (index + l may lie outside the array there)."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        return _masked_load(builder, pointer, _lanes_within(builder, args[2], args[3]), args[4])
    return float32x16(array, types.int64, types.int64, types.int64, fill), codegen


@intrinsic
def wload_halves(typingctx, array, index, offset, first, end, fill):
    """Lanes 0 .. 7 from array[index:] and 8 .. 15 from array[index + offset:] (two rows or
    planes in one vector), lane l + 8 h being array[index + h offset + l] for first <= l < end,
    else ``fill``'s lane: two eight-lane masked loads, which read nothing of the other lanes."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        eight = ir.VectorType(ir.IntType(32), WIDTH)
        lanes = _lanes_within(builder, args[3], args[4])
        within = builder.shuffle_vector(lanes, lanes, ir.Constant(eight, list(range(WIDTH))))
        halves = [_masked_load(builder, base, within, builder.shuffle_vector(
            args[5], args[5], ir.Constant(eight, list(range(first, first + WIDTH)))))
            for base, first in ((pointer, 0), (builder.gep(pointer, [args[2]]), WIDTH))]
        return builder.shuffle_vector(halves[0], halves[1], ir.Constant(_WIDE_INDEX, list(range(2 * WIDTH))))
    return float32x16(array, types.int64, types.int64, types.int64, types.int64, fill), codegen


@intrinsic
def wstore_lanes(typingctx, array, index, vector, count):
    """array[index + l] = vector's lane l for the lanes l < count (a masked store: nothing
    beyond them is written)."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        _masked_store(builder, args[2], pointer, _lanes_within(builder, ir.Constant(ir.IntType(64), 0), args[3]))
        return context.get_dummy_value()
    return types.void(array, types.int64, vector, types.int64), codegen


@intrinsic
def winterleave(typingctx, a, b):
    """(a0 b0 a1 b1 .. a7 b7, a8 b8 .. a15 b15): the lanes of two wide vectors interleaved."""
    def codegen(context, builder, sig, args):
        halves = [builder.shuffle_vector(args[0], args[1], ir.Constant(_WIDE_INDEX, [
            first + (lane // 2) + (lane % 2) * 2 * WIDTH for lane in range(2 * WIDTH)])) for first in (0, WIDTH)]
        return context.make_tuple(builder, sig.return_type, halves)
    return types.UniTuple(float32x16, 2)(a, b), codegen


@intrinsic
def wload_even(typingctx, array, index):
    """array[index + 2 * k] for k = 0 .. 15 (the even elements of array[index:index + 32], in
    order: two loads and one two-register permute)."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        return _evens_of_two(builder, pointer, ir.Constant(ir.IntType(64), 2 * WIDTH), _WIDE_VECTOR)
    return float32x16(array, index), codegen


@intrinsic
def wload_even_rows(typingctx, array, index, offset):
    """Two rows' taps at stride 2 in one wide vector: the even elements of
    array[index:index + 16] in lanes 0 .. 7 and of array[index + offset:index + offset + 16] in
    lanes 8 .. 15."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        return _evens_of_two(builder, pointer, args[2], _WIDE_VECTOR)
    return float32x16(array, index, types.int64), codegen


@intrinsic
def wload_rows(typingctx, array, index, offset):
    """array[index:index + 8] in lanes 0 .. 7 and array[index + offset:index + offset + 8] in
    lanes 8 .. 15 (two loads, one insert)."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        low = builder.load(builder.bitcast(pointer, _VECTOR.as_pointer()), align=4)
        high = builder.load(builder.bitcast(builder.gep(pointer, [args[2]]), _VECTOR.as_pointer()), align=4)
        return builder.shuffle_vector(low, high, ir.Constant(ir.VectorType(ir.IntType(32), 2 * WIDTH),
                                                             list(range(2 * WIDTH))))
    return float32x16(array, index, types.int64), codegen


@intrinsic
def wramp_rows(typingctx, start, step, offset):
    """start + (lane % 8) * step + (lane // 8) * offset for lanes 0 .. 15 (float32 arithmetic):
    the positions of :func:`wload_rows` or :func:`wload_even_rows` taps."""
    def codegen(context, builder, sig, args):
        steps = ir.Constant(_WIDE_VECTOR, [float(i % WIDTH) for i in range(2 * WIDTH)])
        rows = ir.Constant(_WIDE_VECTOR, [float(i // WIDTH) for i in range(2 * WIDTH)])
        start, step, offset = (_splat(builder, value, _WIDE_VECTOR) for value in args)
        return builder.fadd(builder.fadd(start, builder.fmul(steps, step)), builder.fmul(rows, offset))
    return float32x16(types.float32, types.float32, types.float32), codegen


@intrinsic
def whalves(typingctx, vector):
    """The wide vector's lanes 0 .. 7 and 8 .. 15 as two eight-lane vectors."""
    def codegen(context, builder, sig, args):
        undefined = ir.Constant(_WIDE_VECTOR, ir.Undefined)
        low, high = (builder.shuffle_vector(args[0], undefined, ir.Constant(ir.VectorType(ir.IntType(32), WIDTH),
                                                                            list(range(first, first + WIDTH))))
                     for first in (0, WIDTH))
        return context.make_tuple(builder, sig.return_type, [low, high])
    return types.UniTuple(float32x8, 2)(vector), codegen


def _permute(builder):
    """AVX-512's two-register permute of sixteen floats by sixteen int32 lanes (vpermi2ps)."""
    return cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(_WIDE_VECTOR, [_WIDE_VECTOR, _WIDE_INDEX, _WIDE_VECTOR]),
        'llvm.x86.avx512.vpermi2var.ps.512')


def _at_least(builder, lanes, bound):
    return builder.icmp_unsigned('>=', lanes, ir.Constant(_WIDE_INDEX, [bound] * (2 * WIDTH)))


@intrinsic
def wpick(typingctx, v0, v1, v2, v3, picks, index, outside):
    """Sixteen lanes picked from the 64 floats of v0 .. v3 (v0's lanes first): lane l is element
    ``picks[index + l]`` (an int32 array) of those 64, or ``outside``'s lane l where that pick is
    64 or more. Two two-register permutes and two blends."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[4], args[4], args[5])
        lanes = builder.load(builder.bitcast(pointer, _WIDE_INDEX.as_pointer()), align=4)
        permute = _permute(builder)
        low, high = builder.call(permute, [args[0], lanes, args[1]]), builder.call(permute, [args[2], lanes, args[3]])
        return builder.select(_at_least(builder, lanes, 64), args[6],
                              builder.select(_at_least(builder, lanes, 32), high, low))
    if not (isinstance(picks, types.Array) and picks.dtype == types.int32):
        return None
    return float32x16(v0, v1, v2, v3, picks, index, outside), codegen


@intrinsic
def wpick2(typingctx, v0, v1, picks, index, outside):
    """Sixteen lanes picked from the 32 floats of v0 and v1 (v0's lanes first): lane l is
    element ``picks[index + l]`` (an int32 array) of those 32, or ``outside``'s lane l where that
    pick is 32 or more. One two-register permute and one blend."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[2], args[2], args[3])
        lanes = builder.load(builder.bitcast(pointer, _WIDE_INDEX.as_pointer()), align=4)
        picked = builder.call(_permute(builder), [args[0], lanes, args[1]])
        return builder.select(_at_least(builder, lanes, 32), args[4], picked)
    if not (isinstance(picks, types.Array) and picks.dtype == types.int32):
        return None
    return float32x16(v0, v1, picks, index, outside), codegen


@intrinsic
def wpermute4(typingctx, v0, v1, v2, v3, picks, index):
    """:func:`wpick` where every pick is below 64: two permutes and one blend."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[4], args[4], args[5])
        lanes = builder.load(builder.bitcast(pointer, _WIDE_INDEX.as_pointer()), align=4)
        permute = _permute(builder)
        low, high = builder.call(permute, [args[0], lanes, args[1]]), builder.call(permute, [args[2], lanes, args[3]])
        return builder.select(_at_least(builder, lanes, 32), high, low)
    if not (isinstance(picks, types.Array) and picks.dtype == types.int32):
        return None
    return float32x16(v0, v1, v2, v3, picks, index), codegen


@intrinsic
def wpermute2(typingctx, v0, v1, picks, index):
    """:func:`wpick2` where every pick is below 32: the permute alone."""
    def codegen(context, builder, sig, args):
        pointer = _element_pointer(context, builder, sig.args[2], args[2], args[3])
        lanes = builder.load(builder.bitcast(pointer, _WIDE_INDEX.as_pointer()), align=4)
        return builder.call(_permute(builder), [args[0], lanes, args[1]])
    if not (isinstance(picks, types.Array) and picks.dtype == types.int32):
        return None
    return float32x16(v0, v1, picks, index), codegen


@intrinsic
def wsplat(typingctx, array, index):
    """array[index] in all sixteen lanes."""
    return float32x16(array, index), _splat_codegen(_WIDE_VECTOR)


@intrinsic
def wfull(typingctx, value):
    """The float32 ``value`` in all sixteen lanes."""
    return float32x16(types.float32), _full_codegen(_WIDE_VECTOR)


@intrinsic
def wramp(typingctx, start, step):
    """start + lane * step for lanes 0 .. 15 (float32 arithmetic)."""
    return float32x16(types.float32, types.float32), _ramp_codegen(_WIDE_VECTOR)


@intrinsic
def wzero(typingctx):
    """Sixteen zeros."""
    return float32x16(), _zero_codegen(_WIDE_VECTOR)


def _lanewise(instruction, name, doc):
    """An intrinsic applying the IR builder's float ``instruction`` lane by lane (each result
    rounded on its own: no fusing with a later add), on eight or sixteen lanes."""
    def typer(typingctx, a, b):
        def codegen(context, builder, sig, args):
            return getattr(builder, instruction)(args[0], args[1])
        return a(a, b), codegen
    typer.__name__, typer.__qualname__, typer.__doc__ = name, name, doc
    return intrinsic(typer)


vadd = _lanewise('fadd', 'vadd', 'a + b per lane.')
vsub = _lanewise('fsub', 'vsub', 'a - b per lane.')
vmul = _lanewise('fmul', 'vmul', 'a * b per lane.')
vdiv = _lanewise('fdiv', 'vdiv', 'a / b per lane.')


@intrinsic
def vkeep(typingctx, a, mask):
    """a's bits where mask's lane is all ones (the bits of a float32 NaN 0xffffffff), +0 where
    it is all zeros: a bitwise and, on eight lanes."""
    def codegen(context, builder, sig, args):
        integers = ir.VectorType(ir.IntType(32), WIDTH)
        kept = builder.and_(builder.bitcast(args[0], integers), builder.bitcast(args[1], integers))
        return builder.bitcast(kept, _VECTOR)
    return float32x8(a, mask), codegen


def _shuffle(builder, a, b, lanes):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), WIDTH), lanes))


@intrinsic
def vtranspose(typingctx, r0, r1, r2, r3, r4, r5, r6, r7):
    """The 8 x 8 transpose: lane j of result i = lane i of argument j."""
    def codegen(context, builder, sig, args):
        lo, hi = [0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15]
        t = []
        for i in range(0, 8, 2):
            t += [_shuffle(builder, args[i], args[i + 1], lo), _shuffle(builder, args[i], args[i + 1], hi)]
        first, second = [0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15]
        s = []
        for a, b in ((t[0], t[2]), (t[1], t[3]), (t[4], t[6]), (t[5], t[7])):
            s += [_shuffle(builder, a, b, first), _shuffle(builder, a, b, second)]
        # s: rows 0-3 of columns (0|4), (1|5), (2|6), (3|7); then rows 4-7 of the same
        low, high = [0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15]
        out = [None] * 8
        for j in range(4):
            out[j] = _shuffle(builder, s[j], s[j + 4], low)
            out[j + 4] = _shuffle(builder, s[j], s[j + 4], high)
        return context.make_tuple(builder, sig.return_type, out)
    return types.UniTuple(float32x8, 8)(r0, r1, r2, r3, r4, r5, r6, r7), codegen


def _prefetch_codegen(write):
    """llvm.prefetch of the element's line: for writing or reading, kept in every cache level."""
    def codegen(context, builder, sig, args):
        byte_pointer = ir.IntType(8).as_pointer()
        pointer = builder.bitcast(_element_pointer(context, builder, sig.args[0], args[0], args[1]), byte_pointer)
        i32 = ir.IntType(32)
        hint = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [byte_pointer, i32, i32, i32]),
                                              'llvm.prefetch.p0i8')
        locality, data_cache = ir.Constant(i32, 3), ir.Constant(i32, 1)
        builder.call(hint, [pointer, ir.Constant(i32, int(write)), locality, data_cache])
        return context.get_dummy_value()
    return codegen


@intrinsic
def prefetch(typingctx, array, index):
    """A hint to bring the cache line holding array[index] into the caches, to be read soon
    (no effect on any result)."""
    return types.void(array, index), _prefetch_codegen(False)


@intrinsic
def prefetch_to_write(typingctx, array, index):
    """:func:`prefetch` for a line about to be written (fetched for ownership, so that the
    stores do not wait for it)."""
    return types.void(array, index), _prefetch_codegen(True)
