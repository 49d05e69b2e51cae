"""Resource bombs: models and loadables that ask for more memory than the machine has are
refused before anything is allocated, with one line naming the tensor and its size."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from pydla import cudla
from pydla.builder import BuildOptions, build, build_memory_limit
from pydla.engine import memory
from pydla.engine.faults import InvalidParamError
from pydla.engine.module import LoadedModule
from pydla.errors import ModelImportError, ResourceLimitError
from pydla.frontend.onnx import import_model
from pydla.plan.memory import check_build_memory, estimate_build_memory
from tests.oracle import make_model

F32 = onnx.TensorProto.FLOAT
ONE = numpy_helper.from_array(np.array([1.0], np.float32))
AS_LIMIT = 4_000_000 * 1024  # ulimit -v 4000000 (KiB)


def _raw_model(nodes: list, inputs: dict[str, list[int]], inits: dict[str, np.ndarray]
               ) -> onnx.ModelProto:
    """Without ONNX shape inference on the way in: the shapes stay as hostile as written."""
    graph = helper.make_graph(
        nodes, "bomb", [helper.make_tensor_value_info(n, F32, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", F32, None)],
        [numpy_helper.from_array(v, n) for n, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = min(model.ir_version, 10)
    return model


def _const_of_shape(shape: list[int]) -> onnx.ModelProto:
    return _raw_model([helper.make_node("ConstantOfShape", ["s"], ["c"], value=ONE),
                       helper.make_node("Add", ["x", "c"], ["y"])],
                      {"x": [1]}, {"s": np.array(shape, np.int64)})


BOMBS = {  # name: (model, the tensor the refusal names, its size as printed)
    "input": (_raw_model([helper.make_node("Relu", ["x"], ["y"])],
                         {"x": [1, 3, 200000, 200000]}, {}), "'x'", "447.0 GiB"),
    "constant_of_shape": (_const_of_shape([65536, 65536]), "'c'", "16.0 GiB"),
    "expand": (_raw_model([helper.make_node("Expand", ["x", "s"], ["y"])], {"x": [1, 1]},
                          {"s": np.array([1 << 20, 1 << 20], np.int64)}), "'y'", "4.0 TiB"),
    # 2**64 elements: numpy's int64 product of the shape wraps to 0
    "int64_wrap": (_const_of_shape([1 << 32, 1 << 32]), "'c'", "TiB"),
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_bomb_refused_naming_tensor(name: str) -> None:
    model, tensor, size = BOMBS[name]
    with pytest.raises(ResourceLimitError) as info:
        build(model)
    message = str(info.value)
    assert f"tensor {tensor}" in message and size in message and "\n" not in message
    assert "--buildMemoryLimit" in message
    assert isinstance(info.value, MemoryError)


def _scalar(name: str, value: object, dtype: type = np.int64) -> onnx.TensorProto:
    return numpy_helper.from_array(np.array(value, dtype), name)


def _generator(nodes: list, inits: list, inputs: dict[str, list[int]] | None = None
               ) -> onnx.ModelProto:
    model = _raw_model(nodes, inputs or {}, {})
    model.graph.initializer.extend(inits)
    return model


SMALL = {"x": [1, 1, 4, 4]}
GENERATED = {  # name: (model, what the one line says)
    "tile": (_generator([helper.make_node("Tile", ["x", "r"], ["y"])],
                        [_scalar("r", [1, 1, 1 << 16, 1 << 16])], SMALL), "tensor 'y'"),
    "pad": (_generator([helper.make_node("Pad", ["x", "p"], ["y"])],
                       [_scalar("p", [0, 0, 1 << 17, 1 << 17, 0, 0, 1 << 17, 1 << 17])], SMALL),
            "tensor 'y'"),
    "resize": (_generator([helper.make_node("Resize", ["x", "", "s"], ["y"])],
                          [_scalar("s", [1, 1, 40000, 40000], np.float32)], SMALL),
               "tensor 'y'"),
    "range": (_generator([helper.make_node("Range", ["a", "b", "c"], ["y"])],
                         [_scalar("a", 0), _scalar("b", 1 << 40), _scalar("c", 1)]),
              "(Range): Range would be a build-time constant [1099511627776]"),
    "window": (_generator([helper.make_node("HannWindow", ["n"], ["y"])],
                          [_scalar("n", 1 << 40)]), "(HannWindow): HannWindow would be"),
    "eye_like": (_generator([helper.make_node("EyeLike", ["x"], ["y"])], [],
                            {"x": [200000, 200000]}), "EyeLike would be a build-time constant"),
}


@pytest.mark.parametrize("name", sorted(GENERATED))
def test_generated_constant_refused_before_computing(name: str) -> None:
    model, fragment = GENERATED[name]
    with pytest.raises(ResourceLimitError) as info:
        build(model)
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_constants_computed_at_import_add_up_to_the_limit() -> None:
    """Each ConstantOfShape is small enough to fold; together they pass the limit."""
    nodes = [helper.make_node("ConstantOfShape", ["s"], [f"c{i}"], value=ONE)
             for i in range(3)]
    nodes += [helper.make_node("Sum", ["x", "c0", "c1", "c2"], ["y"])]
    model = _generator(nodes, [_scalar("s", [100, 1000])], {"x": [100, 1000]})
    with pytest.raises(ResourceLimitError) as info:
        build(model, BuildOptions(memory_limit=1_000_000))
    assert str(info.value).startswith("node 'ConstantOfShape_2' (ConstantOfShape): the "
                                      "constants computed at build time would reach 1,200,000")


def test_range_to_infinity_is_an_import_error() -> None:
    model = _generator([helper.make_node("Range", ["a", "b", "c"], ["y"])],
                       [_scalar("a", 0, np.float32), _scalar("b", np.inf, np.float32),
                        _scalar("c", 1, np.float32)])
    with pytest.raises(ModelImportError, match="must be finite"):
        build(model)


def test_limit_options() -> None:
    default = memory.default_memory_limit()
    assert default == int(memory.machine_memory_bytes() * memory.MEMORY_SHARE)
    assert build_memory_limit(BuildOptions())[0] == default
    assert build_memory_limit(BuildOptions(mem_pools={"workspace": 4 * default}))[0] == 4 * default
    assert build_memory_limit(BuildOptions(mem_pools={"workspace": 1}))[0] == default
    assert build_memory_limit(BuildOptions(memory_limit=1000))[0] == 1000


def _tiny() -> onnx.ModelProto:
    """Relu of a 64x64 input plus a 64x64 weight: 16 KiB per tensor."""
    w = np.ones((64, 64), np.float32)
    return make_model([helper.make_node("Add", ["x", "w"], ["t"]),
                       helper.make_node("Relu", ["t"], ["y"])],
                      {"x": (np.float32, [64, 64])}, ["y"], {"w": w})


def test_estimate_and_total_refusal() -> None:
    graph = import_model(_tiny())
    need = estimate_build_memory(graph, autotune=True, calibration=True, fold_limit=1 << 26)
    tensor = 64 * 64 * 4
    assert need.weights == tensor
    assert need.activations == 2 * tensor  # x and t alive at Add; t and y at Relu
    assert need.autotune == tensor * 3 + 2 * tensor  # float64 samples + cast, two outputs
    assert need.calibration == 3 * tensor
    # every tensor fits a 20 KiB limit, their sum does not: the refusal gives the parts
    with pytest.raises(ResourceLimitError, match=r"build needs about .*weights 16,384"):
        check_build_memory(graph, 20_000, "raise it", autotune=True, calibration=False,
                           fold_limit=1 << 26)
    with pytest.raises(ResourceLimitError, match="build memory limit is 20,000 bytes"):
        build(_tiny(), BuildOptions(memory_limit=20_000))


def test_load_limit_refuses_before_binding() -> None:
    loadable = build(_tiny(), BuildOptions(autotune=False))
    memory.set_load_memory_limit(100)
    try:
        with pytest.raises(ResourceLimitError, match=r"activation arena \(32,768 bytes\) and I/O"):
            LoadedModule(loadable)
        dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
        try:
            with pytest.raises(cudla.CudlaError) as info:
                cudla.module_load_from_memory(dev, loadable, len(loadable), 0)
            assert info.value.status == cudla.Status.ErrorOutOfResources
        finally:
            cudla.destroy_device(dev)
    finally:
        memory.set_load_memory_limit(None)
    LoadedModule(loadable)  # the default limit loads it
    with pytest.raises(InvalidParamError):
        memory.set_load_memory_limit(0)


_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from pydla.tools.cli import main
sys.exit(main(["build", "--onnx", sys.argv[1], "--saveEngine", sys.argv[2]]))
"""


@pytest.mark.parametrize("name", ["input", "constant_of_shape", "expand"])
def test_cli_bomb_one_line_exit_1_under_4gb(name: str, tmp_path: Path) -> None:
    model, tensor, size = BOMBS[name]
    path = tmp_path / f"{name}.onnx"
    onnx.save(model, path)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    proc = subprocess.run([sys.executable, "-c", _CHILD.format(limit=AS_LIMIT), str(path),
                           str(tmp_path / "out.bin")], capture_output=True, text=True,
                          timeout=120)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # CPU seconds, not wall: the shared test machine's load must not decide the verdict
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("pydla build: error: tensor " + tensor), lines
    assert size in lines[0] and "limit" in lines[0]
    assert not (tmp_path / "out.bin").exists()
    assert cpu <= 5.0, cpu


_LOAD_CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from pydla import cudla
data = open(sys.argv[1], "rb").read()
dev = cudla.create_device(0, cudla.Mode.CUDA_DLA)
try:
    cudla.module_load_from_memory(dev, data, len(data), 0)
except cudla.CudlaError as e:
    print(int(e.status), e.__cause__)
    sys.exit(1)
"""


def test_load_of_a_large_arena_refused_under_4gb(tmp_path: Path) -> None:
    """A valid loadable whose 3 GiB tensors fit this machine but not a 4 GB address space:
    refused before allocating, not a MemoryError halfway through binding."""
    model = make_model([helper.make_node("Relu", ["x"], ["y"])],
                       {"x": (np.float32, [1, 3, 16384, 16384])}, ["y"])
    data = build(model, BuildOptions(autotune=False, memory_limit=1 << 40))
    path = tmp_path / "big.bin"
    path.write_bytes(data)
    proc = subprocess.run([sys.executable, "-c", _LOAD_CHILD.format(limit=AS_LIMIT), str(path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stderr
    status, _, message = proc.stdout.strip().partition(" ")
    assert int(status) == cudla.Status.ErrorOutOfResources
    assert "activation arena (" in message and "load memory limit" in message
