"""Fork-join kernels whose per-thread work is compiled once, outside numba's parallel loop.

numba compiles a ``prange`` loop four times over: its body becomes a gufunc, wrapped twice
for the thread pool, and called from the outer function — and LLVM links in and optimizes
everything the body calls again at each of those stages. A convolution's body calls the
micro-kernel, the epilogue interpreter and the emitters, about 10 k instructions: most of
a fast kernel's 20–40 s first compile was LLVM optimizing the same code four times, and
numba's parallel passes copying and analysing the big body.

So a heavy kernel is written as its *task*, ``task(t, *args)`` — what thread t of
``nthreads`` does, an ordinary ``@njit`` function — and ``fork_call`` runs it on every
thread of the pool:

- ``_launch(entry, nthreads, blob)`` is the one ``prange`` loop, compiled once per machine:
  each thread calls ``entry(t, blob)`` by its address.
- ``_prepare(task, args, blob)``, compiled per argument types (small and serial), stores
  the task's address and its arguments in a buffer the thunk keeps (``blob``), once, when
  the layer is prebound, and defines the entry: a function that reads them back and calls
  the task with numba's calling convention. A run then passes three integers.

The task is compiled (and cached on disk) once and called, not linked: at run time that
is one indirect call per thread per layer.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.core.dispatcher import Dispatcher
from numba.core.registry import cpu_target
from numba.extending import intrinsic

from pydla.backends.cpu.steps import Thunk, arg_types, arg_values, kernel_call
from pydla.backends.cpu.workspace import aligned_zeros

_I64 = ir.IntType(64)
_ENTRY = ir.FunctionType(ir.VoidType(), [_I64, _I64])  # entry(t, blob)


@intrinsic
def _call_entry(typingctx: Any, entry: types.Type, t: types.Type, blob: types.Type) -> Any:
    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        fn = builder.inttoptr(llargs[0], _ENTRY.as_pointer())
        builder.call(fn, [context.cast(builder, llargs[1], sig.args[1], types.int64),
                          llargs[2]])
        return context.get_dummy_value()

    return types.none(entry, t, blob), codegen


@njit(parallel=True, cache=True)
def _launch(entry: int, nthreads: int, blob: int) -> None:
    for t in prange(nthreads):
        _call_entry(entry, t, blob)


@functools.cache
def _launcher() -> Any:
    """_launch's compiled entry point (compiled, or loaded from numba's cache, at first use)."""
    return _launch.compile((types.int64, types.int64, types.int64))


def _blob_type(context: Any, args: types.BaseTuple) -> ir.LiteralStructType:
    """The blob's layout: the task's address, then the arguments."""
    return ir.LiteralStructType([_I64, context.get_value_type(args)])


def _blob_bytes(args: types.BaseTuple) -> int:
    context = cpu_target.target_context
    return int(context.get_abi_sizeof(_blob_type(context, args)))


@intrinsic
def _pack(typingctx: Any, task: types.Type, args: types.BaseTuple, at: types.Type) -> Any:
    """The task's address and ``args`` stored at address ``at`` (a buffer of _blob_bytes(
    args' type) bytes that the caller keeps: the blob), and the address of a function entry(t, blob)
    that calls ``task(t, *args)``. Tasks raise nothing (error_model="numpy", no bounds
    checks): the status the call returns is not read."""
    argtys = [types.int64, *args.types]

    def codegen(context: Any, builder: Any, sig: Any, llargs: Any) -> Any:
        task_v, tup, at_v = llargs
        blob_t = _blob_type(context, args)
        blob = builder.inttoptr(at_v, blob_t.as_pointer())
        builder.store(task_v, cgutils.gep_inbounds(builder, blob, 0, 0))
        builder.store(_borrowed(context, builder, args, tup),
                      cgutils.gep_inbounds(builder, blob, 0, 1))

        module = builder.module
        entry = ir.Function(module, _ENTRY, name=module.get_unique_name("fork_entry"))
        entry.linkage = "internal"
        eb = ir.IRBuilder(entry.append_basic_block())
        t, blob_at = entry.args
        stored = eb.inttoptr(blob_at, blob_t.as_pointer())
        target = eb.load(cgutils.gep_inbounds(eb, stored, 0, 0))
        values = eb.load(cgutils.gep_inbounds(eb, stored, 0, 1))
        fnty = context.call_conv.get_function_type(types.none, argtys)
        context.call_conv.call_function(
            eb, eb.inttoptr(target, fnty.as_pointer()), types.none, argtys,
            [t, *(eb.extract_value(values, i) for i in range(len(args.types)))])
        eb.ret_void()
        return builder.ptrtoint(entry, _I64)

    return types.int64(task, args, at), codegen


def _borrowed(context: Any, builder: Any, tuple_type: types.BaseTuple, tup: Any) -> Any:
    """``tup`` with its arrays' meminfo pointers cleared: the task's views of them then
    count no references — both threads incrementing and decrementing the same counter
    at every slice made the layers 2-4 % slower. The arrays are the caller's, alive for
    the whole call (as a parallel loop's gufunc, which also sees null meminfos)."""
    values = []
    for i, ty in enumerate(tuple_type.types):
        v = builder.extract_value(tup, i)
        if isinstance(ty, types.Array):
            arr = context.make_array(ty)(context, builder, value=v)
            arr.meminfo = cgutils.get_null_value(arr.meminfo.type)
            v = arr._getvalue()
        values.append(v)
    return context.make_tuple(builder, tuple_type, values)


@njit(cache=True)
def _prepare(task: int, args: tuple, at: int) -> int:  # type: ignore[type-arg]
    return _pack(task, args, at)


def fork_call(task: Dispatcher, nthreads: int, *args: object) -> Thunk:
    """``task(t, *args)`` for t in range(nthreads), on the thread pool, as one call;
    compiled (or loaded from numba's cache) now. ``Fixed`` arguments are literals in the
    task, as for ``kernel_call``. A layer too small to split (nthreads 1) runs the same
    compiled task on the calling thread as t = 0: no parallel region."""
    if nthreads <= 1:
        return kernel_call(task, 0, *args)
    sig = (types.int64, *arg_types(args))
    task.compile(sig)
    compiled = task.overloads[sig]
    # The entry calls it for no result: a task that returned one would write past the slot.
    if compiled.signature.return_type != types.none:
        raise TypeError(f"a fork task returns nothing; {task.__name__} returns "
                        f"{compiled.signature.return_type}")
    addr = compiled.library.get_pointer_to_function(compiled.fndesc.llvm_func_name)
    # _prepare only stores the arguments: compiled for their plain types, it is shared by
    # tactics that differ in a Fixed flag (a literal is passed as its plain type).
    plain = [getattr(ty, "literal_type", ty) for ty in sig]
    conv = cpu_target.target_context.call_conv
    assert conv.get_function_type(types.none, plain) == conv.get_function_type(types.none, sig)
    values = arg_values(args)
    tuple_type = types.Tuple(plain[1:])
    blob = aligned_zeros(_blob_bytes(tuple_type), np.uint8)
    entry = _prepare.compile((types.int64, tuple_type, types.int64))(addr, values,
                                                                       blob.ctypes.data)
    # The arguments are converted once, here: a run passes three integers (converting the
    # tuple of a 1×1 layer's 34 arguments cost ≈ 1.3 µs a call, every layer of every run).
    # The blob borrows the arrays, which the thunk keeps alive with the task's code (held
    # by its dispatcher, a module global).
    run = functools.partial(_launcher(), entry, nthreads, blob.ctypes.data)
    run.keep = (blob, values)  # type: ignore[attr-defined]
    return run
