"""--fp16 as TensorRT means it (pydla.plan.weak_typing): each region the policy allows runs
in fp16 only where timed faster than fp32 (fp32 wins ties), casts at its edges counted;
--stronglyTyped keeps the network's types; fp16 I/O formats feed fp16 layers directly.

Timings are injected (a fake ``time_tactic``), so each decision is deterministic."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from pydla.backends.base import LayerSpec
from pydla.builder import BuildOptions, build
from pydla.dtypes import DType
from pydla.engine import LoadedModule
from pydla.errors import BuildError
from pydla.loadable import read_loadable
from pydla.plan import tactics
from pydla.plan.lower import IOFormat
from pydla.tools.layerinfo import layer_info
from tests.oracle import make_model, run_ort

FP16 = (DType.FLOAT16,)


def fake_times(monkeypatch: pytest.MonkeyPatch, *, fp32: float, fp16: float,
               cast: float) -> list[LayerSpec]:
    """Every layer takes ``fp32``/``fp16`` ms by its output type, a Cast ``cast`` ms;
    returns the specs timed."""
    timed: list[LayerSpec] = []

    def time_tactic(spec: LayerSpec, name: str, inputs: object, **_: object) -> float:
        timed.append(spec)
        if spec.op == "Cast":
            return cast
        return fp16 if spec.outputs[0].dtype is DType.FLOAT16 else fp32

    monkeypatch.setattr(tactics, "time_tactic", time_tactic)
    monkeypatch.setattr(tactics, "precompile_specs", lambda *a: None)
    return timed


def chain(n: int = 2):
    """x[1,8,4,4] -> n × (1×1 Conv) -> Softmax over channels: ``n`` layers fp16 may take,
    one the policy keeps fp32."""
    rng = np.random.default_rng(0)
    nodes, inits, prev = [], {}, "x"
    for i in range(n):
        inits[f"w{i}"] = (rng.standard_normal((8, 8, 1, 1)) * 0.3).astype(np.float32)
        nodes.append(helper.make_node("Conv", [prev, f"w{i}"], [f"c{i}"], name=f"conv{i}"))
        prev = f"c{i}"
    nodes.append(helper.make_node("Softmax", [prev], ["y"], name="softmax", axis=1))
    return make_model(nodes, {"x": (np.float32, [1, 8, 4, 4])}, ["y"], inits)


def precisions(data: bytes) -> dict[str, str]:
    return {lay.name: lay.precision for lay in read_loadable(data).layers}


def reasons(data: bytes) -> dict[str, str]:
    return {lay["name"]: lay.get("precision_reason", "")
            for lay in layer_info(read_loadable(data))["layers"]}


def test_fp32_kept_where_timed_faster(monkeypatch):
    fake_times(monkeypatch, fp32=1.0, fp16=1.8, cast=0.0)
    data = build(chain(), BuildOptions(allow=FP16))
    prec = precisions(data)
    assert prec["conv0"] == prec["conv1"] == "fp32"
    assert not [n for n in prec if "_to_fp16" in n]  # no casts left behind
    why = reasons(data)
    assert why["conv0"].startswith("fp32: 1.8× faster than fp16 here"), why
    assert why["softmax"] == "fp32: Softmax is numerically sensitive"


def test_fp16_kept_where_faster_with_its_casts(monkeypatch):
    fake_times(monkeypatch, fp32=1.0, fp16=0.5, cast=0.1)
    data = build(chain(), BuildOptions(allow=FP16))
    prec = precisions(data)
    assert prec["conv0"] == prec["conv1"] == "fp16"
    assert prec["softmax"] == "fp32"
    assert reasons(data)["conv1"].startswith("fp16: allowed and 1.7× faster than fp32 here")


def test_casts_count_and_fp32_wins_ties(monkeypatch):
    # One fp16 layer at 0.9 ms needs two 0.1 ms casts: 1.1 > 1.0 ms in fp32.
    fake_times(monkeypatch, fp32=1.0, fp16=0.9, cast=0.1)
    assert precisions(build(chain(1), BuildOptions(allow=FP16)))["conv0"] == "fp32"
    # Four layers at 0.93 ms share those casts: 3.92 < 4.0 ms, but not by the tie margin
    # (3 %: 3.88 ms).
    fake_times(monkeypatch, fp32=1.0, fp16=0.93, cast=0.1)
    assert precisions(build(chain(4), BuildOptions(allow=FP16)))["conv0"] == "fp32"
    fake_times(monkeypatch, fp32=1.0, fp16=0.9, cast=0.1)  # 3.8 < 3.88 ms
    assert precisions(build(chain(4), BuildOptions(allow=FP16)))["conv3"] == "fp16"


def test_layer_precisions_are_never_timed_away(monkeypatch):
    fake_times(monkeypatch, fp32=1.0, fp16=5.0, cast=0.0)
    data = build(chain(), BuildOptions(allow=FP16, layer_precisions={"conv1": "fp16"}))
    assert precisions(data)["conv1"] == "fp16" and precisions(data)["conv0"] == "fp32"
    assert reasons(data)["conv1"] == "fp16: --layerPrecisions"


def test_autocast_converts_without_timing(monkeypatch):
    fake_times(monkeypatch, fp32=1.0, fp16=5.0, cast=1.0)
    data = build(chain(), BuildOptions(autocast=DType.FLOAT16))
    assert precisions(data)["conv0"] == "fp16"
    assert reasons(data)["conv0"] == "fp16: --autocast"


def test_strongly_typed_keeps_the_network_types(monkeypatch):
    fake_times(monkeypatch, fp32=1.0, fp16=9.0, cast=0.0)
    w = np.full((8, 8), 0.1, np.float16)
    model = make_model([helper.make_node("MatMul", ["x", "w"], ["h"], name="fc"),
                        helper.make_node("Relu", ["h"], ["y"], name="relu")],
                       {"x": (np.float16, [2, 8])}, ["y"], {"w": w})
    data = build(model, BuildOptions(strongly_typed=True))
    assert set(precisions(data).values()) == {"fp16"}
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float16)
    got = LoadedModule(data).run([x])[0]
    assert got.dtype == np.float16
    np.testing.assert_allclose(got, run_ort(model, {"x": x})[0], rtol=1e-2, atol=1e-2)
    for flags in ({"allow": FP16}, {"autocast": DType.FLOAT16}):
        with pytest.raises(BuildError, match="--stronglyTyped"):
            build(model, BuildOptions(strongly_typed=True, **flags))


@pytest.mark.parametrize("flags", [{"allow": FP16}, {"autocast": DType.FLOAT16}])
def test_fp16_io_feeds_fp16_layers_without_casts(monkeypatch, flags):
    fake_times(monkeypatch, fp32=1.0, fp16=0.5, cast=0.5)
    model = chain()
    chw16 = IOFormat(DType.FLOAT16, "chw16")
    data = build(model, BuildOptions(input_formats=[chw16], **flags))
    prog = read_loadable(data)
    assert "x_to_fp16" not in {lay.name for lay in prog.layers}
    assert not [lay for lay in prog.layers if lay.op == "Cast" and "x" in lay.name]
    assert prog.tensors[prog.inputs[0].tensor].dtype is DType.FLOAT16
    assert precisions(data)["conv0"] == "fp16"
    x = np.random.default_rng(2).standard_normal((1, 8, 4, 4)).astype(np.float32)
    want = run_ort(model, {"x": x})[0]
    module = LoadedModule(data)
    got = module.run([x.astype(np.float16)])[0]
    np.testing.assert_allclose(got, want, rtol=1e-2, atol=2e-3)
    # Through the raw chw16 buffers, as cuDLA feeds it.
    bufs_in = [np.zeros(io.descriptor.size, np.uint8) for io in prog.inputs]
    bufs_out = [np.zeros(io.descriptor.size, np.uint8) for io in prog.outputs]
    from pydla import formats

    formats.pack(x.astype(np.float16), "chw16", out=bufs_in[0].view(np.float16))
    module.run_buffers(bufs_in, bufs_out)
    np.testing.assert_allclose(bufs_out[0].view(np.float32).reshape(want.shape), want,
                               rtol=1e-2, atol=2e-3)


def test_cli_layer_info_says_why(monkeypatch, tmp_path, capsys):
    import onnx

    from pydla.tools.cli import main

    fake_times(monkeypatch, fp32=1.0, fp16=3.0, cast=0.0)
    path = tmp_path / "chain.onnx"
    onnx.save(chain(), str(path))
    engine = f"--saveEngine={tmp_path / 'chain.bin'}"
    assert main(["build", f"--onnx={path}", engine, "--fp16", "--dumpLayerInfo"]) == 0
    assert "--fp16/--bf16 fp32: 3× faster than fp16 here" in capsys.readouterr().out
    assert main(["build", f"--onnx={path}", engine, "--fp16", "--stronglyTyped"]) != 0
    assert "--stronglyTyped runs the network's own types" in capsys.readouterr().err
