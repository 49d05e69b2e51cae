"""Quantize real float models with onnxruntime (QDQ per-channel and QOperator), build them
with pydla and report how many convolutions run int8 and how closely pydla agrees with
onnxruntime running the same quantized model (issue 24's acceptance figures).

    python -m scripts.int8_real_models MODEL.onnx INPUT=1x3x224x224 [MODEL INPUT ...]

Calibration: 16 random inputs (uniform [0, 1)); evaluation: 3 other random inputs. The
quantization step of an output is the scale of the QuantizeLinear nearest upstream of it.
Model files are not part of the repository (see the report in the commit message).
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper


def _fixed(model: onnx.ModelProto, name: str, shape: list[int]) -> onnx.ModelProto:
    for vi in model.graph.input:
        if vi.name == name:
            for d, n in zip(vi.type.tensor_type.shape.dim, shape):
                d.Clear()
                d.dim_value = n
    return onnx.shape_inference.infer_shapes(model)


def _step(model: onnx.ModelProto, output: str) -> float | None:
    """Scale of the last QuantizeLinear upstream of ``output`` (its quantization step)."""
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    todo, seen = [output], set()
    while todo:
        name = todo.pop(0)
        node = producer.get(name)
        if node is None or name in seen:
            continue
        seen.add(name)
        if node.op_type in ("QuantizeLinear", "DequantizeLinear") and node.input[1] in inits:
            return float(inits[node.input[1]].reshape(-1)[0])
        todo += list(node.input)
    return None


def quantize(src: Path, dst: Path, calib: list[dict], fmt: str = "QDQ") -> onnx.ModelProto:
    """onnxruntime's quantize_static of the float model at ``src`` into ``dst`` (``fmt``: QDQ
    or QOperator; per-channel, uint8 activations, int8 weights, calibrated on ``calib``)."""
    from onnxruntime import quantization as q

    class Reader(q.CalibrationDataReader):
        def __init__(self, feeds: list[dict]) -> None:
            self.it = iter(feeds)

        def get_next(self) -> dict | None:
            return next(self.it, None)

    q.quantize_static(str(src), str(dst), Reader(calib), quant_format=getattr(
        q.QuantFormat, fmt), per_channel=True, activation_type=q.QuantType.QUInt8,
        weight_type=q.QuantType.QInt8)
    return onnx.load(dst)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("pairs", nargs="+", help="MODEL.onnx INPUT=AxBxC pairs")
    ap.add_argument("--formats", default="QDQ,QOperator")
    args = ap.parse_args()
    logging.disable(logging.WARNING)
    from onnxruntime import InferenceSession

    from pydla.builder import BuildOptions, build
    from pydla.engine.module import LoadedModule
    from pydla.tools.layerinfo import layer_info

    tmp = Path(tempfile.mkdtemp())
    formats = args.formats.split(",")
    for path, spec in zip(args.pairs[::2], args.pairs[1::2]):
        name, dims = spec.split("=")
        shape = [int(d) for d in dims.split("x")]
        model = _fixed(onnx.load(path), name, shape)
        if model.opset_import[0].version < 13:  # per-channel QDQ needs opset 13
            model = onnx.version_converter.convert_version(model, 13)
        src = tmp / "float.onnx"
        onnx.save(model, src)
        rng = np.random.default_rng(0)
        calib = [{name: rng.random(shape, np.float32)} for _ in range(16)]
        tests = [{name: rng.random(shape, np.float32)} for _ in range(3)]
        for fmt in formats:
            dst = tmp / f"{fmt}.onnx"
            qmodel = quantize(src, dst, calib, fmt)
            t0 = time.perf_counter()
            module = LoadedModule(build(qmodel, BuildOptions(autotune=False)))
            built = time.perf_counter() - t0
            layers = layer_info(module.program)["layers"]
            n_q = sum(lay["type"] == "QConv" for lay in layers)
            n_f = sum(lay["type"] in ("Conv", "ConvTranspose") for lay in layers)
            ort = InferenceSession(str(dst), providers=["CPUExecutionProvider"])
            out = ort.get_outputs()[0].name
            step = _step(qmodel, out)
            cos, within, worst = [], [], 0.0
            for feed in tests:
                got = module.run(feed)[0].astype(np.float64).ravel()
                want = ort.run(None, feed)[0].astype(np.float64).ravel()
                cos.append(got @ want / (np.linalg.norm(got) * np.linalg.norm(want)))
                diff = np.abs(got - want)
                worst = max(worst, float(diff.max()))
                if step is not None:
                    within.append(float(np.mean(diff <= step * 1.001)))
            print(f"{Path(path).name} {fmt}: {n_q}/{n_q + n_f} convolutions int8, "
                  f"{len(layers)} layers, built in {built:.1f} s; cosine min {min(cos):.6f}, "
                  f"max |diff| {worst:.4g}, step {step}, within one step "
                  f"{min(within) * 100 if within else float('nan'):.2f} %")


if __name__ == "__main__":
    main()
