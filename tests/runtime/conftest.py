"""Models and device helpers shared by the runtime tests (built once per session)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest
from onnx import helper

from pydla import cudla, runtime
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.plan.lower import IOFormat
from tests.oracle import make_model


def add_mul_model():  # noqa: ANN201
    """Two inputs, two outputs: s = relu(a + b), p = a * b (tiny: [1, 4, 2, 3])."""
    return make_model([helper.make_node("Add", ["a", "b"], ["t"]),
                       helper.make_node("Relu", ["t"], ["s"]),
                       helper.make_node("Mul", ["a", "b"], ["p"])],
                      {"a": (np.float32, [1, 4, 2, 3]), "b": (np.float32, [1, 4, 2, 3])},
                      ["s", "p"])


def slow_model(layers: int = 6, n: int = 512):  # noqa: ANN201
    """A chain of MatMuls that each take a few milliseconds (for timeouts)."""
    rng = np.random.default_rng(0)
    inits = {f"w{i}": (rng.standard_normal((n, n)) / np.sqrt(n)).astype(np.float32)
             for i in range(layers)}
    nodes = [helper.make_node("MatMul", ["x" if i == 0 else f"h{i}", f"w{i}"],
                              [f"h{i + 1}" if i < layers - 1 else "y"]) for i in range(layers)]
    return make_model(nodes, {"x": (np.float32, [1, n, n])}, ["y"], inits)


@pytest.fixture(scope="session")
def add_mul() -> bytes:
    return build(add_mul_model())


@pytest.fixture(scope="session")
def add_mul_chw16() -> bytes:
    fmt = IOFormat(DType.FLOAT16, "chw16")
    return build(add_mul_model(), BuildOptions(input_formats=[fmt, fmt],
                                               output_formats=[fmt, fmt]))


@pytest.fixture(scope="session")
def slow() -> bytes:
    return build(slow_model())


def check(result: tuple) -> object:
    err, *values = result
    assert err == 0, err
    return values[0] if len(values) == 1 else values or None


@dataclass
class Setup:
    """A device with a loaded module and registered, allocated buffers for one task."""

    dev: int
    module: int
    in_descs: list
    out_descs: list
    stats_descs: list
    in_ptrs: list[int]
    out_ptrs: list[int]

    def task(self, outputs: list[int] | None = None) -> cudla.Task:
        task = cudla.Task()
        task.module_handle = self.module
        task.input_tensor = self.in_ptrs
        task.output_tensor = self.out_ptrs if outputs is None else outputs
        return task

    def submit(self, task: cudla.Task | None = None, stream: int = 0, flags: int = 0) -> None:
        """Submit one task; ``task`` stays referenced for the call (the address of a record
        that was garbage-collected is refused, not read)."""
        task = task or self.task()
        cudla.submit_task(self.dev, int(task), 1, stream, flags)

    def write_inputs(self, arrays: list[np.ndarray]) -> None:
        for ptr, arr, d in zip(self.in_ptrs, arrays, self.in_descs):
            check(runtime.cudaMemcpy(ptr, np.ascontiguousarray(arr), d.size_,
                                     runtime.cudaMemcpyKind.cudaMemcpyHostToDevice))

    def read_outputs(self) -> list[np.ndarray]:
        outs = []
        for ptr, d in zip(self.out_ptrs, self.out_descs):
            host = np.zeros(d.size_, np.uint8)
            check(runtime.cudaMemcpy(host, ptr, d.size_,
                                     runtime.cudaMemcpyKind.cudaMemcpyDeviceToHost))
            outs.append(host)
        return outs


def open_setup(loadable: bytes) -> Setup:
    dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
    module = cudla.module_load_from_memory(dev, loadable, len(loadable), 0)
    kinds = cudla.ModuleAttributeType
    ins = cudla.module_get_attributes(module, kinds.INPUT_TENSOR_DESCRIPTORS)
    outs = cudla.module_get_attributes(module, kinds.OUTPUT_TENSOR_DESCRIPTORS)
    stats = cudla.module_get_attributes(module, kinds.OUTPUT_TASK_STATISTICS_DESCRIPTORS)
    regs = []
    for d in ins + outs:
        ptr = check(runtime.cudaMalloc(d.size_))
        regs.append(cudla.mem_register(dev, ptr, d.size_, 0))
    return Setup(dev, module, ins, outs, stats, regs[:len(ins)], regs[len(ins):])


def close_setup(s: Setup) -> None:
    for p in s.in_ptrs + s.out_ptrs:
        cudla.mem_unregister(s.dev, p)
        check(runtime.cudaFree(p))
    cudla.module_unload(s.module, 0)
    cudla.destroy_device(s.dev)


@pytest.fixture
def setup(add_mul: bytes) -> Iterator[Setup]:
    s = open_setup(add_mul)
    yield s
    close_setup(s)


def inputs(seed: int = 0, shape: tuple[int, ...] = (1, 4, 2, 3)) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(shape).astype(np.float32) for _ in range(2)]


def expected(a: np.ndarray, b: np.ndarray) -> list[np.ndarray]:
    return [np.maximum(a + b, 0), a * b]
