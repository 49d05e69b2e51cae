"""Tactics tuned on the GPU at build and recorded in the loadable: a load builds only the
recorded candidates and times nothing; a recorded tactic that cannot be built is timed
again; ``pydla build --target=cuda`` records them too."""

from __future__ import annotations

import numpy as np

from tests.gpu.gpu import cosine, require_gpu

cp = require_gpu()

import pydla.backends.cuda.tuning as tuning  # noqa: E402
from pydla.backends.cuda import CudaBackend  # noqa: E402
from pydla.builder import BuildOptions, build  # noqa: E402
from pydla.dtypes import DType  # noqa: E402
from pydla.engine.module import LoadedModule  # noqa: E402
from pydla.loadable import read_loadable  # noqa: E402
from pydla.tools.cli import main  # noqa: E402
from tests.models.families import resnet50  # noqa: E402


def test_resnet_tactics_recorded_at_build_and_used_at_load():
    model, feeds = resnet50(size=64, batch=2)
    data = build(model, BuildOptions(autocast=DType.FLOAT16, target="cuda"))
    program = read_loadable(data)
    tactics = program.target["cuda_tactics"]
    assert set(tactics) == {layer.name for layer in program.layers}
    assert program.build["cuda_autotune"]["timed_layers"] > 0
    convs = [tactics[layer.name] for layer in program.layers if layer.op == "Conv"]
    assert all(t.startswith(("cudnn/", "depthwise", "direct")) for t in convs), convs
    module = LoadedModule(data, CudaBackend())
    summary = module.bound.summary()
    assert summary["timed_layers"] == 0 and summary["recorded_layers"] == len(tactics)
    assert summary["tactics"] == tactics
    got = module.run([feeds["input"]])[0]
    module.bound.close()
    want = LoadedModule(data).run([feeds["input"]])[0]
    assert cosine(got, want) >= 0.999


def test_unbuildable_recorded_tactic_is_timed_again(monkeypatch):
    model, feeds = resnet50(size=32, batch=1, layers=(1, 1))
    real = tuning.tune

    def bogus(data, **kwargs):  # noqa: ANN001, ANN003, ANN202
        result = real(data, **kwargs)
        result["tactics"] = {k: "no-such-kernel" for k in result["tactics"]}
        return result

    monkeypatch.setattr(tuning, "tune", bogus)
    data = build(model, BuildOptions(target="cuda"))
    module = LoadedModule(data, CudaBackend())
    summary = module.bound.summary()
    assert summary["recorded_layers"] == 0
    assert any("unavailable" in n for n in summary["notes"])
    got = module.run([feeds["input"]])[0]
    module.bound.close()
    want = LoadedModule(data).run([feeds["input"]])[0]
    assert np.linalg.norm(got - want) <= 1e-2 * np.linalg.norm(want)


def test_cli_target_cuda_records_tactics(tmp_path, capsys):
    import onnx

    model, _ = resnet50(size=32, batch=1, layers=(1,))
    onnx.save(model, tmp_path / "m.onnx")
    out = tmp_path / "m.bin"
    rc = main(["build", f"--onnx={tmp_path / 'm.onnx'}", "--target=cuda",
               f"--saveEngine={out}"])
    assert rc == 0, capsys.readouterr().err
    program = read_loadable(out.read_bytes())
    assert program.target["backend"] == "cuda" and program.target["cuda_arch"].startswith("sm_")
    assert set(program.target["cuda_tactics"]) == {layer.name for layer in program.layers}
