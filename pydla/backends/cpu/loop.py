"""The Loop layer on the CPU: its body sub-program bound once, run once per iteration.

The body is bound as a program of its own (its own arena, kernels and workspace) when the
Loop's program is bound. A run copies the captured tensors into the body's inputs once,
the carried values' initial states in, then per iteration writes the iteration number and
condition, runs the body's layers and copies each carried result back over its input
(carried states are a few kB to a few hundred kB: SLANet's decoder copies 68 kB per step,
noise beside its GRU cell and attention). It stops as ONNX Loop does (pydla.loadable.
rules_control), and refuses to run past the layer's ``max_iterations``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numba
import numpy as np

from pydla.backends.base import LayerSpec, RunFn
from pydla.backends.cpu import dynamic_params as _dynamic  # noqa: F401  (registers kernels)
from pydla.backends.cpu.registry import kernel
from pydla.errors import KernelError, PydlaError
from pydla.loadable.program import LayerInfo, Program


@kernel("Loop")
def _alone(spec: LayerSpec) -> RunFn:
    # Registered so the reader accepts the op for this backend; the body it runs is part
    # of the program, so CpuProgram binds it (bind_loop), never a lone LayerSpec.
    raise KernelError(spec.name, spec.op, "a Loop layer is bound with the program holding "
                      "its body, not alone")


def body_program(program: Program, index: int) -> Program:
    """Sub-program ``index`` of ``program`` as a Program of its own (same weights)."""
    body = program.subprograms[index]
    return Program(version=program.version, producer=program.producer, target=program.target,
                   tensors=body.tensors, layers=body.layers, inputs=body.inputs,
                   outputs=body.outputs, arena_bytes=body.arena_bytes,
                   weights=program.weights, build={})


def bind_loop(layer: LayerInfo, program: Program, bind: Callable[[Program], Any]) -> RunFn:
    """A RunFn for ``layer``: ``bind`` (CpuProgram) binds its body sub-program."""
    body = bind(body_program(program, int(layer.attrs["body"])))
    n = int(layer.attrs["num_carried"])
    cap = int(layer.attrs["max_iterations"])
    ins = body.input_views
    outs = body.output_views
    iteration, cond_in = ins[0], ins[1]
    state_in, captured_in = ins[2:2 + n], ins[2 + n:]
    cond_out, state_out = outs[0], outs[1:]
    thunks = body.thunks
    names = [lay.name for lay in body.program.layers]
    pairs = list(zip(state_in, state_out))
    # The body runs on one thread (its kernels' parts one after another): a decoder step
    # is a few hundred µs of small layers, and with other processes on the cores every
    # layer's fork-join barrier waits out a time slice. SLANet's body under load ~10 on 2
    # cores: 133 ms a step on 2 threads, 2 ms on 1. A governor per body (as the program's,
    # pydla.backends.cpu.governor) started at 1 thread still spent 30 % of the steps on 2
    # after noisy probes and ran 9-19 s; one thread ran the whole model in 0.3-1 s.

    def run(inputs: Sequence[np.ndarray | None], outputs: Sequence[np.ndarray]) -> None:
        m, cond = inputs[-2], inputs[-1]
        trips = None if m is None else int(m.reshape(-1)[0])
        go = True if cond is None else bool(cond.reshape(-1)[0])
        for view, x in zip(state_in, inputs[:n]):
            np.copyto(view, x)  # type: ignore[arg-type]
        for view, x in zip(captured_in, inputs[n:-2]):
            np.copyto(view, x)  # type: ignore[arg-type]
        i = 0
        outer = numba.get_num_threads()
        if outer != 1:
            numba.set_num_threads(1)
        try:
            while go and (trips is None or i < trips):
                if i >= cap:
                    raise KernelError(layer.name, "Loop", f"still running after {cap} "
                                      "iterations, the layer's max_iterations")
                iteration.fill(i)
                cond_in.fill(go)
                k = 0
                try:
                    for k, thunk in enumerate(thunks):  # noqa: B007  (k names a failure)
                        thunk()
                except PydlaError as e:
                    raise KernelError(layer.name, "Loop", f"iteration {i}, body layer "
                                      f"{names[k]!r}: {e}") from e
                except Exception as e:  # a kernel bug or a numeric failure in the body
                    raise KernelError(layer.name, "Loop", f"iteration {i}, body layer "
                                      f"{names[k]!r}: {type(e).__name__}: {e}") from e
                if cond is not None:
                    go = bool(cond_out.reshape(-1)[0])
                for dst, src in pairs:
                    np.copyto(dst, src)
                i += 1
        finally:
            if outer != 1:  # the layers after the loop run on the program's count
                numba.set_num_threads(outer)
        for y, view in zip(outputs, state_in):
            np.copyto(y, view)

    return run
