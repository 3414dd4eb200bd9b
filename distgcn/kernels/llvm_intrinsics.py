"""LLVM operations that numba does not offer, for the wide loops of :mod:`distgcn.kernels.csr`.

- :func:`stack_buffer`: a fixed-size scratch array on the stack. numba's
  ``np.empty`` allocates on the heap, through a call LLVM cannot see into,
  so a row's accumulator lived in memory and every nonzero loaded and
  stored it again. An array on the stack that never escapes is promoted to
  vector registers (one zmm per 16 float32 columns on AVX-512).
- :func:`prefetch`: ``llvm.prefetch`` for the cache line holding one entry
  of a 2D array. The rows of H a product gathers are known a few nonzeros
  ahead (the column indices), but not to the hardware prefetcher.
- :func:`items_per_line`: a cache line's items, known when the loop is
  compiled (numba reads an array's itemsize at run time).
- :func:`write_row`: a finished row stored, or added, into the output in
  whole vectors. Read one item at a time, the registers a row was summed in
  were taken apart into items at the end of every row, whichever way it was
  then written.
- :func:`add_scaled_row` and :func:`add_scaled_to_row`: a row times a
  scalar added into the registers, or from them into a row of the output,
  in whole vectors.
- :func:`add_row_into`: one register-held row added to another, in whole
  vectors (a row summed in two chains, joined at its end).
- :func:`keyed_to`: nothing at run time; it keeps :data:`SOURCE_DIGEST` in
  the closure of each loop that calls these intrinsics, so that numba's disk
  cache, keyed on a loop's own source file and closure, misses when this
  file changes.
- :func:`claim_next`: an atomic counter, so that a parallel loop's threads
  take blocks of work as they finish the last. numba's ``prange`` splits its
  range evenly between the threads before the loop starts (with numba's
  OpenMP layer ``set_parallel_chunksize`` did not change that).

Imported on first use only (it imports numba), like the kernels.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from pathlib import Path

from llvmlite import binding as llvm
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

SOURCE_DIGEST = hashlib.sha256(Path(__file__).read_bytes()).hexdigest()
"""This file's digest. numba's cache finds a compiled loop again by the loop's source file and its closure's cells,
not by the files of the intrinsics it calls: a loop compiled before an intrinsic changed was loaded unchanged (a
test broken on purpose in this file passed on the stale loop). Loops pass it to :func:`keyed_to`."""
_I32 = ir.IntType(32)
_PREFETCH = "llvm.prefetch.p0" if llvm.llvm_version_info[0] >= 15 else "llvm.prefetch"
"""The intrinsic's name: overloaded on the pointer type since LLVM 15."""


@intrinsic
def stack_buffer(typingctx, count, dtype):
    """A pointer to ``count`` items of ``dtype`` on the calling function's stack, uninitialised.

    ``count`` must be a compile-time constant (a closure constant or a literal); wrap the pointer with
    ``numba.carray(pointer, count)``. Keep it small: it lives on a thread's stack.
    """
    if not isinstance(count, types.IntegerLiteral) or not isinstance(dtype, (types.DType, types.NumberClass)):
        return None
    items, item_type = count.literal_value, dtype.dtype

    def codegen(context, builder, signature, args):
        buffer = cgutils.alloca_once(builder, ir.ArrayType(context.get_data_type(item_type), items))
        return builder.bitcast(buffer, context.get_value_type(signature.return_type))

    return types.CPointer(item_type)(count, dtype), codegen


@intrinsic
def items_per_line(typingctx, array):
    """How many items of ``array``'s dtype a 64-byte cache line holds (at least 1), as a compile-time constant.

    numba keeps an array's itemsize as a run-time field: ``64 // array.itemsize`` left the prefetch over a row's
    lines a loop that divided at every nonzero.
    """
    if not isinstance(array, types.Array):
        return None

    def codegen(context, builder, signature, args):
        item_size = context.get_abi_sizeof(context.get_data_type(signature.args[0].dtype))
        return context.get_constant(types.intp, max(1, 64 // item_size))

    return types.intp(array), codegen


@intrinsic
def prefetch(typingctx, array, row, column, locality):
    """Ask the CPU to bring the cache line of ``array[row, column]`` closer (a read): into every cache level
    (``locality`` 3: x86's prefetcht0) or only into L2 (1: prefetcht2, which fills L2 but not L1 on current AMD and
    Intel cores).

    No bounds are checked and nothing is read: an address outside the array costs a wasted prefetch, never a
    fault. ``array`` is a 2D numba array, ``locality`` a compile-time constant from 0 to 3 (LLVM's hint).
    """
    if not (isinstance(array, types.Array) and array.ndim == 2 and isinstance(locality, types.IntegerLiteral)
            and 0 <= locality.literal_value <= 3):
        return None
    hint = locality.literal_value

    def codegen(context, builder, signature, args):
        pointer = _item_pointer(context, builder, signature.args[0], args[0], args[1:3], signature.args[1:3])
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [cgutils.voidptr_t, _I32, _I32, _I32]), _PREFETCH)
        # read (0), the locality hint, data cache (1)
        builder.call(function, [builder.bitcast(pointer, cgutils.voidptr_t), ir.Constant(_I32, 0),
                                ir.Constant(_I32, hint), ir.Constant(_I32, 1)])
        return context.get_dummy_value()

    return types.void(array, row, column, locality), codegen


@intrinsic
def write_row(typingctx, out, row, source, count, add):
    """out[row, :count] = source[:count] (``add`` False) or += source[:count] (True), in whole vectors (64 bytes,
    then narrower ones for the last items); any alignment.

    ``count`` and ``add`` are compile-time constants. A loop that wrote a register-held row item by item made LLVM
    split those registers into items at the end of every row, also on the paths that stored whole vectors
    (the CSR product, 64 columns, H in L1: 18.2 -> 16.6 cycles a nonzero; ``benchmarks/spmm_floor.py``). Adding is one addition per item, as the item-by-item loop: the same bits.
    """
    if not (isinstance(out, types.Array) and out.ndim == 2 and out.layout == "C" and isinstance(source, types.CPointer)
            and isinstance(count, types.IntegerLiteral) and isinstance(add, types.BooleanLiteral)
            and source.dtype == out.dtype):
        return None
    items, adding = count.literal_value, add.literal_value

    def codegen(context, builder, signature, args):
        item_type = context.get_data_type(signature.args[0].dtype)
        item_size = context.get_abi_sizeof(item_type)
        target = _row_start(context, builder, signature.args[0], args[0], args[1], signature.args[1])
        for start, _, vector in _vector_pieces(item_type, item_size, items):
            value = builder.load(builder.bitcast(cgutils.gep(builder, args[2], start), vector.as_pointer()),
                                 align=item_size)
            into = builder.bitcast(cgutils.gep(builder, target, start), vector.as_pointer())
            if adding:
                value = builder.fadd(builder.load(into, align=item_size), value)
            builder.store(value, into, align=item_size)
        return context.get_dummy_value()

    return types.void(out, row, source, count, add), codegen


@intrinsic
def add_row_into(typingctx, sums, other, count):
    """sums[:count] += other[:count], in whole vectors (64 bytes, then narrower ones for the last items); both are
    stack buffers of one dtype. ``count`` is a compile-time constant."""
    if not (isinstance(sums, types.CPointer) and isinstance(other, types.CPointer) and sums.dtype == other.dtype
            and isinstance(count, types.IntegerLiteral)):
        return None
    items = count.literal_value

    def codegen(context, builder, signature, args):
        item_type = context.get_data_type(signature.args[0].dtype)
        item_size = context.get_abi_sizeof(item_type)
        for start, _, vector in _vector_pieces(item_type, item_size, items):
            into = builder.bitcast(cgutils.gep(builder, args[0], start), vector.as_pointer())
            value = builder.load(builder.bitcast(cgutils.gep(builder, args[1], start), vector.as_pointer()),
                                 align=item_size)
            builder.store(builder.fadd(builder.load(into, align=item_size), value), into, align=item_size)
        return context.get_dummy_value()

    return types.void(sums, other, count), codegen


@intrinsic
def add_scaled_row(typingctx, sums, array, row, scale, count):
    """sums[:count] += scale * array[row, :count], in fused multiply-adds on 64-byte vectors (narrower ones for the
    last items).

    ``count`` is a compile-time constant. Left to itself, LLVM unrolls a loop of 16 or 32 float32 columns into as
    many scalar multiply-adds before it would vectorize it (2.7x slower at 32 columns); written as vectors here,
    every width runs on whole registers. Each item is one fused multiply-add, as the contracted scalar loop does,
    so the bits are the same. ``array`` is a C-contiguous 2D array of the items ``sums`` points to.
    """
    if not (isinstance(sums, types.CPointer) and isinstance(array, types.Array) and array.ndim == 2
            and array.layout == "C" and array.dtype == sums.dtype and isinstance(count, types.IntegerLiteral)):
        return None
    items = count.literal_value

    def codegen(context, builder, signature, args):
        sums_pointer, array_value, row_value, scale_value = args[:4]
        item = signature.args[0].dtype
        source = _row_start(context, builder, signature.args[1], array_value, row_value, signature.args[2])
        scale = context.cast(builder, scale_value, signature.args[3], item)
        _add_scaled(context, builder, sums_pointer, source, scale, context.get_data_type(item), items)
        return context.get_dummy_value()

    return types.void(sums, array, row, scale, count), codegen


@intrinsic
def add_scaled_to_row(typingctx, array, row, source, scale, count):
    """array[row, :count] += scale * source[:count]: :func:`add_scaled_row` the other way round, for a loop that
    scatters a row kept in registers into rows of its output (each item one fused multiply-add).

    ``count`` is a compile-time constant; ``array`` is a C-contiguous 2D array of the items ``source`` points to.
    """
    if not (isinstance(source, types.CPointer) and isinstance(array, types.Array) and array.ndim == 2
            and array.layout == "C" and array.dtype == source.dtype and isinstance(count, types.IntegerLiteral)):
        return None
    items = count.literal_value

    def codegen(context, builder, signature, args):
        array_value, row_value, source_pointer, scale_value = args[:4]
        item = signature.args[2].dtype
        target = _row_start(context, builder, signature.args[0], array_value, row_value, signature.args[1])
        scale = context.cast(builder, scale_value, signature.args[3], item)
        _add_scaled(context, builder, target, source_pointer, scale, context.get_data_type(item), items)
        return context.get_dummy_value()

    return types.void(array, row, source, scale, count), codegen


@intrinsic
def keyed_to(typingctx, digest):
    """Nothing at run time. Called with :data:`SOURCE_DIGEST` held in a closure variable, it makes the digest one
    of the loop's closure cells, which numba's cache key includes: a change to this file compiles the loop again."""
    if not isinstance(digest, (types.UnicodeType, types.StringLiteral)):
        return None

    def codegen(context, builder, signature, args):
        return context.get_dummy_value()

    return types.none(digest), codegen


@intrinsic
def claim_next(typingctx, counter):
    """The value of ``counter[0]`` (a 1D int64 array), incremented by one in the same atomic step: each value goes
    to exactly one of the threads that call it. No ordering of other memory is implied (monotonic)."""
    if not (isinstance(counter, types.Array) and counter.ndim == 1 and counter.dtype == types.int64):
        return None

    def codegen(context, builder, signature, args):
        first = context.make_array(signature.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw("add", first, ir.Constant(ir.IntType(64), 1), "monotonic")

    return types.int64(counter), codegen


def _add_scaled(context, builder: ir.IRBuilder, target: ir.Value, source: ir.Value, scale: ir.Value,
                item_type: ir.Type, items: int) -> None:
    """target[:items] += scale * source[:items] in fused multiply-adds on 64-byte vectors, then narrower ones for
    the last items (both pointers to items of ``item_type``, any alignment)."""
    item_size = context.get_abi_sizeof(item_type)
    for start, lanes, vector in _vector_pieces(item_type, item_size, items):
        fma = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector, [vector] * 3),
                                             f"llvm.fma.{f'v{lanes}' if lanes > 1 else ''}{_suffix(item_type)}")
        into = builder.bitcast(cgutils.gep(builder, target, start), vector.as_pointer())
        values = builder.load(builder.bitcast(cgutils.gep(builder, source, start), vector.as_pointer()),
                              align=item_size)
        builder.store(builder.call(fma, [_splat(builder, scale, vector, lanes), values,
                                         builder.load(into, align=item_size)]), into, align=item_size)


def _vector_pieces(item_type: ir.Type, item_size: int, items: int) -> Iterator[tuple[int, int, ir.Type]]:
    """(first item, lanes, LLVM type) of the pieces that cover ``items`` items: 64-byte vectors, then 32- and
    16-byte ones, then single items for the rest."""
    start = 0
    for vector_bytes in (64, 32, 16, item_size):
        lanes = vector_bytes // item_size
        while start + lanes <= items:
            yield start, lanes, ir.VectorType(item_type, lanes) if lanes > 1 else item_type
            start += lanes


def _item_pointer(context, builder: ir.IRBuilder, array_type: types.Array, array: ir.Value,
                  indices: list[ir.Value], index_types: list[types.Type]) -> ir.Value:
    """The address of ``array[indices]``, unchecked (no bounds, no negative-index wraparound)."""
    ary = context.make_array(array_type)(context, builder, array)
    positions = [context.cast(builder, value, value_type, types.intp)
                 for value, value_type in zip(indices, index_types)]
    return cgutils.get_item_pointer(context, builder, array_type, ary, positions, wraparound=False)


def _row_start(context, builder: ir.IRBuilder, array_type: types.Array, array: ir.Value, row: ir.Value,
               row_type: types.Type) -> ir.Value:
    """The address of ``array[row, 0]``."""
    return _item_pointer(context, builder, array_type, array, [row, context.get_constant(types.intp, 0)],
                         [row_type, types.intp])


def _suffix(item_type: ir.Type) -> str:
    """LLVM's name for a float type in intrinsic names (f32, f64)."""
    return {"float": "f32", "double": "f64"}[str(item_type)]


def _splat(builder: ir.IRBuilder, value: ir.Value, vector: ir.Type, lanes: int) -> ir.Value:
    """``value`` in every lane of ``vector`` (``value`` itself for one lane)."""
    if lanes == 1:
        return value
    first = builder.insert_element(ir.Constant(vector, ir.Undefined), value, ir.Constant(_I32, 0))
    return builder.shuffle_vector(first, ir.Constant(vector, ir.Undefined),
                                  ir.Constant(ir.VectorType(_I32, lanes), [0] * lanes))
